"""The static step (decode, draft and verify over a static-shape cache) and its CUDA graphs, eager or compiled.

* :func:`static_step`: the forward of ``k`` new tokens per row written at a slot tensor, attending over the whole
  buffer, so every call of a width has the same shapes and reads no host value: what a CUDA graph can capture.
* :class:`GraphedSteps` (``compile="graphs"`` in every generator): that step captured explicitly with
  ``torch.cuda.CUDAGraph`` over buffers made once (tokens, device lengths, RoPE tables, the cache), one graph per k,
  and replayed. A fresh machine pays a warm-up and a capture per width, seconds at most, and every replay is counted
  (``replays``): a row that claims graphs can prove it.
* ``compile="compiled"``: the same graphs over a step whose decoder layer is compiled by inductor ONCE
  (:func:`compiled_layer`, regional compilation): every layer of every model with the same shapes reuses the one
  compiled layer (its weights are inputs, not constants), so a 36-layer model pays two compiles (the decode width,
  then one for every verify width), not one per layer and width.
  Inductor fuses the norms, RoPE, residual adds, SiLU times up and the cache writes into a few kernels; the graphs
  then remove the launches. On a CPU the compiled layer runs without capture (inductor's C++ backend).
"""
from __future__ import annotations

import time
import weakref

import torch

from helpers.models.decoder import MiniDecoder, attention_bias

def _layer_step(layer, x, cos, sin, mask, keys, values, write):
    """One layer of a static step: its keys and values written at ``write``, attention over the whole buffer."""
    return layer(x, cos, sin, mask, (keys, values), write)


_COMPILED_LAYER = None


def compiled_layer():
    """:func:`_layer_step` under ``torch.compile`` (inductor, one graph, no breaks): built once per process and shared
    by every layer and model. Dynamo compiles a model shape's decode step (width 1) with static shapes, and the first
    other width once more with the width (and any other size that changed) symbolic, which every later width reuses:
    two compiles per model, not one per verify width."""
    global _COMPILED_LAYER
    if _COMPILED_LAYER is None:
        # the layers' modules are inlined as inputs (the default since torch 2.5): layers of one shape share a graph;
        # a speculative pair at several widths needs more graphs than dynamo's default limit of 8
        config = torch._dynamo.config
        for name, least in (("recompile_limit", 256), ("accumulated_recompile_limit", 4096)):
            if hasattr(config, name):  # (older torch names them *_cache_size_limit; the defaults then apply)
                setattr(config, name, max(getattr(config, name), least))
        _COMPILED_LAYER = torch.compile(_layer_step, fullgraph=True)
    return _COMPILED_LAYER


