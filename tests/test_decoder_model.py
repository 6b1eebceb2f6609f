"""The model file's cache beyond one sequence: ragged batches, per-row rollback, tree masks, compaction,
static shapes. Every case is checked against the plain single-sequence forward (float64, so equality is exact
up to reduction order)."""
from __future__ import annotations

import pytest
import torch

from helpers.models.decoder import from_hf
from tiny_models import tiny_qwen3

VOCAB = 128


@pytest.fixture(scope="module")
def model():
    hf = tiny_qwen3(0, vocab_size=VOCAB, hidden_size=32, intermediate_size=64, head_dim=8, max_position_embeddings=96)
    return from_hf(hf.double().eval())


def ids(length: int, seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(seed))


def alone(model, sequence: torch.Tensor) -> torch.Tensor:
    """Logits of one sequence without any cache: (len, vocab)."""
    return model(sequence[None])[0]


def left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    batch = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        batch[b, width - len(row):], mask[b, width - len(row):] = row, 1
    return batch, mask


@pytest.mark.parametrize("static_shapes", [False, True])
def test_ragged_prefill_and_decode_equal_each_row_alone(model, static_shapes):
    rows = [ids(n, seed) for seed, n in enumerate((5, 11, 1, 8))]
    batch, mask = left_padded(rows)
    cache = model.new_cache(len(rows), 40, static_shapes=static_shapes)
    with torch.no_grad():
        logits = model(batch, cache, attention_mask=mask)
        for b, row in enumerate(rows):
            torch.testing.assert_close(logits[b, -1], alone(model, row)[-1])
        extra = torch.stack([ids(6, 100 + b) for b in range(len(rows))])
        for step in range(6):  # one token per row per step, each at the row's own position
            step_logits = model(extra[:, step : step + 1], cache)[:, -1]
            for b, row in enumerate(rows):
                torch.testing.assert_close(step_logits[b], alone(model, torch.cat([row, extra[b, : step + 1]]))[-1])


def test_per_row_rollback_then_extend(model):
    first, second = ids(9, 1), ids(9, 2)
    cache = model.new_cache(2, 40)
    with torch.no_grad():
        model(torch.stack([first, second]), cache)
        cache.rollback([3, 0])  # row 0 keeps 6 tokens, row 1 all 9
        assert cache.lengths == [6, 9]
        new = torch.stack([ids(4, 3), ids(4, 4)])
        logits = model(new, cache)
    torch.testing.assert_close(logits[0], alone(model, torch.cat([first[:6], new[0]]))[-4:])
    torch.testing.assert_close(logits[1], alone(model, torch.cat([second, new[1]]))[-4:])


def test_a_chain_as_a_tree_mask_equals_the_causal_forward(model):
    prompt, chain = ids(7, 5), ids(4, 6)
    cache = model.new_cache(1, 32)
    with torch.no_grad():
        model(prompt[None], cache)
        causal = torch.ones(4, 4, dtype=torch.bool).tril()
        logits = model(chain[None], cache, tree_mask=causal, position_ids=torch.arange(7, 11)[None])[0]
    torch.testing.assert_close(logits, alone(model, torch.cat([prompt, chain]))[-4:])


def test_tree_nodes_see_only_their_ancestors_and_compaction_keeps_the_path(model):
    # root r; children a, b of r; child c of b  -> nodes [r, a, b, c], parents [-, r, r, b], depths [0, 1, 1, 2]
    prompt, nodes = ids(6, 7), ids(4, 8)
    parents, depths = [-1, 0, 0, 2], [0, 1, 1, 2]
    tree = torch.eye(4, dtype=torch.bool)
    for node, parent in enumerate(parents):
        while parent >= 0:
            tree[node, parent] = True
            parent = parents[parent]
    cache = model.new_cache(1, 32)
    with torch.no_grad():
        model(prompt[None], cache)
        logits = model(nodes[None], cache, tree_mask=tree, position_ids=(6 + torch.tensor(depths))[None])[0]
        for node in range(4):
            path = [node]
            while parents[path[-1]] >= 0:
                path.append(parents[path[-1]])
            torch.testing.assert_close(logits[node], alone(model, torch.cat([prompt, nodes[path[::-1]]]))[-1])
        cache.compact([6], [[0, 2, 3]])  # accept r -> b -> c
        assert cache.lengths == [9]
        nxt = ids(1, 9)
        after = model(nxt[None], cache)[0, -1]
    torch.testing.assert_close(after, alone(model, torch.cat([prompt, nodes[[0, 2, 3]], nxt]))[-1])


def ragged_cache(model, lengths, seed: int, capacity: int = 20):
    """Rows of ``lengths`` random tokens (seeds ``seed``, ``seed + 1``, ...) prefilled left-padded into a new
    cache: ``(rows, cache)``."""
    rows = [ids(n, seed + i) for i, n in enumerate(lengths)]
    batch, mask = left_padded(rows)
    cache = model.new_cache(len(rows), capacity)
    with torch.no_grad():
        model(batch, cache, attention_mask=mask)
    return rows, cache


