"""The segmented attention kernel against the concatenate-then-softmax reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxjudge.models.attention import KeyBlock, reference_attention, segmented_attention

B, T, N, K, H = 4, 5, 6, 2, 4  # G = 3 query heads per key/value head


def _blocks(rng, *, prefix: int = 0, past: int = 0, pad_own: bool = False, groups: int = 1):
    """Random key blocks in slot order (prefix, past, own) and the query positions [B, T];
    ``groups`` prefixes of different lengths, each read by B / groups consecutive rows."""

    def normal(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    blocks, start = [], np.zeros(B, np.int64)
    if prefix:
        valid = np.ones((groups, prefix), bool)
        for p in range(groups):
            valid[p, prefix - 1 - p:] = False  # padding slots at the end of each prefix
        blocks.append(KeyBlock(normal(groups, prefix, K, H), normal(groups, prefix, K, H), jnp.asarray(valid),
                               jnp.asarray(np.cumsum(valid, 1) - 1, jnp.int32), shared=True))
        start += np.repeat(valid.sum(1), B // groups)
    if past:
        valid = rng.random((B, past)) < 0.7
        valid[:, 0] = True
        positions = start[:, None] + np.cumsum(valid, 1) - 1
        blocks.append(KeyBlock(normal(B, past, K, H), normal(B, past, K, H), jnp.asarray(valid),
                               jnp.asarray(positions, jnp.int32)))
        start += valid.sum(1)
    mask = np.ones((B, T), bool)
    if pad_own:
        mask[0, :2] = False  # left padding
        mask[2, -1] = False  # right padding
    positions = start[:, None] + np.cumsum(mask, 1) - mask
    blocks.append(KeyBlock(normal(B, T, K, H), normal(B, T, K, H), jnp.asarray(mask),
                           jnp.asarray(positions, jnp.int32), causal=True))
    return blocks, jnp.asarray(positions, jnp.int32), mask


@pytest.mark.parametrize(
    "prefix, past, window, cap, pad_own, groups",
    [
        (0, 0, None, None, False, 1),  # causal self-attention only
        (0, 0, 3, None, False, 1),  # sliding window
        (0, 0, None, 0.5, False, 1),  # soft-capped scores
        (0, 6, None, None, False, 1),  # cached past
        (7, 0, None, None, False, 1),  # shared prefix
        (7, 0, None, None, False, 2),  # two prefixes, two rows each
        (7, 0, 3, None, False, 4),  # a prefix per row, windowed
        (7, 6, 4, 1.5, True, 1),  # everything, with padded rows
        (7, 6, 4, 1.5, True, 2),  # everything, two prefixes
        (0, 0, None, None, True, 1),  # padded rows alone
    ],
)
@pytest.mark.parametrize("query_chunk", [None, 2])
def test_segmented_matches_reference(prefix, past, window, cap, pad_own, groups, query_chunk):
    rng = np.random.default_rng(prefix * 100 + past * 10 + (window or 0) + groups)
    blocks, q_pos, mask = _blocks(rng, prefix=prefix, past=past, pad_own=pad_own, groups=groups)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=H ** -0.5, window=window, cap=cap, dtype=jnp.float32)
    got = jax.jit(lambda q, b, p: segmented_attention(q, b, p, **kw, query_chunk=query_chunk))(q, blocks, q_pos)
    want = reference_attention(q, blocks, q_pos, **kw)
    assert got.shape == (B, T, N, H)
    # Unchunked, padding queries attend uniformly to everything in both, so every row is
    # compared; in chunks (of 2, 2 and 1 queries), a query that sees no key averages over its
    # chunk's slots instead, and only the real queries are compared.
    rows = np.ones(mask.shape, bool) if query_chunk is None else mask
    np.testing.assert_allclose(np.asarray(got)[rows], np.asarray(want)[rows], atol=2e-6, rtol=1e-5)


def test_query_chunks_skip_the_hidden_keys():
    """In chunks of 16 over 64 tokens the own block's scores are 16 x (16 + 32 + 48 + 64) = 10/16
    of the dense 64 x 64: the compiled program's flops drop to near that share."""
    t, n, k, h = 64, 4, 2, 32
    rng = np.random.default_rng(5)
    q = jnp.asarray(rng.normal(size=(1, t, n, h)), jnp.float32)
    own = KeyBlock(jnp.asarray(rng.normal(size=(1, t, k, h)), jnp.float32),
                   jnp.asarray(rng.normal(size=(1, t, k, h)), jnp.float32), jnp.ones((1, t), bool),
                   jnp.arange(t, dtype=jnp.int32)[None], causal=True)
    kw = dict(scaling=h ** -0.5, window=None, cap=None, dtype=jnp.float32)

    def flops(chunk):
        fn = jax.jit(lambda q, own: segmented_attention(q, [own], own.positions_bs, **kw, query_chunk=chunk))
        return fn.lower(q, own).compile().cost_analysis()["flops"]

    products = 2 * 2 * n * h * t * t  # scores and weighted sum, dense
    dense, chunked = flops(None), flops(16)
    assert dense >= products
    assert chunked < 0.7 * dense
    assert chunked >= products * 10 / 16
    np.testing.assert_allclose(
        np.asarray(segmented_attention(q, [own], own.positions_bs, **kw, query_chunk=16)),
        np.asarray(reference_attention(q, [own], own.positions_bs, **kw)), atol=2e-6, rtol=1e-5)


