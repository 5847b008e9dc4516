"""Grouped-query attention over key blocks: the segmented softmax kernel, a reference, the module.

One call's queries (the T new tokens) attend to up to three blocks of keys, in slot order: a
shared prefix (one per group of rows, read by each of its rows without being copied), the
cached past of each row, and the new tokens themselves (causally). :func:`segmented_attention` computes one
softmax over all of them without concatenating them: each block's masked scores stay in the
layout its matmul produced, and the blocks are combined through a shared maximum and summed
normalisers. :func:`reference_attention` is the short concatenate-then-softmax form the tests
hold the kernel to.

Masked scores get the most negative finite float32 rather than -inf, so that a query with no
visible key (a padding query) gets a finite uniform softmax instead of NaN; its output is
garbage that is never read. Shape letters are those of :mod:`jaxjudge.models.decoder`.
"""

from __future__ import annotations

import functools
from typing import Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxjudge.models.decoder_config import DecoderConfig
from jaxjudge.models.layers import Projection, RMSNorm, softcap

__all__ = ["MASK_VALUE", "CPU_QUERY_CHUNK", "KeyBlock", "rotate", "segmented_attention", "reference_attention",
           "Attention"]

MASK_VALUE = float(np.finfo(np.float32).min)

# CPU tuning: a call of more new tokens than this attends in query chunks of about this many
# (at most MAX_QUERY_CHUNKS of them), each against its own block's keys up to the chunk's last
# query. Measured on a 2-core AVX2 CPU (SmolLM2-135M, 8 rows x 1,024 tokens): the attention of a
# forward pass took 11.5 s of its 22.8 s as one dense [.., T, T] block and about 5 s in chunks of
# 128, from half the scores (the causal triangle's hidden blocks are skipped) and score tensors
# small enough to stay in cache between the matmul, the softmax and the weighted sum.
CPU_QUERY_CHUNK: int | None = 128
MAX_QUERY_CHUNKS = 16


@flax.struct.dataclass
class KeyBlock:
    """Keys and values the queries of one call may attend to, with each slot's validity and
    rotary position.

    Attributes:
        keys, values: [B, S, K, H] per row, or [P, S, K, H] when ``shared``.
        valid_bs: whether a slot holds a real token [B, S] ([P, S] when ``shared``).
        positions_bs: rotary position of each slot [B, S] ([P, S] when ``shared``).
        shared: P prefix blocks, each read by a run of B / P consecutive rows: row b reads
            prefix b // (B / P) (static). P = 1 is one prefix every row reads.
        causal: the block is the queries' own tokens: query t sees slots up to t (static).
    """

    keys: jax.Array
    values: jax.Array
    valid_bs: jax.Array
    positions_bs: jax.Array
    shared: bool = flax.struct.field(pytree_node=False, default=False)
    causal: bool = flax.struct.field(pytree_node=False, default=False)


def rotate(x_btnh: jax.Array, cos_bth: jax.Array, sin_bth: jax.Array) -> jax.Array:
    """Rotary embedding in the half-split layout transformers uses (not interleaved pairs)."""
    h2 = x_btnh.shape[-1] // 2
    rotated = jnp.concatenate([-x_btnh[..., h2:], x_btnh[..., :h2]], axis=-1)
    return x_btnh * cos_bth[:, :, None, :] + rotated * sin_bth[:, :, None, :]


