"""The decoder's building blocks other than attention: einsum projections, RMSNorm, the
embedding table, the gated MLP, soft-capping, and the supported dtypes.

Parameter leaves use the NNX names (``kernel`` laid out for the einsum, ``bias``, ``scale``,
``embedding``); each carries its logical axis names in ``out_sharding`` for
:mod:`jaxjudge.models.sharding`. Shape letters are those of :mod:`jaxjudge.models.decoder`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxjudge.models.decoder_config import DecoderConfig

__all__ = [
    "DTYPES",
    "as_dtype",
    "FUSED_GATE_UP_MIN_ROWS",
    "Projection",
    "RMSNorm",
    "Embedding",
    "MLP",
    "softcap",
]

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}

# CPU tuning: a call with at least this many token rows (B * T) computes the MLP's gate and up
# products as one [D, 2, F] einsum, which CPU XLA runs about 20% faster than two [D, F] ones.
# Decoding steps (a few rows) stay unfused: there the stacked copy of both kernels costs more
# than the products. None turns the fused path off. Both paths compute the same products. On
# any other chip (TPU, GPU) the copy is never worth it: `Decoder` turns it off for any other target.
FUSED_GATE_UP_MIN_ROWS: int | None = 64


def as_dtype(dtype: Any) -> jnp.dtype:
    """Normalises ``"float32"``/``"bfloat16"`` (or the jnp dtypes) to a jnp dtype."""
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not supported; use one of {sorted(DTYPES)}")
        return jnp.dtype(DTYPES[dtype])
    d = jnp.dtype(dtype)
    if d not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        raise ValueError(f"dtype {d} is not supported; use float32 or bfloat16")
    return d


def softcap(x: jax.Array, cap: float | None) -> jax.Array:
    """``cap * tanh(x / cap)`` (identity for None): Gemma 2's bound on scores and logits."""
    if cap is None:
        return x
    return jnp.tanh(x / cap) * cap


class Projection(nnx.Module):
    """A linear map written as one einsum, with an optional bias over its output axes."""

    def __init__(
        self,
        equation: str,
        kernel_shape: tuple[int, ...],
        kernel_axes: tuple[str, ...],
        bias_shape: tuple[int, ...] | None,
        bias_axes: tuple[str, ...] | None,
        *,
        dtype: jnp.dtype,
        param_dtype: jnp.dtype,
        rngs: nnx.Rngs,
    ):
        self.equation = equation
        self.dtype = dtype
        # Contracted kernel axes are the ones the input shares (D for q_proj, N and H for o_proj).
        x_spec, k_spec = equation.split("->")[0].split(",")
        fan_in = math.prod(n for c, n in zip(k_spec, kernel_shape) if c in x_spec)
        init = jax.random.normal(rngs.params(), kernel_shape, param_dtype) / math.sqrt(fan_in)
        self.kernel = nnx.Param(init, out_sharding=kernel_axes, eager_sharding=False)
        if bias_shape is None:
            self.bias = None
        else:
            self.bias = nnx.Param(
                jnp.zeros(bias_shape, param_dtype), out_sharding=bias_axes, eager_sharding=False
            )

    def __call__(self, x: jax.Array) -> jax.Array:
        y = jnp.einsum(self.equation, x.astype(self.dtype), self.kernel[...].astype(self.dtype))
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        return y


class RMSNorm(nnx.Module):
    """RMS normalisation over the last axis, computed in float32 as transformers does.

    Llama form: ``scale * (x / rms(x))`` with the normalised value cast back to the input dtype
    before the multiply. Gemma form (``plus_one``): ``(x / rms(x)) * (1 + scale)`` entirely in
    float32, cast at the end. The two differ in rounding under bfloat16, so both are kept.
    """

    def __init__(self, dim: int, *, eps: float, plus_one: bool, param_dtype: jnp.dtype):
        self.eps = eps
        self.plus_one = plus_one
        init = jnp.zeros((dim,), param_dtype) if plus_one else jnp.ones((dim,), param_dtype)
        self.scale = nnx.Param(init, out_sharding=("norm",), eager_sharding=False)

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        w = self.scale[...]
        if self.plus_one:
            return (normed * (1.0 + w.astype(jnp.float32))).astype(x.dtype)
        return w.astype(x.dtype) * normed.astype(x.dtype)


class Embedding(nnx.Module):
    """Token embedding table ``[V, D]``."""

    def __init__(self, vocab: int, dim: int, *, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        init = jax.random.normal(rngs.params(), (vocab, dim), param_dtype)
        self.embedding = nnx.Param(init, out_sharding=("vocab", "embed"), eager_sharding=False)


class MLP(nnx.Module):
    """Gated MLP: ``down(act(gate(x)) * up(x))``, SwiGLU (SiLU) or GeGLU (tanh GELU).

    Args:
        cfg: the config (sizes, biases, activation).
        fused_gate_up_min_rows: the CPU tuning of :data:`FUSED_GATE_UP_MIN_ROWS` (None: off).
    """

    def __init__(self, cfg: DecoderConfig, *, dtype, param_dtype, rngs: nnx.Rngs,
                 fused_gate_up_min_rows: int | None = FUSED_GATE_UP_MIN_ROWS):
        d, f = cfg.hidden_size, cfg.intermediate_size
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        b = cfg.mlp_bias
        self.gate_proj = Projection("BTD,DF->BTF", (d, f), ("embed", "mlp"),
                                    (f,) if b else None, ("mlp",), **kw)
        self.up_proj = Projection("BTD,DF->BTF", (d, f), ("embed", "mlp"),
                                  (f,) if b else None, ("mlp",), **kw)
        self.down_proj = Projection("BTF,FD->BTD", (f, d), ("mlp", "embed"),
                                    (d,) if b else None, ("embed",), **kw)
        self.act = cfg.hidden_act
        self.fused_gate_up_min_rows = fused_gate_up_min_rows

    def __call__(self, x_btd: jax.Array) -> jax.Array:
        rows = x_btd.shape[0] * x_btd.shape[1]
        if self.fused_gate_up_min_rows is not None and rows >= self.fused_gate_up_min_rows:
            gate_btf, up_btf = self._gate_up_fused(x_btd)
        else:
            gate_btf, up_btf = self.gate_proj(x_btd), self.up_proj(x_btd)
        if self.act == "silu":
            gate_btf = jax.nn.silu(gate_btf)
        else:
            gate_btf = jax.nn.gelu(gate_btf, approximate=True)
        return self.down_proj(gate_btf * up_btf)

    def _gate_up_fused(self, x_btd: jax.Array) -> tuple[jax.Array, jax.Array]:
        # Stacked on a new axis, not concatenated along F, so that a kernel sharded over F stays
        # sharded the same way.
        dtype = self.gate_proj.dtype
        kernel_d2f = jnp.stack([self.gate_proj.kernel[...], self.up_proj.kernel[...]], axis=1)
        both_bt2f = jnp.einsum("BTD,DCF->BTCF", x_btd.astype(dtype), kernel_d2f.astype(dtype))
        if self.gate_proj.bias is not None:
            both_bt2f = both_bt2f + jnp.stack([self.gate_proj.bias[...], self.up_proj.bias[...]]).astype(dtype)
        return both_bt2f[..., 0, :], both_bt2f[..., 1, :]