def test_window_and_mask_hide_keys():
    """A key outside the window or invalid has no effect on the output, whatever its value."""
    rng = np.random.default_rng(1)
    blocks, q_pos, _ = _blocks(rng, past=6)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=0.5, window=2, cap=None, dtype=jnp.float32)
    base = segmented_attention(q, blocks, q_pos, **kw)
    past = blocks[0]
    # Each row's first query follows at least two valid cache slots, so with a window of 2 the
    # cache's first slot is out of every query's reach.
    assert int(np.asarray(past.valid_bs).sum(1).min()) >= 2
    changed = KeyBlock(past.keys.at[:, 0].add(100.0), past.values.at[:, 0].add(100.0),
                       past.valid_bs, past.positions_bs)
    again = segmented_attention(q, [changed, blocks[1]], q_pos, **kw)
    np.testing.assert_array_equal(np.asarray(base), np.asarray(again))


def test_bfloat16_close_to_reference():
    rng = np.random.default_rng(2)
    blocks, q_pos, _ = _blocks(rng, prefix=5, past=4)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=H ** -0.5, window=None, cap=None)
    got = segmented_attention(q.astype(jnp.bfloat16), blocks, q_pos, dtype=jnp.bfloat16, **kw)
    want = reference_attention(q, blocks, q_pos, dtype=jnp.float32, **kw)
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want), atol=5e-2)


def test_grouped_prefixes_equal_one_call_per_group():
    """Two prefixes in one call give each group's rows what a call with its prefix alone gives."""
    rng = np.random.default_rng(3)
    blocks, q_pos, _ = _blocks(rng, prefix=6, past=3, groups=2)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=H ** -0.5, window=None, cap=None, dtype=jnp.float32)
    both = np.asarray(segmented_attention(q, blocks, q_pos, **kw))
    r = B // 2
    for p in range(2):
        rows = slice(p * r, (p + 1) * r)
        pre, past, own = blocks
        one = [KeyBlock(pre.keys[p:p + 1], pre.values[p:p + 1], pre.valid_bs[p:p + 1], pre.positions_bs[p:p + 1],
                        shared=True)]
        one += [KeyBlock(blk.keys[rows], blk.values[rows], blk.valid_bs[rows], blk.positions_bs[rows],
                         causal=blk.causal) for blk in (past, own)]
        alone = np.asarray(segmented_attention(q[rows], one, q_pos[rows], **kw))
        np.testing.assert_allclose(both[rows], alone, atol=1e-6, rtol=1e-6)
