"""One Flax NNX decoder for the Llama, Qwen2/3, Mistral, Phi-3 and Gemma 1/2/3 families, with a
KV cache.

The families share one block; config switches add what a family has on top of Llama's: q/k
head norms (Qwen3, Gemma 3), the extra output norms of Gemma 2/3 (``sandwich_norms``), score
scaling by ``query_pre_attn_scalar``, attention and final logit soft-capping (Gemma 2),
per-layer sliding windows and per-layer rotary bases (Gemma 3's local and global layers).

Module and parameter names follow Hugging Face (``embed_tokens``, ``layers.self_attn.q_proj``,
``mlp.gate_proj``, ``input_layernorm``, ``post_attention_layernorm``, ``norm``, ``lm_head``) so
that the conversion table in :mod:`jaxjudge.models.convert` is close to the identity. The layers
are one :class:`DecoderLayer` whose parameters carry a leading [L] axis (layer i of Hugging
Face's ``model.layers.{i}`` is slice i), and :meth:`Decoder.trunk` scans it: a judge of 80
layers compiles one layer body, as one of 2 does. What differs between layers (Gemma's sliding
window and rotary base) is a scanned input, not a Python attribute. Leaves use
the NNX names: ``kernel`` (laid out for the einsum, e.g. q_proj ``[D, N, H]``, not torch's
``[out, in]``), ``bias``, ``scale`` (norms), ``embedding``.

Dimension letters used in shapes and einsum strings:

    B batch   T new tokens in this call   S cache slots   P prefix slots   R read positions
    D hidden  F mlp width   V vocabulary  L layers
    N query heads   K key/value heads   G = N // K query heads per K/V head   H head width

The building blocks live beside this module: :mod:`~jaxjudge.models.layers` (projections, norms,
MLP), :mod:`~jaxjudge.models.attention` (the segmented softmax over key blocks),
:mod:`~jaxjudge.models.kvcache` (the cache and batch padding; its public names are re-exported
here). What runs the decoder (row reads, token NLL, the decoding loop) is the engine's:
:mod:`jaxjudge.engine.primitives` and :mod:`jaxjudge.engine.decode`.

The computation follows transformers' eager float32 path operation by operation (RMSNorm in
float32, rotary tables in float32 cast to the compute dtype, softmax in float32), which is what
the parity tests hold it to.

Padding, positions and the KV cache
-----------------------------------
Every call takes ``tokens [B, T]`` with a boolean ``mask [B, T]`` (True for real tokens) and
explicit rotary ``positions [B, T]``. Padding may be on either side; :func:`pad_batch` pads on
the LEFT by default so that the last real token of every row sits at index T - 1 and
generation appends to aligned slots. Masked slots are never attended to; their outputs are
finite garbage and must not be read.

The cache (:class:`KVCache`) is preallocated: ``k``/``v`` ``[L, B, S, K, H]``, plus per-slot
``positions [B, S]``, ``valid [B, S]`` and a shared fill level ``length``. A call with a cache
writes its T new tokens at slots ``[length, length + T)`` of every row and attends over all
valid slots before them (causality is by slot; a slot of a padding token is invalid). A
*prefix* is a KVCache that is only read: its keys/values are attended to by every row of the
batch without being copied B times, which is how the shared instructions + article of many
SummEval summaries are computed once. A prefix cache of batch P holds P prefixes (P divides
B): row b continues prefix b // (B / P), so one call scores the tails of several documents,
each against its own article, and on a mesh the prefixes and their rows split over ``data``
together.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jaxjudge.models.attention import CPU_QUERY_CHUNK, Attention, KeyBlock
from jaxjudge.models.decoder_config import DecoderConfig, rope_inverse_frequencies
from jaxjudge.models.kvcache import KVCache, default_positions, init_cache, pad_batch
from jaxjudge.models.layers import (
    DTYPES, FUSED_GATE_UP_MIN_ROWS, MLP, Embedding, Projection, RMSNorm, as_dtype, softcap,
)

__all__ = [
    "TARGETS",
    "backend_target",
    "Decoder",
    "DecoderLayer",
    "KVCache",
    "init_cache",
    "default_positions",
    "pad_batch",
    "forward",
    "DTYPES",
    "as_dtype",
]


TARGETS = ("cpu", "gpu", "tpu")
"""The chips a decoder's program can be built for (`Decoder`'s ``target``)."""


def backend_target() -> str:
    """The kind of chip of JAX's default backend: ``"cpu"``, ``"tpu"``, or ``"gpu"`` (CUDA, ROCm)."""
    backend = jax.default_backend()
    return backend if backend in ("cpu", "tpu") else "gpu"