def static_step(model: MiniDecoder, tokens, cos, sin, mask, keys, values, write, *, compiled: bool = False):
    """Logits of ``tokens`` (batch, k) written at slots ``write`` (batch, k) of the per-layer ``keys``/``values``
    buffers, attending over the whole buffers through the boolean ``mask`` (batch, 1, k, capacity); ``cos``/``sin``
    (batch, 1, k, head_dim). ``compiled``: each layer through :func:`compiled_layer`."""
    run = compiled_layer() if compiled else _layer_step
    x = model.embed_tokens(tokens)
    mask = attention_bias(mask, model.config.num_heads // model.config.num_kv_heads, tokens.shape[1], x.dtype)
    for layer, layer_keys, layer_values in zip(model.layers, keys, values):
        x = run(layer, x, cos, sin, mask, layer_keys, layer_values, write)
    return model.lm_head(model.norm(x))


# ------------------------------------------------------------------------------------------------ explicit CUDA graphs


class GraphedSteps:
    """Forwards of ``k`` new tokens per row over ONE static cache, each width captured once as a CUDA graph
    (:func:`capture_steps` captures ahead of a timed run, else the first call of a width does).

    What ``torch.compile(mode="reduce-overhead")`` would do, without its guards (which skip a graph whose inputs are
    mutated in place, as a KV cache is): a fresh GPU machine pays a warm-up and a capture per width (well under a
    second for the workbook's models). With ``compiled`` the captured body runs the inductor-compiled layer
    (:func:`compiled_layer`); its compile happens in the first warm-up of each width and is counted in ``compile_s``.

    Everything a step reads lives in buffers allocated here once: the tokens, each row's stored length and padding
    on the device, the RoPE tables up to the capacity, the slot indices. The captured body derives positions, write
    slots and the attention mask from those tensors, so a replay reads no host value and allocates nothing; the
    cache's keys and values are written in place at the slots. The host keeps the cache's lengths as always
    (``KVCache.lengths``); a replay advances the device copy too, and only a rollback or a new generation uploads
    lengths again (a pinned, asynchronous copy: no sync).

    On a CPU (or with ``capture=False``) the same body runs without capture: that is what the tests check (equal
    logits, no host read), and it keeps every caller device-agnostic. ``replays`` counts graph replays, the proof a row
    records that graphs really ran.
    """

    MAX_WIDTH = 32  # verify blocks up to gamma + 1 = 32 tokens are graphed; wider calls run eagerly

    def __init__(self, model: MiniDecoder, batch_size: int, capacity: int, *, capture: bool | None = None,
                 compiled: bool = False):
        self.model, self.compiled = model, compiled
        self.cache = model.new_cache(batch_size, capacity, static_shapes=True)
        device = self.cache.device
        self.capture = device.type == "cuda" if capture is None else capture
        if self.capture and device.type != "cuda":
            raise ValueError("CUDA graphs need the model on a CUDA device; pass capture=False to run the same "
                             "static step eagerly")
        dtype = model.embed_tokens.weight.dtype
        slots = torch.arange(capacity, device=device)
        self.cos, self.sin = model.rotary(slots, capacity, dtype)  # tables for every position the cache can hold
        self.slots = slots
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=device)  # stored slots per row (device)
        self.pads = torch.zeros(batch_size, dtype=torch.long, device=device)
        self.valid = torch.ones(batch_size, capacity, dtype=torch.bool, device=device)
        self._synced: tuple | None = None  # (lengths, pads source, valid source) the device buffers hold
        self.graphs: dict[int, tuple] = {}  # width -> (graph, tokens buffer, logits buffer)
        self.replays = 0
        self.captures = 0
        self.compile_s = 0.0  # wall time of each width's first runs (inductor's compile, warm-up and capture)
        self._warm: set[int] = set()  # widths that ran once without capture (captured ones are in self.graphs)
        self.owner = lambda: None  # set by graphed_steps(): the decoder using this cache now
        self._keys = self.cache.keys[0].data_ptr()  # graphs hold these addresses: a reallocated cache voids them

    # -------------------------------------------------------------- the step every graph holds

    def _body(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of ``tokens`` (batch, k) after each row's stored slots; writes their keys/values, advances the
        device lengths. Device tensors only: no host value is read."""
        k = tokens.shape[1]
        steps = self.slots[:k]
        write = self.lengths[:, None] + steps  # (batch, k): slots the new tokens take
        positions = write - self.pads[:, None]
        cos, sin = self.cos[positions][:, None], self.sin[positions][:, None]  # (batch, 1, k, head_dim)
        slot = self.slots[None, None, :]
        mask = ((slot <= write[:, :, None]) & self.valid[:, None, :]) | (slot == write[:, :, None])
        logits = static_step(self.model, tokens, cos, sin, mask[:, None], self.cache.keys, self.cache.values, write,
                             compiled=self.compiled)
        self.lengths.add_(k)
        return logits

    # -------------------------------------------------------------- calls

    def reset(self) -> None:
        """Empty the cache for a new generation (the buffers, and so the captured graphs, stay)."""
        self.cache.reset()

    def graphable(self, input_ids: torch.Tensor) -> bool:
        """Whether ``input_ids`` can take the static step: a decode, draft or verify step (the cache already holds
        a prefill, so prompts of every length do not each capture a graph), the batch the buffers were made for, at
        most :attr:`MAX_WIDTH` tokens, and the cache still in the buffers the graphs were captured over."""
        return (input_ids.shape[0] == self.cache.batch_size and 1 <= input_ids.shape[1] <= self.MAX_WIDTH
                and max(self.cache.lengths) > 0 and self.cache.keys[0].data_ptr() == self._keys)

    def __call__(self, input_ids: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Logits (batch, k or 1, vocab) of ``input_ids`` (batch, k) placed after what the cache holds."""
        if not self.graphable(input_ids):
            raise ValueError(f"a graphed step takes (batch={self.cache.batch_size}, 1..{self.MAX_WIDTH}) token ids "
                             f"after a prefill, over the cache it was built with; got {tuple(input_ids.shape)} "
                             f"with rows holding {self.cache.lengths} (prefill eagerly: model(ids, steps.cache))")
        batch, k = input_ids.shape
        self.cache.check_room(batch, k)
        if self.cache.next_position_bound() + k > self.model.config.max_seq_len:
            raise ValueError(f"position {self.cache.next_position_bound() + k - 1} is past the model's context "
                             f"limit of {self.model.config.max_seq_len} tokens")
        self._sync()
        if not self.capture:
            first = k not in self._warm
            start = time.perf_counter()
            logits = self._body(input_ids)
            if first:
                self._warm.add(k)
                self.compile_s += time.perf_counter() - start
        else:
            graph, tokens, out = self.graphs.get(k) or self._capture(k)
            tokens.copy_(input_ids)
            graph.replay()
            self.replays += 1
            logits = out.clone()  # the next replay overwrites the graph's output buffer
        self.cache.advance(k)
        self._synced = (tuple(self.cache.lengths),) + self._synced[1:]
        return logits[:, -1:] if last_only else logits

    def _sync(self) -> None:
        """Bring the device buffers in line with the host cache where a rollback or prefill moved it."""
        cache = self.cache
        state = (tuple(cache.lengths), id(cache.pads), id(cache.valid))
        if state == self._synced:
            return
        host = torch.tensor(cache.lengths, dtype=torch.long)
        if self.lengths.device.type == "cuda":
            host = host.pin_memory()
        self.lengths.copy_(host, non_blocking=True)
        if state[1:] != (self._synced or (None, None, None))[1:]:
            self.pads.copy_(cache.pads)
            if cache.valid is None:
                self.valid.fill_(True)
            else:
                self.valid.copy_(cache.valid)
        self._synced = state

    def _capture(self, k: int):
        """Warm up on a side stream, then capture the width-``k`` step (its writes land on slots the real call
        overwrites, and the device lengths are restored after each run)."""
        self._sync()  # the device lengths must be the cache's (a reset left the last generation's): slots in range
        start = time.perf_counter()
        tokens = torch.zeros(self.cache.batch_size, k, dtype=torch.long, device=self.cache.device)
        saved = self.lengths.clone()
        stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
        for warm_up in (True, True, False):  # two runs on a side stream, then the capture of the same body
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream) if warm_up else torch.cuda.graph(graph):
                out = self._body(tokens)
            torch.cuda.current_stream().wait_stream(stream)
            self.lengths.copy_(saved)  # a capture records the increment without running it: keep the buffers exact
        self.graphs[k] = (graph, tokens, out)
        self.captures += 1
        torch.cuda.synchronize()
        self.compile_s += time.perf_counter() - start
        return self.graphs[k]