def _allowed_bts(block: KeyBlock, q_pos_bt: jax.Array, window: int | None, causal_offset: int = 0) -> jax.Array:
    """Which slots of ``block`` each query may see [B, T, S] (validity, causality, window).

    ``causal_offset``: the queries are the own block's tokens from this slot on (a query chunk),
    so query t sees the causal block's slots up to ``t + causal_offset``."""
    b, t = q_pos_bt.shape
    s = block.valid_bs.shape[1]
    valid_bs, positions_bs = block.valid_bs, block.positions_bs
    if block.shared:  # each group's prefix, once per row of the group
        valid_bs = jnp.repeat(valid_bs, b // valid_bs.shape[0], axis=0)
        positions_bs = jnp.repeat(positions_bs, b // positions_bs.shape[0], axis=0)
    allowed = jnp.broadcast_to(valid_bs[:, None, :], (b, t, s))
    if block.causal:
        allowed = allowed & (jnp.arange(s)[None, :] <= jnp.arange(t)[:, None] + causal_offset)[None]
    if window is not None:
        allowed = allowed & ((q_pos_bt[:, :, None] - positions_bs[:, None, :]) < window)
    return allowed


def segmented_attention(q_btnh: jax.Array, blocks: Sequence[KeyBlock], q_pos_bt: jax.Array, *,
                        scaling: float, window: int | None, cap: float | None,
                        dtype: jnp.dtype, query_chunk: int | None = None) -> jax.Array:
    """Softmax attention of the queries over every block, one block at a time.

    With ``query_chunk``, a call of more new tokens than that runs in query chunks (about
    ``query_chunk`` tokens each, at most `MAX_QUERY_CHUNKS`): each chunk attends to the other
    blocks whole and to its own (last, causal) block only up to the chunk's last token, the
    later slots being hidden from all of its queries anyway. A real query's softmax is over the
    same keys either way (the outputs agree to float rounding); a query that sees no key at all
    (padding, never read) averages over the slots its chunk holds.

    Args:
        q_btnh: rotated queries [B, T, N, H].
        blocks: the key blocks in slot order (at most one ``shared``, first).
        q_pos_bt: rotary position of each query [B, T] (for the window).
        scaling: score scale (``head_dim ** -0.5`` or Gemma's ``query_pre_attn_scalar ** -0.5``).
        window: sliding window W (a query sees slots less than W positions back; a Python int
            or a traced scalar), or None.
        cap: soft-cap of the float32 scores before the mask, or None.
        dtype: compute dtype of the matmuls (scores and sums are float32).
        query_chunk: the query chunk size (a CPU tuning, see `CPU_QUERY_CHUNK`), or None for
            one chunk.

    Returns:
        The attention output [B, T, N, H] in ``dtype``.
    """
    kw = dict(scaling=scaling, window=window, cap=cap, dtype=dtype)
    t, own = q_pos_bt.shape[1], blocks[-1]
    if query_chunk is None or t <= query_chunk or not own.causal:
        return _attend(q_btnh, blocks, q_pos_bt, causal_offset=0, **kw)
    size = -(-t // min(-(-t // query_chunk), MAX_QUERY_CHUNKS))
    outs = []
    for start in range(0, t, size):
        end = min(start + size, t)
        seen = jax.tree.map(lambda x: x[:, :end], own)  # keys, values, validity, positions
        outs.append(_attend(q_btnh[:, start:end], [*blocks[:-1], seen], q_pos_bt[:, start:end],
                            causal_offset=start, **kw))
    return jnp.concatenate(outs, axis=1)


def _attend(q_btnh: jax.Array, blocks: Sequence[KeyBlock], q_pos_bt: jax.Array, *, causal_offset: int,
            scaling: float, window: int | None, cap: float | None, dtype: jnp.dtype) -> jax.Array:
    """:func:`segmented_attention` of one query chunk (``causal_offset``: see `_allowed_bts`)."""
    b, t = q_pos_bt.shape
    kv = blocks[-1].keys.shape[-2]
    g = q_btnh.shape[2] // kv
    # Query head n reads K/V head n // G, the grouping of transformers' repeat_kv. Heads stay
    # an axis of their own in every product (never merged with the rows): rows are split over
    # the mesh's `data` axis and K/V heads over `model`, and a reshape that merged the two would
    # make XLA gather queries, keys and values onto every tensor-parallel device. The queries
    # are laid out [B, K, T, G, H] and scaled once; each product has its batch axes leading.
    q_bktgh = (q_btnh.reshape(b, t, kv, g, -1) * jnp.asarray(scaling, q_btnh.dtype)
               ).transpose(0, 2, 1, 3, 4)

    def scores(block: KeyBlock) -> jax.Array:
        """Masked float32 scores: [P, K, R, T, G, S] for a shared block, else [B, K, T, G, S].

        A shared block's scores stay group- and K-major, the layout of its product (prefix
        group and K/V head as the batch axes, the group's R = B / P rows' queries as free
        axes), so that the large [.., S] tensor is never transposed; only its [.., G]
        reductions are (`to_rows`, `from_rows`)."""
        if block.shared:  # keys [P, S, K, H]: each group's rows' queries against its prefix
            p = block.keys.shape[0]
            if window is None:
                allowed = block.valid_bs[:, None, None, None, None, :]
            else:
                allowed = _allowed_bts(block, q_pos_bt, window, causal_offset).reshape(p, 1, b // p, t, 1, -1)
            q_prktgh = q_bktgh.reshape(p, b // p, kv, t, g, -1)
            s_pkrtgs = jnp.einsum("PRKTGH,PSKH->PKRTGS", q_prktgh, block.keys.astype(dtype),
                                  preferred_element_type=jnp.float32)
            return jnp.where(allowed, softcap(s_pkrtgs, cap), MASK_VALUE)
        k_bksh = block.keys.astype(dtype).transpose(0, 2, 1, 3)
        s_bktgs = jnp.einsum("BKTGH,BKSH->BKTGS", q_bktgh, k_bksh, preferred_element_type=jnp.float32)
        allowed = _allowed_bts(block, q_pos_bt, window, causal_offset)[:, None, :, None, :]
        return jnp.where(allowed, softcap(s_bktgs, cap), MASK_VALUE)

    def to_rows(x: jax.Array, shared: bool) -> jax.Array:
        """A [P, K, R, T, G, ...] reduction of a shared block -> [B, K, T, G, ...]."""
        if not shared:
            return x
        x = jnp.swapaxes(x, 1, 2)
        return x.reshape(b, *x.shape[2:])

    def from_rows(x: jax.Array, shared: bool, p: int) -> jax.Array:
        """[B, K, T, G, ...] -> the [P, K, R, T, G, ...] layout of a shared block's scores."""
        if not shared:
            return x
        return jnp.swapaxes(x.reshape(p, b // p, *x.shape[1:]), 1, 2)

    masked = [(scores(blk), blk.values, blk.shared) for blk in blocks]
    m_bktg = None
    for s, _, shared in masked:
        m = to_rows(jnp.max(s, axis=-1), shared)
        m_bktg = m if m_bktg is None else jnp.maximum(m_bktg, m)
    z_bktg, out_bktgh = None, None
    for s, v, shared in masked:
        e = jnp.exp(s - from_rows(m_bktg, shared, v.shape[0])[..., None])
        z = to_rows(jnp.sum(e, axis=-1), shared)
        if shared:
            o = to_rows(jnp.einsum("PKRTGS,PSKH->PKRTGH", e.astype(dtype), v.astype(dtype),
                                   preferred_element_type=jnp.float32), True)
        else:
            o = jnp.einsum("BKTGS,BKSH->BKTGH", e.astype(dtype), v.astype(dtype).transpose(0, 2, 1, 3),
                           preferred_element_type=jnp.float32)
        z_bktg = z if z_bktg is None else z_bktg + z
        out_bktgh = o if out_bktgh is None else out_bktgh + o
    out_bktgh = (out_bktgh / z_bktg[..., None]).astype(dtype)
    return out_bktgh.transpose(0, 2, 1, 3, 4).reshape(b, t, kv * g, -1)


def reference_attention(q_btnh: jax.Array, blocks: Sequence[KeyBlock], q_pos_bt: jax.Array, *,
                        scaling: float, window: int | None, cap: float | None,
                        dtype: jnp.dtype) -> jax.Array:
    """:func:`segmented_attention` written plainly: every block's keys copied per row and
    concatenated, K/V heads repeated per query head, one masked softmax (for tests)."""
    b = q_pos_bt.shape[0]

    def per_row(x: jax.Array, shared: bool) -> jax.Array:
        return jnp.repeat(x, b // x.shape[0], axis=0) if shared else x

    k_bskh = jnp.concatenate([per_row(blk.keys, blk.shared) for blk in blocks], axis=1)
    v_bskh = jnp.concatenate([per_row(blk.values, blk.shared) for blk in blocks], axis=1)
    allowed_bts = jnp.concatenate([_allowed_bts(blk, q_pos_bt, window) for blk in blocks], axis=2)
    g = q_btnh.shape[2] // k_bskh.shape[2]
    k_bsnh, v_bsnh = jnp.repeat(k_bskh, g, axis=2), jnp.repeat(v_bskh, g, axis=2)
    s_bnts = jnp.einsum("BTNH,BSNH->BNTS", q_btnh.astype(jnp.float32) * scaling,
                        k_bsnh.astype(jnp.float32))
    s_bnts = jnp.where(allowed_bts[:, None], softcap(s_bnts, cap), MASK_VALUE)
    p_bnts = jax.nn.softmax(s_bnts, axis=-1)
    return jnp.einsum("BNTS,BSNH->BTNH", p_bnts, v_bsnh.astype(jnp.float32)).astype(dtype)


class Attention(nnx.Module):
    """Grouped-query self-attention with rotary embeddings and an optional sliding window.

    Args:
        query_chunk: the query chunk of `segmented_attention` (`CPU_QUERY_CHUNK`, a CPU
            tuning: `jaxjudge.models.decoder.Decoder` passes None for any other ``target``);
            None attends in one piece.
    """

    def __init__(self, cfg: DecoderConfig, *, dtype, param_dtype, rngs: nnx.Rngs,
                 query_chunk: int | None = CPU_QUERY_CHUNK):
        d, n, k, h = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        qkv_bias = cfg.attention_bias
        self.q_proj = Projection("BTD,DNH->BTNH", (d, n, h), ("embed", "q_heads", "head_dim"),
                                 (n, h) if qkv_bias else None, ("q_heads", "head_dim"), **kw)
        self.k_proj = Projection("BTD,DKH->BTKH", (d, k, h), ("embed", "kv_heads", "head_dim"),
                                 (k, h) if qkv_bias else None, ("kv_heads", "head_dim"), **kw)
        self.v_proj = Projection("BTD,DKH->BTKH", (d, k, h), ("embed", "kv_heads", "head_dim"),
                                 (k, h) if qkv_bias else None, ("kv_heads", "head_dim"), **kw)
        self.o_proj = Projection("BTNH,NHD->BTD", (n, h, d), ("q_heads", "head_dim", "embed"),
                                 (d,) if cfg.attention_out_bias else None, ("embed",), **kw)
        if cfg.qk_norm:
            norm = dict(eps=cfg.rms_norm_eps, plus_one=cfg.norm_plus_one, param_dtype=param_dtype)
            self.q_norm = RMSNorm(h, **norm)
            self.k_norm = RMSNorm(h, **norm)
        else:
            self.q_norm = self.k_norm = None
        scalar = cfg.head_dim if cfg.query_pre_attn_scalar is None else cfg.query_pre_attn_scalar
        self.scaling = scalar ** -0.5
        self.softcap = cfg.attn_logit_softcapping
        self.dtype = dtype
        # None: XLA's dense masked attention; a `jaxjudge.models.splash.SplashKernel`: the Pallas
        # splash kernel for the blocks it serves (see `jaxjudge.models.splash.use_kernel`). The
        # option carries its own `serves` and `attend`, so this module never imports the kernel's.
        self.kernel = None
        self.query_chunk = query_chunk

    def __call__(self, x_btd: jax.Array, cos_bth: jax.Array, sin_bth: jax.Array,
                 positions_bt: jax.Array, mask_bt: jax.Array, prefix: KeyBlock | None = None,
                 past: KeyBlock | None = None, window: jax.Array | int | None = None,
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Attends from the new tokens to the prefix, the cached past and themselves.

        Args:
            x_btd: normalised hidden states of the new tokens [B, T, D].
            cos_bth, sin_bth: rotary tables of the new tokens [B, T, H].
            positions_bt: rotary position of each new token [B, T].
            mask_bt: True for the real new tokens [B, T].
            prefix: a shared block (keys [P, S, K, H]: P prefixes, each read by B / P
                consecutive rows), or None.
            past: this layer's cache before this call (keys [B, S, K, H]; every valid slot
                precedes the new tokens), or None.
            window: this layer's sliding window (a traced scalar when the layers are scanned;
                a window longer than any position for a full-attention layer), or None.

        Returns:
            (output [B, T, D], keys [B, T, K, H], values [B, T, K, H] of the new tokens, for
            the caller to write into the cache).
        """
        q_btnh, k_btkh = self.q_proj(x_btd), self.k_proj(x_btd)
        if self.q_norm is not None:  # per head, over its H channels, before the rotation
            q_btnh, k_btkh = self.q_norm(q_btnh), self.k_norm(k_btkh)
        q_btnh = rotate(q_btnh, cos_bth, sin_bth)
        k_btkh = rotate(k_btkh, cos_bth, sin_bth)
        v_btkh = self.v_proj(x_btd)
        own = KeyBlock(k_btkh, v_btkh, mask_bt, positions_bt, causal=True)
        blocks = [blk for blk in (prefix, past) if blk is not None] + [own]
        attend = functools.partial(segmented_attention, query_chunk=self.query_chunk)
        if self.kernel is not None and self.kernel.serves(blocks, window):
            attend = self.kernel.attend
        out_btnh = attend(q_btnh, blocks, positions_bt, scaling=self.scaling, window=window, cap=self.softcap,
                          dtype=self.dtype)
        return self.o_proj(out_btnh), k_btkh, v_btkh