class DecoderLayer(nnx.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``.

    With ``cfg.sandwich_norms`` (Gemma 2/3) the outputs are normed as well:
    ``x + post_attention_layernorm(attn(input_layernorm(x)))`` then
    ``x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))``. Without it,
    ``post_attention_layernorm`` is the MLP's input norm, as Hugging Face names it.
    """

    def __init__(self, cfg: DecoderConfig, *, dtype, param_dtype, rngs: nnx.Rngs,
                 fused_gate_up_min_rows: int | None = FUSED_GATE_UP_MIN_ROWS,
                 attention_query_chunk: int | None = CPU_QUERY_CHUNK):
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        norm = dict(eps=cfg.rms_norm_eps, plus_one=cfg.norm_plus_one, param_dtype=param_dtype)
        self.input_layernorm = RMSNorm(cfg.hidden_size, **norm)
        self.self_attn = Attention(cfg, **kw, query_chunk=attention_query_chunk)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, **norm)
        if cfg.sandwich_norms:
            self.pre_feedforward_layernorm = RMSNorm(cfg.hidden_size, **norm)
            self.post_feedforward_layernorm = RMSNorm(cfg.hidden_size, **norm)
        else:
            self.pre_feedforward_layernorm = self.post_feedforward_layernorm = None
        self.mlp = MLP(cfg, **kw, fused_gate_up_min_rows=fused_gate_up_min_rows)

    def __call__(self, x_btd: jax.Array, cos_bth: jax.Array, sin_bth: jax.Array,
                 positions_bt: jax.Array, mask_bt: jax.Array, prefix: KeyBlock | None = None,
                 past: KeyBlock | None = None, window: jax.Array | int | None = None,
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One block on the residual stream ``x_btd`` [B, T, D]; the other arguments as
        :meth:`Attention.__call__ <jaxjudge.models.attention.Attention.__call__>`.

        Returns:
            (new residual stream [B, T, D], keys [B, T, K, H], values [B, T, K, H]).
        """
        sandwich = self.pre_feedforward_layernorm is not None
        attn_btd, k_btkh, v_btkh = self.self_attn(self.input_layernorm(x_btd), cos_bth, sin_bth,
                                                  positions_bt, mask_bt, prefix, past, window)
        if sandwich:
            attn_btd = self.post_attention_layernorm(attn_btd)
        x_btd = x_btd + attn_btd
        mlp_norm = self.pre_feedforward_layernorm if sandwich else self.post_attention_layernorm
        mlp_btd = self.mlp(mlp_norm(x_btd))
        if sandwich:
            mlp_btd = self.post_feedforward_layernorm(mlp_btd)
        return x_btd + mlp_btd, k_btkh, v_btkh


# The window of a full-attention layer scanned together with windowed ones: longer than any
# position difference, so it masks nothing.
NO_WINDOW = 1 << 30


