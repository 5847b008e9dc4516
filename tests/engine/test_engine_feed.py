"""The pieces of per-host feeding that one process can check: how a chunk's prompts are cut
into the mesh's data blocks, and placing a batch from its blocks and reading them back. The
two-process runs are tests/engine/test_engine_spmd.py and tests/cli/test_cli_distributed.py."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxjudge.engine.feed import block_rows, feed_plan, split_chunk
from jaxjudge.engine.plan import plan_chunks
from jaxjudge.engine.tokens import TOKENISED, RowsOnDemand, tokenise
from jaxjudge.models.sharding import DataBlocks, make_mesh
from test_engine import byte_tokenizer, make_prompts


@pytest.mark.parametrize("sizes, chunk_size, n_blocks", [
    ((16, 16, 3), 40, 2), ((1, 1, 1), 3, 2), ((5,), 5, 4), ((2, 7, 1, 4), 8, 3), ((3,), 3, 6)])
def test_a_chunk_is_cut_into_near_equal_runs_of_its_work_order(sizes, chunk_size, n_blocks):
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    for chunk in plan_chunks(group_of, chunk_size):
        blocks = split_chunk(chunk, n_blocks)
        assert len(blocks) == n_blocks
        runs = [np.concatenate(parts) if parts else np.zeros(0, np.int64) for parts in blocks]
        # Block after block, the runs are the chunk's work order, each within one row of n / D.
        np.testing.assert_array_equal(np.concatenate(runs), chunk.members)
        assert max(map(len, runs)) - min(map(len, runs)) <= 1
        for parts in blocks:  # each part is (a piece of) one prefix group
            assert all(len(set(group_of[p].tolist())) == 1 and len(p) for p in parts)


@pytest.mark.parametrize("chunk_size", [4, 7, 40])
def test_block_rows_are_the_rows_the_feed_gives_each_block(chunk_size):
    """`block_rows` (what the ``mesh="auto"`` planner tokenises, before any mesh exists) is the
    feed's own cut: on a mesh of four data blocks, block b's rows; and where two processes hold
    two consecutive blocks each, the rows of a cut into two runs."""
    prompts = make_prompts(n_groups=3, per_group=5)
    _, plan = feed_plan(byte_tokenizer(), prompts, make_mesh(4, 1), chunk_size=chunk_size, limit=512,
                        overflow="raise", prefix_cache=True, min_prefix_tokens=4, whole=False)
    for b in range(4):
        np.testing.assert_array_equal(block_rows(prompts, chunk_size, 4, b), np.flatnonzero(plan.block_of == b))
    for p in range(2):
        np.testing.assert_array_equal(block_rows(prompts, chunk_size, 2, p),
                                      np.flatnonzero(plan.block_of // 2 == p))
    assert sorted(np.concatenate([block_rows(prompts, chunk_size, 3, b) for b in range(3)])) == list(range(16))


def test_a_batch_placed_from_its_blocks_equals_the_whole_batch_placed():
    mesh = make_mesh(4, 2)
    blocks = DataBlocks(mesh)
    assert blocks.n == 4 and blocks.mine == (0, 1, 2, 3) and blocks.holders == ((0,),) * 4
    x = np.arange(4 * 3 * 5, dtype=np.int32).reshape(12, 5)
    placed = blocks.place({b: x[3 * b:3 * (b + 1)] for b in range(4)}, 3)
    whole = jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data", None)))
    assert placed.sharding == whole.sharding
    np.testing.assert_array_equal(np.asarray(placed), x)
    for b in range(4):
        np.testing.assert_array_equal(blocks.read(placed, b), x[3 * b:3 * (b + 1)])
        np.testing.assert_array_equal(blocks.read(jax.numpy.asarray(x) * 2, b), 2 * x[3 * b:3 * (b + 1)])
    with pytest.raises(ValueError, match=r"block 1 has shape \(2, 5\), expected \(3, 5\)"):
        blocks.place({0: x[:3], 1: x[3:5], 2: x[6:9], 3: x[9:12]}, 3)


@pytest.mark.parametrize("cut", [False, True])
def test_rows_on_demand_equal_every_prompt_tokenised_at_once(cut):
    """`RowsOnDemand` (per-process mode: a chunk's rows tokenised when it is taken), filled chunk
    by chunk, gives every row the ids, text and cut of `tokenise` over all prompts, each row
    tokenised once. Groups of five in chunks of two: at a limit no prompt can reach, each chunk's
    rows alone (the first fill tokenises 2 rows); at one that cuts every group, whole groups (the
    first fill tokenises the 5 of its group), so a group split over chunks keeps its one cut."""
    tok, prompts = byte_tokenizer(), make_prompts(n_groups=3, per_group=5, doc_words=30)
    longest = max(len(tok.encode(p.text).ids) for p in prompts)
    limit = longest - 40 if cut else 4 * longest  # the byte bound of the longest, with room to spare
    want = tokenise(tok, prompts, limit=limit, overflow="truncate")
    assert any(p.truncated_tokens for p in want.prompts) == cut
    rows = RowsOnDemand(tok, prompts, limit=limit, overflow="truncate")
    chunks = plan_chunks(rows.tk.group_of, 2)
    before = TOKENISED.rows
    for ch in chunks:
        rows.fill(ch.members)
        assert not rows.missing(ch.members)
    assert rows.tk.ids == want.ids and rows.tk.prompts == want.prompts
    assert rows.tk.truncated.tolist() == want.truncated.tolist()
    assert TOKENISED.rows - before == len(prompts)  # every row once, none twice
    first = RowsOnDemand(tok, prompts, limit=limit, overflow="truncate")
    first.fill(chunks[0].members)
    done = len(prompts) - len(first.missing(range(len(prompts))))
    assert done == (5 if cut else len(chunks[0].members)), done
