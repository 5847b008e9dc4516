"""The segmented attention kernel against the concatenate-then-softmax reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxjudge.models.attention import KeyBlock, reference_attention, segmented_attention

B, T, N, K, H = 3, 5, 6, 2, 4  # G = 3 query heads per key/value head


def _blocks(rng, *, prefix: int = 0, past: int = 0, pad_own: bool = False):
    """Random key blocks in slot order (prefix, past, own) and the query positions [B, T]."""

    def normal(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    blocks, start = [], np.zeros(B, np.int64)
    if prefix:
        valid = np.ones((1, prefix), bool)
        valid[0, -1] = False  # a padding slot at the end of the prefix
        blocks.append(KeyBlock(normal(prefix, K, H), normal(prefix, K, H), jnp.asarray(valid),
                               jnp.asarray(np.cumsum(valid, 1) - 1, jnp.int32), shared=True))
        start += valid.sum()
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
    "prefix, past, window, cap, pad_own",
    [
        (0, 0, None, None, False),  # causal self-attention only
        (0, 0, 3, None, False),  # sliding window
        (0, 0, None, 0.5, False),  # soft-capped scores
        (0, 6, None, None, False),  # cached past
        (7, 0, None, None, False),  # shared prefix
        (7, 6, 4, 1.5, True),  # everything, with padded rows
        (0, 0, None, None, True),  # padded rows alone
    ],
)
def test_segmented_matches_reference(prefix, past, window, cap, pad_own):
    rng = np.random.default_rng(prefix * 100 + past * 10 + (window or 0))
    blocks, q_pos, mask = _blocks(rng, prefix=prefix, past=past, pad_own=pad_own)
    q = jnp.asarray(rng.normal(size=(B, T, N, H)), jnp.float32)
    kw = dict(scaling=H ** -0.5, window=window, cap=cap, dtype=jnp.float32)
    got = jax.jit(lambda q, b, p: segmented_attention(q, b, p, **kw))(q, blocks, q_pos)
    want = reference_attention(q, blocks, q_pos, **kw)
    assert got.shape == (B, T, N, H)
    # Padding queries attend uniformly to everything in both; their rows are compared too.
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6, rtol=1e-5)


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