def _stacked_layers(cfg: DecoderConfig, kw: dict[str, Any]) -> DecoderLayer:
    """Every layer's parameters stacked on a leading [L] axis in one `DecoderLayer`, so that the
    trunk scans one compiled layer over them (compile time does not grow with depth).

    Each layer is built on its own (its own random initial values) and the L states stacked;
    every parameter's logical axes gain a leading ``"layers"`` (replicated by the rules).
    """
    built = [DecoderLayer(cfg, **kw) for _ in range(cfg.num_hidden_layers)]
    graphdef = nnx.graphdef(built[0])
    states = [nnx.state(layer) for layer in built]

    def stack(*vs: nnx.Variable) -> nnx.Variable:
        axes = vs[0].get_metadata().get("out_sharding")
        out = vs[0].replace(jnp.stack([v[...] for v in vs]))
        if axes is not None:
            out.set_metadata(out_sharding=("layers", *axes))
        return out

    stacked = jax.tree.map(stack, *states, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return nnx.merge(graphdef, stacked)


class Decoder(nnx.Module):
    """Decoder-only transformer of one of the supported families.

    Args:
        cfg: the family config (its class switches the Gemma norm/embedding forms).
        rngs: random streams for the (throw-away) initial parameters.
        dtype: compute dtype (activations, cache).
        param_dtype: storage dtype of the parameters.
        scan_unroll: ``unroll`` of the layer scan: 1 keeps one compiled layer body; the number
            of layers unrolls it (what a cost analysis that counts a loop body once needs, see
            `jaxjudge.aot`). An int, never a bool: the graphdef compares it, and True == 1.
        fused_gate_up_min_rows: the MLP's CPU tuning (`jaxjudge.models.layers.MLP`); None turns
            it off (an accelerator program, where stacking the kernels per call is a copy).
        attention_query_chunk: the attention's CPU tuning (`jaxjudge.models.attention.Attention`);
            None turns it off.
        target: the chip the program is for, ``"cpu"``, ``"gpu"`` or ``"tpu"`` (None: the
            default backend's kind, read here, once). The two CPU tunings apply only for
            ``"cpu"``; nothing is read from the backend while tracing, so a program traced on a
            CPU host for a TPU (`jaxjudge.aot`, ``target="tpu"``) is the TPU's program.
    """

    def __init__(self, cfg: DecoderConfig, *, rngs: nnx.Rngs, dtype: Any = jnp.float32,
                 param_dtype: Any = jnp.float32, scan_unroll: int = 1,
                 fused_gate_up_min_rows: int | None = FUSED_GATE_UP_MIN_ROWS,
                 attention_query_chunk: int | None = CPU_QUERY_CHUNK, target: str | None = None):
        dtype, param_dtype = as_dtype(dtype), as_dtype(param_dtype)
        if isinstance(scan_unroll, bool) or not isinstance(scan_unroll, int) or scan_unroll < 1:
            raise ValueError(f"Decoder: scan_unroll must be a positive int, got {scan_unroll!r}")
        target = backend_target() if target is None else target
        if target not in TARGETS:
            raise ValueError(f"Decoder: target must be one of {TARGETS}, got {target!r}")
        if target != "cpu":  # the CPU tunings are copies and extra programs elsewhere
            fused_gate_up_min_rows = attention_query_chunk = None
        self.target: str = target
        self.cfg = cfg
        self.dtype = dtype
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size, param_dtype=param_dtype,
                                      rngs=rngs)
        self.layers = _stacked_layers(cfg, {**kw, "fused_gate_up_min_rows": fused_gate_up_min_rows,
                                            "attention_query_chunk": attention_query_chunk})
        self.scan_unroll: int = scan_unroll
        self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, plus_one=cfg.norm_plus_one,
                            param_dtype=param_dtype)
        if cfg.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = Projection("BRD,DV->BRV", (cfg.hidden_size, cfg.vocab_size),
                                      ("embed", "vocab"), None, None, **kw)

    def embed(self, tokens_bt: jax.Array) -> jax.Array:
        """Token embeddings [B, T, D] in the compute dtype (scaled by sqrt(D) for Gemma)."""
        x_btd = jnp.take(self.embed_tokens.embedding[...], tokens_bt, axis=0).astype(self.dtype)
        if self.cfg.scale_embeddings:
            # transformers rounds sqrt(D) to the weight dtype before the multiply.
            x_btd = x_btd * jnp.asarray(math.sqrt(self.cfg.hidden_size), self.dtype)
        return x_btd

    def rotary(self, positions_bt: jax.Array, layer: int = 0) -> tuple[jax.Array, jax.Array]:
        """cos, sin tables [B, T, H] of layer ``layer``'s rotary base (angles in float32, cast
        to the compute dtype)."""
        inv_freq_f = jnp.asarray(rope_inverse_frequencies(self.cfg, layer))  # [H/2], a jit constant
        angles_btf = positions_bt.astype(jnp.float32)[..., None] * inv_freq_f
        angles_bth = jnp.concatenate([angles_btf, angles_btf], axis=-1)
        return jnp.cos(angles_bth).astype(self.dtype), jnp.sin(angles_bth).astype(self.dtype)

    def trunk(self, tokens_bt: jax.Array, positions_bt: jax.Array, mask_bt: jax.Array,
              cache: KVCache | None = None, prefix: KVCache | None = None,
              ) -> tuple[jax.Array, KVCache | None]:
        """All layers and the final norm, without the output head.

        Args:
            tokens_bt: token ids [B, T] int.
            positions_bt: rotary positions [B, T] int.
            mask_bt: True for real tokens [B, T] bool.
            cache: optional cache (batch B); the tokens are written at slots
                ``[cache.length, cache.length + T)``. The caller guarantees room.
            prefix: optional read-only cache of P prefixes (P divides B): row b continues
                prefix b // (B / P); P = 1 is one prefix every row continues.

        Returns:
            (final-normed hidden states [B, T, D], updated cache or None).
        """
        b, t = tokens_bt.shape
        mask_bt = mask_bt.astype(bool)
        positions_bt = positions_bt.astype(jnp.int32)
        x_btd = self.embed(tokens_bt)
        cfg = self.cfg
        n_layers = cfg.num_hidden_layers
        # One rotary table per distinct base (Gemma 3: local and global layers); each layer
        # reads its own by index, a scanned input like its parameters and window.
        ropes = [cfg.layer_rope(i) for i in range(n_layers)]
        bases = list(dict.fromkeys(ropes))
        tables = [self.rotary(positions_bt, ropes.index(base)) for base in bases]
        cos_rbth = jnp.stack([c for c, _ in tables])
        sin_rbth = jnp.stack([s for _, s in tables])
        xs: dict[str, Any] = {
            "layer": nnx.state(self.layers),
            "rope": jnp.asarray([bases.index(r) for r in ropes], jnp.int32),
        }
        windows = [cfg.layer_window(i) for i in range(n_layers)]
        if any(w is not None for w in windows):
            # A full-attention layer among windowed ones: a window no position difference reaches.
            xs["window"] = jnp.asarray([NO_WINDOW if w is None else w for w in windows], jnp.int32)
        if prefix is not None:
            if b % prefix.batch_size:
                raise ValueError(f"{b} rows cannot be split evenly among {prefix.batch_size} prefixes")
            xs["prefix_k"], xs["prefix_v"] = prefix.k, prefix.v
        # A cache known to be empty is written, not read: no block of its slots to attend to.
        read_cache = cache is not None and not cache.empty
        if read_cache:
            xs["past_k"], xs["past_v"] = cache.k, cache.v
        layer_def = nnx.graphdef(self.layers)

        # The cache is read per layer as it was before this call, and the new tokens' keys and
        # values are written into it once, after the last layer: per-layer writes into the
        # stacked [L, B, S, K, H] buffer made XLA copy the whole buffer once per layer.
        def one_layer(x_btd: jax.Array, xs_l: dict[str, Any]) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
            layer = nnx.merge(layer_def, xs_l["layer"])
            pre = past = None
            if prefix is not None:
                pre = KeyBlock(xs_l["prefix_k"], xs_l["prefix_v"], prefix.valid, prefix.positions, shared=True)
            if read_cache:
                past = KeyBlock(xs_l["past_k"], xs_l["past_v"], cache.valid, cache.positions)
            cos_bth, sin_bth = cos_rbth[xs_l["rope"]], sin_rbth[xs_l["rope"]]
            x_btd, k_btkh, v_btkh = layer(x_btd, cos_bth, sin_bth, positions_bt, mask_bt, pre, past,
                                          xs_l.get("window"))
            if cache is None:
                return x_btd, ()
            return x_btd, (k_btkh.astype(cache.k.dtype), v_btkh.astype(cache.v.dtype))

        x_btd, new_kv = jax.lax.scan(one_layer, x_btd, xs, unroll=self.scan_unroll)

        new_cache = None
        if cache is not None:
            start = cache.length
            new_cache = KVCache(
                k=jax.lax.dynamic_update_slice(cache.k, new_kv[0], (0, 0, start, 0, 0)),
                v=jax.lax.dynamic_update_slice(cache.v, new_kv[1], (0, 0, start, 0, 0)),
                positions=jax.lax.dynamic_update_slice(cache.positions, positions_bt, (0, start)),
                valid=jax.lax.dynamic_update_slice(cache.valid, mask_bt, (0, start)),
                length=cache.length + t,
            )
        return self.norm(x_btd), new_cache

    def head(self, h_brd: jax.Array) -> jax.Array:
        """Output logits [B, R, V] in float32 from final-normed hidden states [B, R, D]
        (soft-capped in float32 when the family caps them)."""
        if self.lm_head is None:
            logits_brv = jnp.einsum("BRD,VD->BRV", h_brd, self.embed_tokens.embedding[...].astype(self.dtype),
                                    preferred_element_type=jnp.float32)
        else:
            logits_brv = jnp.einsum("BRD,DV->BRV", h_brd, self.lm_head.kernel[...].astype(self.dtype),
                                    preferred_element_type=jnp.float32)
        return softcap(logits_brv, self.cfg.final_logit_softcapping)

    def __call__(self, tokens_bt: jax.Array, positions_bt: jax.Array, mask_bt: jax.Array,
                 read_idx_br: jax.Array, cache: KVCache | None = None, prefix: KVCache | None = None,
                 ) -> tuple[jax.Array, KVCache | None]:
        """Logits at the requested positions only.

        Args:
            tokens_bt, positions_bt, mask_bt: see :meth:`trunk`.
            read_idx_br: indices into the T new tokens whose next-token logits are wanted [B, R].
            cache, prefix: see :meth:`trunk`.

        Returns:
            (logits [B, R, V] float32, updated cache or None).
        """
        h_btd, new_cache = self.trunk(tokens_bt, positions_bt, mask_bt, cache, prefix)
        h_brd = jnp.take_along_axis(h_btd, read_idx_br.astype(jnp.int32)[..., None], axis=1)
        return self.head(h_brd), new_cache


