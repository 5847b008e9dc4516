"""The pieces of per-host feeding that one process can check: how a chunk's prompts are cut
into the mesh's data blocks, and placing a batch from its blocks and reading them back. The
two-process runs are tests/engine/test_engine_spmd.py and tests/cli/test_cli_distributed.py."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxjudge.engine.feed import split_chunk
from jaxjudge.engine.plan import plan_chunks
from jaxjudge.models.sharding import DataBlocks, make_mesh


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