def graph_replays(model) -> int:
    """CUDA-graph replays so far over every :class:`GraphedSteps` of ``model`` (0 on a CPU: nothing is captured)."""
    return sum(steps.replays for pool in getattr(model, "_graphed_steps", {}).values() for steps in pool)


def graph_compile_s(model) -> float:
    """Seconds so far of every :class:`GraphedSteps` of ``model`` in the first calls of its widths (compiling the
    layer where compiled, warming up and capturing)."""
    return sum(steps.compile_s for pool in getattr(model, "_graphed_steps", {}).values() for steps in pool)


def graphed_steps(model: MiniDecoder, batch_size: int, capacity: int, owner, *, compiled: bool = False) -> GraphedSteps:
    """A :class:`GraphedSteps` of ``model`` for ``batch_size`` rows of at least ``capacity`` tokens, its cache
    emptied, held by ``owner`` while that object lives. Steps whose owner is gone are reused (the smallest that is
    large enough), so a later generation replays the graphs already captured; two live owners (a model drafting for
    itself) never share a cache. New steps round the capacity up to a power of two >= 256."""
    weight = model.embed_tokens.weight
    key = (batch_size, weight.device, weight.dtype, compiled)
    pool = model.__dict__.setdefault("_graphed_steps", {}).setdefault(key, [])
    free = [s for s in pool if s.owner() is None and s.cache.capacity >= capacity]
    if free:
        steps = min(free, key=lambda s: s.cache.capacity)
        steps.reset()  # a new one starts empty
    else:
        steps = GraphedSteps(model, batch_size,
                             min(max(256, 1 << (capacity - 1).bit_length()), model.config.max_seq_len),
                             compiled=compiled)
        pool.append(steps)
    steps.owner = weakref.ref(owner)
    return steps


class StepOwner:
    """A stand-in owner of captured steps that no generation's cache holds (:func:`capture_steps` while it
    captures, a step profile while it replays): the steps are free for reuse once it is gone."""


def capture_steps(model: MiniDecoder, capacity: int, widths, batch_size: int = 1, *,
                   compiled: bool = False) -> GraphedSteps:
    """Capture the steps of ``widths`` tokens now, for generations of up to ``capacity`` tokens per row, so that no
    capture falls inside a timed run (a speculative pair: the target's 1 .. gamma + 1, the draft's 1 and 2). A no-op
    on a CPU, where nothing is captured."""
    holder = StepOwner()
    steps = graphed_steps(model, batch_size, capacity, holder, compiled=compiled)
    if steps.capture:
        for width in widths:
            if width not in steps.graphs and 1 <= width <= steps.MAX_WIDTH:
                steps._capture(int(width))
    return steps
