"""KV-cache memory accounted in fixed-size blocks (paged), and the handout's ``does_fit``.

A request's KV needs one slot per token of its sequence. Memory is split into blocks of ``block_size`` tokens and
a request holds whole blocks, any free ones (no contiguity needed, as in paged attention), so fragmentation is
under one block per request. Admission reserves the worst case, ``prompt + max_new_tokens``: exact when the
output length is known, the model's maximum length when it is not (a conservative bound); no request is ever
preempted or requeued. Blocks are taken as the sequence grows and all of them return the step it finishes.

Speculative decoding (notebook 14) writes up to γ tokens past a request's committed ones before the verify decides
how many stay: the reservation then holds ``headroom`` = γ_max more tokens, a round ``grow``s into them and
``shrink`` gives the rejected ones' blocks back at once.
"""
from __future__ import annotations

from collections.abc import Iterable

from helpers.batching.request import Request


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def reserved_blocks(request: Request, block_size: int, max_seq_len: int, headroom: int = 0) -> int:
    """Blocks the request may need by its end: exact if its output length is known, else up to ``max_seq_len``;
    ``headroom``: tokens a speculative round may hold beyond the committed ones."""
    return blocks_for(request.prompt_len + request.max_new_tokens(max_seq_len) + headroom, block_size)


def does_fit(request: Request, resident: Iterable[Request], capacity: int, *, block_size: int,
             max_seq_len: int, headroom: int = 0) -> bool:
    """Whether ``request`` can join ``resident`` within ``capacity`` blocks, counting everyone's worst case."""
    need = sum(reserved_blocks(r, block_size, max_seq_len, headroom) for r in resident)
    return need + reserved_blocks(request, block_size, max_seq_len, headroom) <= capacity


class PagedKVMemory:
    """Block accounting for one worker's KV memory: reservations, block tables, and the free list."""

    def __init__(self, capacity_blocks: int, block_size: int, max_seq_len: int, headroom: int = 0) -> None:
        if capacity_blocks < 1 or block_size < 1 or max_seq_len < 1:
            raise ValueError(
                f"KV memory needs positive sizes, got capacity_blocks={capacity_blocks}, block_size={block_size}, "
                f"max_seq_len={max_seq_len}"
            )
        self.capacity_blocks, self.block_size, self.max_seq_len = capacity_blocks, block_size, max_seq_len
        self.headroom = headroom
        self._free = list(range(capacity_blocks - 1, -1, -1))  # a stack of block ids; any block will do
        self.block_tables: dict[int, list[int]] = {}
        self.residents: dict[int, Request] = {}

    def reserved(self, request: Request) -> int:
        return reserved_blocks(request, self.block_size, self.max_seq_len, self.headroom)

    def check_can_ever_fit(self, request: Request) -> None:
        """Raise if the request would not fit even in empty memory (it would otherwise wait forever)."""
        request.check_length(self.max_seq_len)
        if self.reserved(request) > self.capacity_blocks:
            bound = "its output_length" if request.output_length is not None else "the model's maximum length"
            raise ValueError(
                f"request {request.id} can never fit: it needs {self.reserved(request)} KV blocks of "
                f"{self.block_size} tokens (prompt {request.prompt_len} + up to {request.max_new_tokens(self.max_seq_len)} "
                f"new tokens, bounded by {bound}) but the KV memory holds {self.capacity_blocks}; "
                "raise the KV capacity or give the request a smaller output_length"
            )

    def does_fit(self, request: Request) -> bool:
        return does_fit(request, self.residents.values(), self.capacity_blocks, block_size=self.block_size,
                        max_seq_len=self.max_seq_len, headroom=self.headroom)

    @property
    def reserved_total(self) -> int:
        return sum(self.reserved(r) for r in self.residents.values())

    @property
    def used_blocks(self) -> int:
        return self.capacity_blocks - len(self._free)

    def admit(self, request: Request, tokens: int) -> None:
        """Reserve the request's worst case and take blocks for its first ``tokens`` tokens."""
        if request.id in self.residents:
            raise RuntimeError(f"request {request.id} is already resident")
        if not self.does_fit(request):
            raise RuntimeError(f"request {request.id} does not fit; check does_fit before admitting")
        self.residents[request.id] = request
        self.block_tables[request.id] = []
        self.grow(request, tokens)

    def grow(self, request: Request, tokens: int) -> None:
        """Make room for ``tokens`` tokens of this request (a new block only when it crosses a block boundary)."""
        table = self.block_tables[request.id]
        while len(table) * self.block_size < tokens:
            if len(table) >= self.reserved(request):
                raise RuntimeError(f"request {request.id} grew past its reservation ({tokens} tokens)")
            table.append(self._free.pop())  # cannot be empty: reservations never exceed capacity

    def shrink(self, request: Request, tokens: int) -> None:
        """Give back the blocks past the first ``tokens`` tokens (a speculative round's rejected tokens)."""
        table = self.block_tables[request.id]
        keep = blocks_for(tokens, self.block_size)
        while len(table) > keep:
            self._free.append(table.pop())

    def free(self, request: Request) -> None:
        self._free.extend(reversed(self.block_tables.pop(request.id)))
        del self.residents[request.id]
