"""The sizes and switches every decoder family shares (:class:`DecoderConfig`), and the
rotary frequencies a config implies.

The family subclasses in :mod:`jaxjudge.models.config` fix each family's switches and defaults
and read its Hugging Face fields; this base class validates the values, derives per-layer
settings (window, rotary base) and reads the fields all families have.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping

import numpy as np

from jaxjudge.models.config_reader import (
    FieldReader,
    LinearRopeScaling,
    RopeScaling,
    UnsupportedConfigError,
    parse_rope,
)

__all__ = ["DecoderConfig", "rope_inverse_frequencies"]


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Sizes and switches of a pre-norm decoder-only transformer.

    Attributes:
        vocab_size: V, rows of the embedding and of the output head.
        hidden_size: D, width of the residual stream.
        intermediate_size: F, width of the gated MLP.
        num_hidden_layers: L.
        num_attention_heads: N, query heads.
        num_key_value_heads: K, key/value heads (K divides N; N // K queries share one K/V head).
        head_dim: H, width of one head (N * H need not equal D).
        rms_norm_eps: epsilon inside the RMS normalisation.
        rope_theta: rotary base wavelength.
        rope_scaling: Llama-3.1 or linear rotary scaling, or None for plain rotary embeddings
            (with ``sliding_rope_theta`` set, it applies to the full-attention layers only).
        max_position_embeddings: trained context length (informational, not enforced).
        tie_word_embeddings: whether the output head reuses the input embedding matrix.
        attention_bias: bias on the q/k/v projections.
        attention_out_bias: bias on the output projection o_proj.
        mlp_bias: bias on gate/up/down projections.
        hidden_act: ``"silu"`` (SwiGLU) or ``"gelu_tanh"`` (GeGLU, tanh approximation).
        sliding_window: local attention window W (a query sees keys whose position is within
            W - 1 of its own), or None.
        sliding_layers: per layer, whether it uses the sliding window; None means all layers do
            when ``sliding_window`` is set.
        sliding_rope_theta: rotary base of the sliding-window layers, unscaled (Gemma 3's local
            layers); None: every layer uses ``rope_theta`` and ``rope_scaling``.
        qk_norm: an RMSNorm over each head's H channels of the queries and keys, before the
            rotary embedding (Qwen3, Gemma 3); same norm form as the others.
        sandwich_norms: Gemma 2/3 blocks: the attention and MLP outputs are normed too
            (``post_attention_layernorm``, ``post_feedforward_layernorm``) and the MLP input by
            ``pre_feedforward_layernorm``.
        query_pre_attn_scalar: scores are scaled by ``query_pre_attn_scalar ** -0.5`` instead of
            ``head_dim ** -0.5`` (Gemma 2/3).
        attn_logit_softcapping: scores become ``c * tanh(scores / c)`` before the mask (Gemma 2).
        final_logit_softcapping: logits become ``c * tanh(logits / c)`` (Gemma 2).
        bos_token_id, eos_token_ids, pad_token_id: special tokens (not used by the math).
    """

    model_type: ClassVar[str] = ""
    architecture: ClassVar[str] = ""
    norm_plus_one: ClassVar[bool] = False
    scale_embeddings: ClassVar[bool] = False

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    attention_out_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    sliding_window: int | None = None
    sliding_layers: tuple[bool, ...] | None = None
    sliding_rope_theta: float | None = None
    qk_norm: bool = False
    sandwich_norms: bool = False
    query_pre_attn_scalar: float | None = None
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{type(self).__name__}.{name} must be a positive int, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"{type(self).__name__}: num_attention_heads={self.num_attention_heads} is not a "
                f"multiple of num_key_value_heads={self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"{type(self).__name__}.head_dim must be even for rotary embeddings")
        if self.hidden_act not in ("silu", "gelu_tanh"):
            raise ValueError(f"{type(self).__name__}.hidden_act {self.hidden_act!r} is not supported")
        if self.sliding_layers is not None and len(self.sliding_layers) != self.num_hidden_layers:
            raise ValueError(
                f"{type(self).__name__}.sliding_layers has {len(self.sliding_layers)} entries for "
                f"{self.num_hidden_layers} layers"
            )
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"{type(self).__name__}.sliding_window must be positive")
        for name in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                     "sliding_rope_theta"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{type(self).__name__}.{name} must be positive or None, got {value!r}")

    # ------------------------------------------------------------------ derived sizes

    @property
    def family(self) -> str:
        return self.model_type

    @property
    def num_groups(self) -> int:
        """G = N // K: query heads per key/value head."""
        return self.num_attention_heads // self.num_key_value_heads

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of layer ``layer`` (None: full causal attention)."""
        if self.sliding_window is None:
            return None
        if self.sliding_layers is None or self.sliding_layers[layer]:
            return self.sliding_window
        return None

    def layer_rope(self, layer: int) -> tuple[float, RopeScaling | None]:
        """(rotary base, scaling) of layer ``layer``: the local base on sliding-window layers
        when ``sliding_rope_theta`` is set, else ``(rope_theta, rope_scaling)``."""
        if self.sliding_rope_theta is not None and self.layer_window(layer) is not None:
            return self.sliding_rope_theta, None
        return self.rope_theta, self.rope_scaling

    def num_params(self) -> int:
        """Number of parameters (counting a tied head once)."""
        d, f, n, k, h = (self.hidden_size, self.intermediate_size, self.num_attention_heads,
                         self.num_key_value_heads, self.head_dim)
        attn = d * (n + 2 * k) * h + n * h * d
        if self.attention_bias:
            attn += (n + 2 * k) * h
        if self.attention_out_bias:
            attn += d
        mlp = 3 * d * f + ((2 * f + d) if self.mlp_bias else 0)
        per_layer = attn + mlp + (4 if self.sandwich_norms else 2) * d
        if self.qk_norm:
            per_layer += 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * d
        return self.vocab_size * d + self.num_hidden_layers * per_layer + d + head

    # ------------------------------------------------------------------ construction

    @classmethod
    def tiny(cls, **overrides: Any) -> "DecoderConfig":
        """A test-sized config whose sizes are pairwise different, so a swapped axis fails.

        V=37, D=18, F=13, L=2, N=6 query heads sharing K=2 key/value heads (groups of 3),
        H=10 (N * H = 60 != D).
        """
        base = dict(
            vocab_size=37,
            hidden_size=18,
            intermediate_size=13,
            num_hidden_layers=2,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=10,
            max_position_embeddings=128,
        )
        base.update(cls._tiny_family_defaults())
        base.update(overrides)
        return cls(**base)

    @classmethod
    def _tiny_family_defaults(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def from_hf_config(cls, hf: Mapping[str, Any]) -> "DecoderConfig":
        """Builds the config from a Hugging Face ``config.json`` dict.

        Args:
            hf: the parsed ``config.json`` (or the equivalent dict built from GGUF metadata).

        Returns:
            The family's config.

        Raises:
            UnsupportedConfigError: naming the field that is missing, unknown or unsupported.
        """
        r = FieldReader(hf, cls.model_type)
        model_type = r.get("model_type", cls.model_type)
        if model_type != cls.model_type:
            raise UnsupportedConfigError(
                f"{cls.__name__} cannot read a config with model_type {model_type!r}"
            )
        archs = r.get("architectures") or []
        for arch in archs:
            if arch != cls.architecture:
                raise UnsupportedConfigError(
                    f"{cls.model_type} config: architecture {arch!r} is not supported "
                    f"(expected {cls.architecture!r})"
                )
        kwargs = cls._read_common(r)
        kwargs.update(cls._read_family(r, kwargs))
        r.check_leftovers()
        return cls(**kwargs)

    @classmethod
    def _read_common(cls, r: FieldReader) -> dict[str, Any]:
        hidden = int(r.require("hidden_size"))
        heads = int(r.require("num_attention_heads"))
        kv = int(r.get("num_key_value_heads", heads))
        head_dim = r.get("head_dim")
        if head_dim is None:
            if hidden % heads:
                raise UnsupportedConfigError(
                    f"{cls.model_type} config: hidden_size={hidden} is not a multiple of "
                    f"num_attention_heads={heads} and no 'head_dim' is given"
                )
            head_dim = hidden // heads
        theta, scaling = parse_rope(r)
        eos = r.get("eos_token_id")
        eos_ids = tuple(int(e) for e in eos) if isinstance(eos, (list, tuple)) else (
            () if eos is None else (int(eos),))
        bos = r.get("bos_token_id")
        pad = r.get("pad_token_id")
        return dict(
            vocab_size=int(r.require("vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(r.require("intermediate_size")),
            num_hidden_layers=int(r.require("num_hidden_layers")),
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=int(head_dim),
            rms_norm_eps=float(r.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=scaling,
            max_position_embeddings=int(r.get("max_position_embeddings", 8192)),
            tie_word_embeddings=bool(r.get("tie_word_embeddings", cls._default_tie())),
            bos_token_id=None if bos is None else int(bos),
            eos_token_ids=eos_ids,
            pad_token_id=None if pad is None else int(pad),
        )

    @classmethod
    def _default_tie(cls) -> bool:
        return False

    @classmethod
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def _silu(r: FieldReader) -> str:
        act = r.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedConfigError(
                f"{r.family} config: hidden_act {act!r} is not supported (only 'silu' is)"
            )
        return "silu"


def rope_inverse_frequencies(cfg: DecoderConfig, layer: int = 0) -> np.ndarray:
    """The H/2 rotary inverse frequencies of layer ``layer``, after its scaling if any.

    Computed in float32 like transformers does, so positions far into a long prompt rotate by
    the same angles as in the reference implementation.

    Args:
        cfg: the config.
        layer: the layer (matters only when sliding-window layers have their own base).

    Returns:
        float32 array [H/2].
    """
    theta, s = cfg.layer_rope(layer)
    h = cfg.head_dim
    exponent = np.arange(0, h, 2, dtype=np.float32) / np.float32(h)
    inv = (np.float32(1.0) / (np.float32(theta) ** exponent)).astype(np.float32)
    if s is None:
        return inv
    if isinstance(s, LinearRopeScaling):
        return (inv / np.float32(s.factor)).astype(np.float32)
    old_len = np.float32(s.original_max_position_embeddings)
    low_wavelen = old_len / np.float32(s.low_freq_factor)
    high_wavelen = old_len / np.float32(s.high_freq_factor)
    wavelen = np.float32(2 * math.pi) / inv
    # Long wavelengths are stretched by `factor`, short ones kept, the band between blended.
    scaled = np.where(wavelen > low_wavelen, inv / np.float32(s.factor), inv)
    smooth = (old_len / wavelen - np.float32(s.low_freq_factor)) / np.float32(
        s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / np.float32(s.factor) + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, blended, scaled).astype(np.float32)