@functools.partial(jax.jit, static_argnames=("graphdef",), donate_argnames=("cache",))
def forward(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    read_idx_br: jax.Array,
    positions_bt: jax.Array | None = None,
    cache: KVCache | None = None,
    prefix: KVCache | None = None,
) -> tuple[jax.Array, KVCache | None]:
    """The jitted fast path: logits at ``read_idx`` only, optionally through a KV cache.

    One compilation per (B, T, R, S, P, presence of cache/prefix); callers bucket lengths.

    Args:
        graphdef, state: ``nnx.split(decoder)``.
        tokens_bt: token ids [B, T] int32.
        mask_bt: True for real tokens [B, T] bool.
        read_idx_br: positions in [0, T) to read logits at [B, R] int32.
        positions_bt: rotary positions [B, T]; default :func:`default_positions`.
        cache: batch-B cache to append to (DONATED: do not reuse the argument afterwards).
        prefix: read-only cache of P prefixes, each continued by B / P consecutive rows (not
            donated).

    Returns:
        (logits [B, R, V] float32, updated cache or None).
    """
    model = nnx.merge(graphdef, state)
    if positions_bt is None:
        positions_bt = default_positions(mask_bt, cache, prefix)
    return model(tokens_bt, positions_bt, mask_bt, read_idx_br, cache, prefix)
