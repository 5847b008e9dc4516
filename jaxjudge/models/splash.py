"""Attention through JAX's Pallas splash-attention kernel (TPU), for the blocks it serves.

:func:`jaxjudge.models.attention.segmented_attention` is XLA's dense masked form: every score of
every block is computed and masked. On a TPU the prefill of a prefix and the reading of rows
against their shared prefix are the scoring step's attention, and the splash kernel
(``jax.experimental.pallas.ops.tpu.splash_attention``) computes them block by block in the
chip's own memory, skipping the key blocks a causal mask hides. This module runs it on the
blocks :func:`segmented_attention` takes:

- the new tokens' own block (causal): one kernel per row, padding by segment ids (a real token
  sees the real tokens up to itself; a padding token only padding, so no query is left with
  nothing to see);
- a shared prefix block: one kernel per prefix group, the queries of the group's rows laid end
  to end against the group's prefix (its padding slots masked by segment ids);

and combines the two blocks' normalised outputs through their log-sum-exps. A call that reads a
per-row cache (decoding, ``Judge.extend``) stays on the XLA path (:func:`supported`). A layer
with a sliding window runs through the kernel where the window hides nothing: on each device, a
``lax.cond`` takes the kernel when the largest position difference between a real query and a
valid key of its rows is under the window (SummEval's prompts under Gemma 3's 1,024 or Gemma 2's
4,096), and XLA's masked attention when it is not. The kernel's masks are static, and a window
cut by position across a shared prefix of data-dependent length is not one of them, so a window
that does cut is not block-skipped.

Sequence lengths are padded to the kernel's 128-slot blocks here (queries and keys of the own
block; the prefix's slots) and the padding cut off again. On a mesh the kernel runs under
``shard_map``: rows (and prefix groups) over ``data``, heads over ``model``, as the rest of the
network is laid out, so no activation is gathered. ``interpret=True`` runs the kernel in Pallas's
interpreter on any backend (how the tests check it on a CPU against the XLA path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, PartitionSpec as P

from jaxjudge.models.attention import Attention, KeyBlock, segmented_attention

__all__ = ["SplashKernel", "supported", "splash_attention", "use_kernel", "count_flops", "require_tpu"]

LANES = 128  # the kernel's key block is a multiple of this


@dataclasses.dataclass(frozen=True)
class SplashKernel:
    """How the network runs its attention through the splash kernel (a static, hashable option).

    Attributes:
        mesh: the mesh the network's arrays live on (``data`` and ``model`` axes), or None for
            one device.
        interpret: run the kernel in Pallas's interpreter (any backend; slow: for tests).
        block_q: query block of the kernel (a multiple of 8).
        block_kv: key block of the kernel (a multiple of 128).
    """

    mesh: Mesh | None = None
    interpret: bool = False
    block_q: int = 128
    block_kv: int = 128

    def __post_init__(self):
        if self.block_q % 8 or self.block_q < 8:
            raise ValueError(f"SplashKernel: block_q must be a positive multiple of 8, got {self.block_q}")
        if self.block_kv % LANES or self.block_kv < LANES:
            raise ValueError(f"SplashKernel: block_kv must be a positive multiple of {LANES}, got {self.block_kv}")

    def serves(self, blocks: Sequence[KeyBlock], window) -> bool:
        """Whether the kernel computes these blocks (`supported`)."""
        return supported(blocks, window)

    def attend(self, q_btnh: jax.Array, blocks: Sequence[KeyBlock], q_pos_bt: jax.Array, **kw: Any) -> jax.Array:
        """`splash_attention` with these options (``kw``: its keyword arguments but ``spec``)."""
        return splash_attention(q_btnh, blocks, q_pos_bt, spec=self, **kw)


def require_tpu(devices, where: str) -> None:
    """Raises ValueError unless every one of ``devices`` is a TPU (the kernel, not interpreted,
    runs nowhere else); ``where`` names them in the message."""
    platforms = sorted({d.platform for d in devices})
    if platforms != ["tpu"]:
        raise ValueError(f"the splash kernel runs on a TPU, and {where} on {', '.join(platforms) or 'no device'} "
                         f"(interpret=True runs it in Pallas's interpreter, slowly)")


def supported(blocks: Sequence[KeyBlock], window) -> bool:
    """Whether :func:`splash_attention` computes these blocks: the causal own block, optionally
    after one shared prefix (with a sliding ``window`` or not: see the module docstring)."""
    del window
    if not blocks or not blocks[-1].causal:
        return False
    return len(blocks) == 1 or (len(blocks) == 2 and blocks[0].shared)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


@functools.lru_cache(maxsize=64)
def _kernel(kind: str, heads: int, q_len: int, kv_len: int, cap: float | None, spec: SplashKernel):
    """A splash kernel (forward only, with log-sum-exps) for one mask shape; built once per shape."""
    # Pallas's TPU kernels load where a kernel is built, not with every decoder.
    from jax.experimental.pallas.ops.tpu.splash_attention import (  # noqa: PLC0415
        splash_attention_kernel as sk, splash_attention_mask as sm,
    )
    one = sm.CausalMask((q_len, kv_len)) if kind == "causal" else sm.FullMask((q_len, kv_len))
    block_q = min(spec.block_q, q_len)
    block_kv = min(spec.block_kv, kv_len)
    # The mask's block tables become arrays: concrete ones, even when first built inside a trace
    # (the kernel is cached and reused by later traces).
    with jax.ensure_compile_time_eval():
        return sk.make_splash_mha(sm.MultiHeadMask([one] * heads), head_shards=1, q_seq_shards=1,
                                  block_sizes=sk.BlockSizes(block_q=block_q, block_kv=block_kv),
                                  save_residuals=True, attn_logits_soft_cap=cap, interpret=spec.interpret)


_COUNTERS: list[list[float]] = []


@contextlib.contextmanager
def count_flops():
    """Counts the flops of the splash kernels traced inside the block (a one-element list).

    XLA's cost analysis does not see into a Pallas kernel, so `jaxjudge.aot` adds this count:
    the matmul flops (2 per multiply-add, scores and values) of every key block the kernel
    computes, block skipping of the causal mask included, per device (shapes inside
    ``shard_map`` are one device's). A function is counted each time it is traced: the decoder's
    layer scan traces its body once, however far it is unrolled, so the count is one layer's and
    the caller multiplies by the layers (`jaxjudge.aot.compile` does).
    """
    box = [0.0]
    _COUNTERS.append(box)
    try:
        yield box
    finally:
        _COUNTERS.remove(box)


def _count(kind: str, batch: int, heads: int, q_len: int, kv_len: int, head_dim: int, spec: SplashKernel):
    if not _COUNTERS:
        return
    bq, bkv = min(spec.block_q, q_len), min(spec.block_kv, kv_len)
    if kind == "causal":  # q block i computes the key blocks that start at or before its last row
        blocks = sum(((i + 1) * bq - 1) // bkv + 1 for i in range(q_len // bq))
    else:
        blocks = (q_len // bq) * (kv_len // bkv)
    flops = 4.0 * batch * heads * blocks * bq * bkv * head_dim
    for box in _COUNTERS:
        box[0] += flops


def _segments(q_ids: jax.Array, kv_ids: jax.Array):
    # As in `_kernel`: Pallas's TPU kernels load where a kernel runs.
    from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import SegmentIds  # noqa: PLC0415
    return SegmentIds(q=q_ids, kv=kv_ids)


def _local(q_btnh, own_k, own_v, own_mask, own_pos, prefix_k, prefix_v, prefix_valid, prefix_pos, window, *,
           scaling: float, cap: float | None, dtype, spec: SplashKernel) -> jax.Array:
    """The blocks on one device's rows and heads: [B, T, N, H] out. With a ``window``, the
    kernel where it hides nothing on these rows, else XLA's masked attention."""
    kernel = functools.partial(_through_kernel, scaling=scaling, cap=cap, dtype=dtype, spec=spec)
    if window is None:
        return kernel(q_btnh, own_k, own_v, own_mask, prefix_k, prefix_v, prefix_valid)
    blocks = [KeyBlock(own_k, own_v, own_mask, own_pos, causal=True)]
    if prefix_k is not None:
        blocks.insert(0, KeyBlock(prefix_k, prefix_v, prefix_valid, prefix_pos, shared=True))
    # A real query sees only valid keys at or before its own position (its own token among
    # them), so no query-key pair it sees is further apart than `top - low`. Rows with no real
    # query give top 0, and no pair.
    top = jnp.max(jnp.where(own_mask, own_pos, 0))
    low = top
    for blk in blocks:
        low = jnp.minimum(low, jnp.min(jnp.where(blk.valid_bs, blk.positions_bs, top)))

    def masked(q, blocks):
        return segmented_attention(q, blocks, own_pos, scaling=scaling, window=window, cap=cap, dtype=dtype)

    def whole(q, blocks):
        pre = blocks[0] if len(blocks) == 2 else None
        return kernel(q, blocks[-1].keys, blocks[-1].values, blocks[-1].valid_bs,
                      *((None,) * 3 if pre is None else (pre.keys, pre.values, pre.valid_bs)))

    return jax.lax.cond(top - low < window, whole, masked, q_btnh, blocks)


def _through_kernel(q_btnh, own_k, own_v, own_mask, prefix_k, prefix_v, prefix_valid, *, scaling: float,
                    cap: float | None, dtype, spec: SplashKernel) -> jax.Array:
    """The blocks through the kernel, no window."""
    b, t, n, _ = q_btnh.shape
    tp = _round_up(t, math.lcm(LANES, spec.block_q, spec.block_kv))  # whole query and key blocks

    def rows_heads_first(x):  # [B, T, ., H] padded to tp -> [B, ., tp, H]
        return jnp.pad(x, ((0, 0), (0, tp - t), (0, 0), (0, 0))).transpose(0, 2, 1, 3)

    q_bnth = rows_heads_first((q_btnh * jnp.asarray(scaling, q_btnh.dtype)).astype(dtype))
    seg_bt = jnp.pad(own_mask.astype(jnp.int32), ((0, 0), (0, tp - t)))  # padding: segment 0
    own = _kernel("causal", n, tp, tp, cap, spec)
    _count("causal", b, n, tp, tp, q_btnh.shape[-1], spec)
    o_bnth, (lse_bnt,) = jax.vmap(own)(q_bnth, rows_heads_first(own_k.astype(dtype)),
                                       rows_heads_first(own_v.astype(dtype)),
                                       segment_ids=_segments(seg_bt, seg_bt))
    o_bnth = o_bnth.astype(jnp.float32)
    if prefix_k is not None:
        p, s = prefix_k.shape[:2]
        r = b // p
        sp = _round_up(s, spec.block_kv)

        def slots_heads_first(x):  # [P, S, K, H] -> [P, K, sp, H]
            return jnp.pad(x.astype(dtype), ((0, 0), (0, sp - s), (0, 0), (0, 0))).transpose(0, 2, 1, 3)

        # A group's R rows' queries end to end: [P, N, R * tp, H] against its prefix.
        q_pnqh = q_bnth.reshape(p, r, n, tp, -1).transpose(0, 2, 1, 3, 4).reshape(p, n, r * tp, -1)
        valid_ps = jnp.pad(prefix_valid.astype(jnp.int32), ((0, 0), (0, sp - s)))
        shared = _kernel("full", n, r * tp, sp, cap, spec)
        _count("full", p, n, r * tp, sp, q_btnh.shape[-1], spec)
        o_pnqh, (lse_pnq,) = jax.vmap(shared)(q_pnqh, slots_heads_first(prefix_k), slots_heads_first(prefix_v),
                                              segment_ids=_segments(jnp.ones((p, r * tp), jnp.int32), valid_ps))
        o_pre = o_pnqh.reshape(p, n, r, tp, -1).transpose(0, 2, 1, 3, 4).reshape(b, n, tp, -1)
        lse_pre = lse_pnq.reshape(p, n, r, tp).transpose(0, 2, 1, 3).reshape(b, n, tp)
        # A group whose prefix has no valid slot contributes nothing (the kernel's softmax over
        # nothing but masked slots is a uniform average: finite, and dropped here).
        seen_b = jnp.repeat(prefix_valid.any(axis=1), r)[:, None, None]
        m = jnp.maximum(lse_bnt, lse_pre)
        w_own = jnp.exp(lse_bnt - m)
        w_pre = jnp.where(seen_b, jnp.exp(lse_pre - m), 0.0)
        o_pre = jnp.where(seen_b[..., None], o_pre.astype(jnp.float32), 0.0)
        o_bnth = (o_bnth * w_own[..., None] + o_pre * w_pre[..., None]) / (w_own + w_pre)[..., None]
    return o_bnth[:, :, :t].astype(dtype).transpose(0, 2, 1, 3)


def splash_attention(q_btnh: jax.Array, blocks: Sequence[KeyBlock], q_pos_bt: jax.Array, *, scaling: float,
                     window, cap: float | None, dtype: jnp.dtype, spec: SplashKernel) -> jax.Array:
    """:func:`jaxjudge.models.attention.segmented_attention` through the splash kernel.

    Args:
        q_btnh: rotated queries [B, T, N, H].
        blocks: the causal own block, optionally after one shared prefix block (see
            :func:`supported`).
        q_pos_bt: rotary positions [B, T] (those of the own block; read only with a window).
        scaling, window, cap, dtype: as :func:`segmented_attention` (a window is checked on
            each device: see the module docstring).
        spec: the kernel's options and mesh.

    Returns:
        The attention output [B, T, N, H] in ``dtype``.
    """
    if not supported(blocks, window):
        raise ValueError("splash_attention: takes the causal own block, optionally after one shared prefix")
    own = blocks[-1]
    prefix = blocks[0] if len(blocks) == 2 else None
    windowed = window is not None
    args = [q_btnh, own.keys, own.values, own.valid_bs, q_pos_bt if windowed else None]
    args += [None] * 4 if prefix is None else [prefix.keys, prefix.values, prefix.valid_bs,
                                               prefix.positions_bs if windowed else None]
    args.append(jnp.asarray(window, jnp.int32) if windowed else None)
    fn = functools.partial(_local, scaling=scaling, cap=cap, dtype=dtype, spec=spec)
    mesh = spec.mesh
    if mesh is None:
        return fn(*args)
    b, kv = q_btnh.shape[0], own.keys.shape[2]
    n_data, n_model = mesh.shape.get("data", 1), mesh.shape.get("model", 1)
    groups = 1 if prefix is None else prefix.keys.shape[0]
    # Rows over data when they split (and their prefix groups with them, or one prefix every
    # shard reads whole); heads over model when the K/V heads split.
    rows = "data" if n_data > 1 and b % n_data == 0 and (groups == 1 or groups % n_data == 0) else None
    heads = "model" if n_model > 1 and kv % n_model == 0 else None
    pre_rows = rows if groups > 1 else None
    q_spec = P(rows, None, heads, None)
    pre_spec = P(pre_rows, None, heads, None)
    specs = [q_spec, q_spec, q_spec, P(rows, None), P(rows, None), pre_spec, pre_spec, P(pre_rows, None),
             P(pre_rows, None), P()]
    given = [i for i, a in enumerate(args) if a is not None]

    def on_shard(*xs):
        full = [None] * len(args)
        for i, x in zip(given, xs):
            full[i] = x
        return fn(*full)

    sharded = jax.shard_map(on_shard, mesh=mesh, in_specs=tuple(specs[i] for i in given), out_specs=q_spec,
                            check_vma=False)
    return sharded(*(args[i] for i in given))


def use_kernel(model, spec: SplashKernel | None):
    """Runs every attention layer of ``model`` (a `jaxjudge.models.decoder.Decoder`) through the
    splash kernel where it serves (``spec``), or back through XLA's attention (None). The option
    is part of the model's graph definition, so jitted functions retrace for it. Returns the model."""
    if spec is not None and not isinstance(spec, SplashKernel):
        raise TypeError(f"use_kernel: spec must be a SplashKernel or None, got {type(spec).__name__}")
    found = 0
    for _, module in nnx.iter_graph(model):
        if isinstance(module, Attention):
            module.kernel = spec
            found += 1
    if not found:
        raise ValueError(f"use_kernel: {type(model).__name__} has no attention layer")
    return model