def test_select_rows_drops_finished_rows(model):
    rows, cache = ragged_cache(model, (5, 3, 7), seed=10)
    with torch.no_grad():
        cache.select_rows([2, 0])
        nxt = torch.tensor([[1], [2]])
        logits = model(nxt, cache)[:, -1]
    torch.testing.assert_close(logits[0], alone(model, torch.cat([rows[2], nxt[0]]))[-1])
    torch.testing.assert_close(logits[1], alone(model, torch.cat([rows[0], nxt[1]]))[-1])


def test_retain_rows_moves_only_rows_past_the_new_batch(model):
    rows, cache = ragged_cache(model, (5, 3, 7, 4, 6), seed=20)
    with torch.no_grad():
        storage = cache.keys[0].data_ptr()
        order = cache.retain_rows([4, 1, 3])  # rows 0 and 2 leave: rows 3 and 4 move into their slots
        assert sorted(order) == [1, 3, 4] and order[1] == 1
        assert cache.batch_size == 3 and cache.keys[0].data_ptr() == storage  # views of the same buffers
        nxt = torch.tensor([[1], [2], [3]])
        logits = model(nxt, cache)[:, -1]
        for i, old in enumerate(order):
            torch.testing.assert_close(logits[i], alone(model, torch.cat([rows[old], nxt[i]]))[-1])
        assert cache.retain_rows([0, 1, 2]) == [0, 1, 2]  # nothing leaves: nothing moves


def test_copy_holds_the_rows_in_new_storage_with_their_padding_and_lengths(model):
    rows, cache = ragged_cache(model, (5, 3, 7), seed=30)
    with torch.no_grad():
        cache.rollback([0, 1, 0])  # rows at different fill levels
        whole, first_two, picked = cache.copy(), cache.copy(2), cache.copy([2, 0])
        assert whole.lengths == cache.lengths and whole.token_counts == cache.token_counts == [5, 2, 7]
        assert first_two.lengths == [7, 6] and first_two.token_counts == [5, 2]
        assert picked.lengths == [7, 7] and picked.token_counts == [7, 5]
        assert torch.equal(picked.pads, cache.pads[[2, 0]]) and torch.equal(picked.valid, cache.valid[[2, 0]])
        for copied in (whole, first_two, picked):  # new buffers: nothing is shared with the source
            shared = {t.data_ptr() for t in cache.keys + cache.values + [cache.pads, cache.valid]}
            assert not shared & {t.data_ptr() for t in copied.keys + copied.values + [copied.pads, copied.valid]}
        assert torch.equal(whole.keys[1], cache.keys[1]) and torch.equal(picked.values[0][1], cache.values[0][0])
        keys_before = [k.clone() for k in cache.keys]
        nxt = torch.tensor([[1], [2]])
        logits = model(nxt, picked)[:, -1]  # a copy decodes its rows ...
        torch.testing.assert_close(logits[0], alone(model, torch.cat([rows[2], nxt[0]]))[-1])
        torch.testing.assert_close(logits[1], alone(model, torch.cat([rows[0], nxt[1]]))[-1])
        assert cache.lengths == [7, 6, 7] and all(map(torch.equal, keys_before, cache.keys))  # ... the source is kept
        logits = model(torch.tensor([[3], [4], [5]]), cache)[:, -1]
        torch.testing.assert_close(logits[1], alone(model, torch.cat([rows[1][:2], torch.tensor([4])]))[-1])
    assert model.new_cache(2, 8, static_shapes=True).copy().static_shapes
    for bad, message in ((0, "can copy 1 to 3 rows"), (4, "can copy 1 to 3 rows"), ([0, 3], r"\[3\] are outside"),
                         ([-1], "outside the cache's 3 rows"), ([0.5], "integer row indices"), (1.5, "integer")):
        with pytest.raises(ValueError, match=message):
            cache.copy(bad)


def test_bad_cache_operations_are_clear_errors(model):
    cache = model.new_cache(2, 10)
    with torch.no_grad():
        model(torch.zeros(2, 4, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="cannot roll back"):
        cache.rollback([5, 0])
    with pytest.raises(ValueError, match="padding can only be written into empty rows"):
        model(torch.zeros(2, 1, dtype=torch.long), cache, attention_mask=torch.ones(2, 1))
    cache.rollback([0, 2])
    with pytest.raises(ValueError, match="different numbers of tokens"):
        cache.length


def test_rows_move_between_caches_with_their_kv(model):
    """A prefill cache's rows (row_kv, padding stripped) join a decode cache (append_rows) of another capacity;
    the decode cache grows (reserve) and each row goes on as if alone (the batching engine's handoff)."""
    rows = [ids(4, 20), ids(9, 21)]
    batch, mask = left_padded(rows)
    prefill = model.new_cache(2, 9)
    decode = model.new_cache(0, 1)
    with torch.no_grad():
        model(batch, prefill, attention_mask=mask)
        decode.append_rows([prefill.row_kv(1)])
        decode.append_rows([prefill.row_kv(0)])
        assert decode.lengths == [9, 4] and decode.capacity == 9
        decode.reserve(12)
        nxt = torch.tensor([[3], [4]])
        logits = model(nxt, decode)[:, -1]
    torch.testing.assert_close(logits[0], alone(model, torch.cat([rows[1], nxt[0]]))[-1])
    torch.testing.assert_close(logits[1], alone(model, torch.cat([rows[0], nxt[1]]))[-1])
