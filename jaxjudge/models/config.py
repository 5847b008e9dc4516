"""Configurations of the judge decoders: one frozen dataclass per model family.

Every family (Llama, Qwen2, Qwen3, Mistral, Phi-3, Gemma, Gemma 2, Gemma 3 text) shares
:class:`DecoderConfig`; the subclasses fix
the family's switches (biases, norm form, activation, embedding scaling) and defaults, provide a
``tiny()`` size for tests and a ``from_hf_config()`` reader for a Hugging Face ``config.json``
dict (the GGUF reader produces the same dict, so both sources share this path).

``from_hf_config`` works from an allowlist. A field the decoder reads is parsed and checked; a
field known to be irrelevant to inference (dtype, token ids, dropout, ...) is ignored; any other
field raises :class:`UnsupportedConfigError` naming it unless its value is empty (``None``,
``False``, ``0``, ``[]``, ``{}``). A judge whose logits are slightly wrong gives wrong scores
silently, so an unexplained option is a refusal, never a guess.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Mapping

import numpy as np

__all__ = [
    "UnsupportedConfigError",
    "Llama3RopeScaling",
    "LinearRopeScaling",
    "DecoderConfig",
    "LlamaConfig",
    "Qwen2Config",
    "Qwen3Config",
    "MistralConfig",
    "Phi3Config",
    "GemmaConfig",
    "Gemma2Config",
    "Gemma3TextConfig",
    "CONFIG_CLASSES",
    "config_from_hf",
    "rope_inverse_frequencies",
]


class UnsupportedConfigError(ValueError):
    """A model configuration this decoder cannot reproduce exactly (field or value named)."""


@dataclasses.dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama-3.1 frequency-dependent rotary scaling (``rope_type: "llama3"``).

    Wavelengths shorter than ``original_max_position_embeddings / high_freq_factor`` are kept,
    longer than ``original_max_position_embeddings / low_freq_factor`` are divided by
    ``factor``, and the band in between is interpolated smoothly.
    """

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclasses.dataclass(frozen=True)
class LinearRopeScaling:
    """Position interpolation (``rope_type: "linear"``): every inverse frequency divided by ``factor``.

    Gemma 3 (4B and up) uses it on its global layers only.
    """

    factor: float = 1.0


# Fields that do not change the forward pass: dtype hints, bookkeeping, token ids, training-only
# settings. Present with any value, they are ignored.
_BENIGN_FIELDS = frozenset(
    {
        "architectures",
        "model_type",
        "torch_dtype",
        "dtype",
        "transformers_version",
        "_name_or_path",
        "name_or_path",
        "use_cache",
        "initializer_range",
        "attention_dropout",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "output_hidden_states",
        "output_attentions",
        "return_dict",
        "id2label",
        "label2id",
        "problem_type",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "max_position_embeddings",
        "tokenizer_class",
        "_attn_implementation_autoset",
        "_attn_implementation",
        "embedding_dropout",
        "resid_pdrop",
        "hidden_dropout",
        "mlp_dropout",
        "tie_encoder_decoder",
        # Generation settings (Gemma 2's "hybrid" cache): no effect on one forward pass.
        "cache_implementation",
        # Settings for other runtimes shipped in some repos' config.json (e.g. SmolLM2).
        "transformers.js_config",
    }
)

# Fields that are harmless at one specific value (the value every published checkpoint uses for
# plain inference) and must be refused otherwise.
_BENIGN_AT = {
    # Llama's tensor-parallel pretraining split computes the same product in slices.
    "pretraining_tp": None,
    "use_mrope": False,
    "partial_rotary_factor": 1.0,
    "use_bidirectional_attention": False,
}


class _Reader:
    """Pops fields from a config dict and remembers which were read."""

    def __init__(self, hf: Mapping[str, Any], family: str):
        self.hf = dict(hf)
        self.family = family
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        value = self.hf.get(key, default)
        return default if value is None else value

    def require(self, key: str) -> Any:
        self.read.add(key)
        if self.hf.get(key) is None:
            raise UnsupportedConfigError(f"{self.family} config: required field {key!r} is missing")
        return self.hf[key]

    def check_leftovers(self) -> None:
        for key, value in self.hf.items():
            if key in self.read or key in _BENIGN_FIELDS:
                continue
            if key in _BENIGN_AT:
                ok = _BENIGN_AT[key]
                if value is None or value == ok or (key == "pretraining_tp" and value >= 1):
                    continue
                raise UnsupportedConfigError(
                    f"{self.family} config: field {key!r}={value!r} is not supported "
                    f"(only {ok!r} is)"
                )
            if value in (None, False, 0, [], {}, ""):
                continue
            raise UnsupportedConfigError(
                f"{self.family} config: unknown field {key!r}={value!r}; refusing to guess its "
                "effect on the logits"
            )


RopeScaling = Llama3RopeScaling | LinearRopeScaling


def _parse_rope(r: _Reader) -> tuple[float, RopeScaling | None]:
    """Reads ``rope_theta`` and the rotary scaling from the 4.x or 5.x field layout.

    Transformers 4.x writes ``rope_theta`` and ``rope_scaling``; 5.x folds both into
    ``rope_parameters`` (``{"rope_type": ..., "rope_theta": ...}``).
    """
    theta = r.get("rope_theta")
    params = r.get("rope_parameters") or {}
    scaling = r.get("rope_scaling") or {}
    if not isinstance(params, Mapping) or not isinstance(scaling, Mapping):
        raise UnsupportedConfigError(
            f"{r.family} config: per-layer 'rope_parameters' / 'rope_scaling' is not supported"
        )
    if any(isinstance(v, Mapping) for v in params.values()):
        raise UnsupportedConfigError(
            f"{r.family} config: per-layer-type 'rope_parameters' {sorted(params)} is not "
            "supported for this family"
        )
    merged = {**scaling, **params}
    if theta is None:
        theta = merged.get("rope_theta", 10000.0)
    elif "rope_theta" in merged and float(merged["rope_theta"]) != float(theta):
        raise UnsupportedConfigError(
            f"{r.family} config: 'rope_theta'={theta} disagrees with rope_parameters' "
            f"{merged['rope_theta']}"
        )
    return float(theta), _rope_scaling(r.family, merged)


def _rope_scaling(family: str, merged: Mapping[str, Any],
                  allowed: tuple[str, ...] = ("llama3",)) -> RopeScaling | None:
    """The rotary scaling a merged ``rope_scaling``/``rope_parameters`` dict asks for.

    Args:
        family: for error messages.
        merged: the dict (``rope_type``, ``rope_theta``, ``factor``, ...).
        allowed: the scaled schemes this family accepts, among ``"llama3"`` and ``"linear"``
            (each reproduced exactly).

    Returns:
        The scaling, or None for plain rotary embeddings.

    Raises:
        UnsupportedConfigError: any other scheme (``"longrope"``/``"su"`` of Phi-3.5,
            ``"yarn"``, ``"dynamic"``, ...), named.
    """
    rope_type = merged.get("rope_type", merged.get("type", "default"))
    if merged.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedConfigError(
            f"{family} config: 'partial_rotary_factor'={merged['partial_rotary_factor']} is "
            "not supported"
        )
    if rope_type in ("default", None):
        return None
    if rope_type not in allowed:
        raise UnsupportedConfigError(
            f"{family} config: rope_scaling type {rope_type!r} is not supported "
            f"(only {' and '.join(repr(a) for a in allowed)} and unscaled rotary embeddings are)"
        )
    if rope_type == "linear":
        extra = sorted(set(merged) - {"rope_type", "type", "rope_theta", "factor",
                                      "partial_rotary_factor"})
        if extra:
            raise UnsupportedConfigError(f"{family} config: unknown linear rope_scaling field(s) {extra}")
        if "factor" not in merged:
            raise UnsupportedConfigError(f"{family} config: linear rope_scaling lacks field 'factor'")
        factor = float(merged["factor"])
        if factor <= 0:
            raise UnsupportedConfigError(f"{family} config: linear rope_scaling factor={factor} <= 0")
        return None if factor == 1.0 else LinearRopeScaling(factor=factor)
    known = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings", "partial_rotary_factor"}
    extra = sorted(set(merged) - known)
    if extra:
        raise UnsupportedConfigError(
            f"{family} config: unknown llama3 rope_scaling field(s) {extra}"
        )
    try:
        scale = Llama3RopeScaling(
            factor=float(merged["factor"]),
            low_freq_factor=float(merged["low_freq_factor"]),
            high_freq_factor=float(merged["high_freq_factor"]),
            original_max_position_embeddings=int(merged["original_max_position_embeddings"]),
        )
    except KeyError as e:
        raise UnsupportedConfigError(
            f"{family} config: llama3 rope_scaling lacks field {e.args[0]!r}"
        ) from None
    if scale.high_freq_factor <= scale.low_freq_factor:
        raise UnsupportedConfigError(
            f"{family} config: llama3 rope_scaling needs high_freq_factor > low_freq_factor"
        )
    return scale


def _layer_types(family: str, layer_types: Any, n_layers: int) -> tuple[bool, ...]:
    """``layer_types`` (``"sliding_attention"`` / ``"full_attention"`` per layer) as booleans."""
    if not isinstance(layer_types, (list, tuple)) or len(layer_types) != n_layers:
        raise UnsupportedConfigError(
            f"{family} config: 'layer_types' must list one entry per layer ({n_layers}), got "
            f"{layer_types!r}"
        )
    bad = sorted(set(layer_types) - {"sliding_attention", "full_attention"})
    if bad:
        raise UnsupportedConfigError(f"{family} config: unsupported 'layer_types' entries {bad}")
    return tuple(t == "sliding_attention" for t in layer_types)


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
        r = _Reader(hf, cls.model_type)
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
    def _read_common(cls, r: _Reader) -> dict[str, Any]:
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
        theta, scaling = _parse_rope(r)
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
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def _silu(r: _Reader) -> str:
        act = r.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedConfigError(
                f"{r.family} config: hidden_act {act!r} is not supported (only 'silu' is)"
            )
        return "silu"


@dataclasses.dataclass(frozen=True)
class LlamaConfig(DecoderConfig):
    """Llama 2/3 (and SmolLM, TinyLlama, ...): SwiGLU, RMSNorm, optional biases."""

    model_type: ClassVar[str] = "llama"
    architecture: ClassVar[str] = "LlamaForCausalLM"

    rope_theta: float = 10000.0

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        bias = bool(r.get("attention_bias", False))
        return dict(
            hidden_act=cls._silu(r),
            attention_bias=bias,
            attention_out_bias=bias,
            mlp_bias=bool(r.get("mlp_bias", False)),
        )


@dataclasses.dataclass(frozen=True)
class Qwen2Config(DecoderConfig):
    """Qwen2 / Qwen2.5: Llama with q/k/v biases (none on o_proj), per-layer sliding windows."""

    model_type: ClassVar[str] = "qwen2"
    architecture: ClassVar[str] = "Qwen2ForCausalLM"

    rope_theta: float = 1000000.0
    attention_bias: bool = True

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        return dict(hidden_act=cls._silu(r), attention_bias=True,
                    **_qwen_windows(r, common["num_hidden_layers"]))


@dataclasses.dataclass(frozen=True)
class MistralConfig(DecoderConfig):
    """Mistral: Llama without biases, with an optional sliding window on every layer."""

    model_type: ClassVar[str] = "mistral"
    architecture: ClassVar[str] = "MistralForCausalLM"

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        window = r.get("sliding_window")
        return dict(
            hidden_act=cls._silu(r),
            sliding_window=None if window is None else int(window),
        )


@dataclasses.dataclass(frozen=True)
class GemmaConfig(DecoderConfig):
    """Gemma (1): GeGLU (tanh), RMSNorm with ``1 + w``, embeddings scaled by sqrt(D), tied head."""

    model_type: ClassVar[str] = "gemma"
    architecture: ClassVar[str] = "GemmaForCausalLM"
    norm_plus_one: ClassVar[bool] = True
    scale_embeddings: ClassVar[bool] = True

    tie_word_embeddings: bool = True
    hidden_act: str = "gelu_tanh"

    @classmethod
    def _tiny_family_defaults(cls) -> dict[str, Any]:
        return dict(hidden_act="gelu_tanh", tie_word_embeddings=True)

    @classmethod
    def _default_tie(cls) -> bool:
        return True

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        bias = bool(r.get("attention_bias", False))
        return dict(hidden_act=_gemma_act(r), attention_bias=bias, attention_out_bias=bias)


def _qwen_windows(r: _Reader, n_layers: int) -> dict[str, Any]:
    """Qwen2/Qwen3 sliding windows: off unless ``use_sliding_window``; then on the layers that
    ``layer_types`` marks, or by default on layers from ``max_window_layers`` on."""
    use_sw = bool(r.get("use_sliding_window", False))
    window = r.get("sliding_window")
    max_window_layers = r.get("max_window_layers", 28)
    layer_types = r.get("layer_types")
    if not use_sw:
        window = None
    if window is None:
        if layer_types and any(t != "full_attention" for t in layer_types):
            raise UnsupportedConfigError(
                f"{r.family} config: 'layer_types' asks for {sorted(set(layer_types))} but no "
                "sliding window is enabled"
            )
        return {}
    if layer_types is None:
        # Transformers' rule: layers from max_window_layers on use the window.
        layer_types = ["sliding_attention" if i >= max_window_layers else "full_attention"
                       for i in range(n_layers)]
    return dict(sliding_window=int(window),
                sliding_layers=_layer_types(r.family, layer_types, n_layers))


@dataclasses.dataclass(frozen=True)
class Qwen3Config(DecoderConfig):
    """Qwen3: Llama with an RMSNorm on each query and key head, an explicit ``head_dim``, no
    biases by default, Qwen2's optional per-layer sliding windows."""

    model_type: ClassVar[str] = "qwen3"
    architecture: ClassVar[str] = "Qwen3ForCausalLM"

    rope_theta: float = 1000000.0
    qk_norm: bool = True

    @classmethod
    def _tiny_family_defaults(cls) -> dict[str, Any]:
        return dict(qk_norm=True)

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        bias = bool(r.get("attention_bias", False))
        return dict(hidden_act=cls._silu(r), qk_norm=True, attention_bias=bias,
                    attention_out_bias=bias,
                    **_qwen_windows(r, common["num_hidden_layers"]))


@dataclasses.dataclass(frozen=True)
class Phi3Config(DecoderConfig):
    """Phi-3 / Phi-3.5 (mini, medium): Llama-shaped, with q/k/v and gate/up stored fused
    (``qkv_proj``, ``gate_up_proj``; split by the conversion table) and an optional sliding
    window on every layer.

    The long-context rotary scaling of the 128k releases (``rope_type`` ``"longrope"``, written
    ``"su"`` by older files) switches frequencies with the sequence length and is refused by
    name; the 4k releases use plain rotary embeddings.
    """

    model_type: ClassVar[str] = "phi3"
    architecture: ClassVar[str] = "Phi3ForCausalLM"

    rms_norm_eps: float = 1e-5

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        # Only used by the long-context scaling, which _parse_rope refuses.
        r.get("original_max_position_embeddings")
        r.get("embd_pdrop")
        window = r.get("sliding_window")
        return dict(hidden_act=cls._silu(r),
                    sliding_window=None if window is None else int(window))


def _gemma_act(r: _Reader) -> str:
    # Gemma releases write hidden_act="gelu" while meaning the tanh approximation;
    # transformers maps it to gelu_pytorch_tanh, and so do we.
    act = r.get("hidden_act", "gelu_pytorch_tanh")
    act2 = r.get("hidden_activation")
    for name, value in (("hidden_act", act), ("hidden_activation", act2)):
        if value not in (None, "gelu", "gelu_pytorch_tanh"):
            raise UnsupportedConfigError(
                f"{r.family} config: {name} {value!r} is not supported (only the tanh-approximated "
                "GELU is)"
            )
    return "gelu_tanh"


@dataclasses.dataclass(frozen=True)
class Gemma2Config(GemmaConfig):
    """Gemma 2: Gemma with extra norms on the attention and MLP outputs, scores scaled by
    ``query_pre_attn_scalar``, attention and final logits soft-capped, and sliding-window layers
    alternating with global ones (layer 0 local)."""

    model_type: ClassVar[str] = "gemma2"
    architecture: ClassVar[str] = "Gemma2ForCausalLM"

    sandwich_norms: bool = True

    @classmethod
    def _tiny_family_defaults(cls) -> dict[str, Any]:
        return dict(hidden_act="gelu_tanh", tie_word_embeddings=True, sandwich_norms=True,
                    query_pre_attn_scalar=16.0, attn_logit_softcapping=50.0,
                    final_logit_softcapping=30.0, sliding_window=4,
                    sliding_layers=(True, False))

    @classmethod
    def _default_layer_types(cls, r: _Reader, n_layers: int) -> list[str]:
        # Transformers' Gemma 2 rule when `layer_types` is absent: local and global alternate.
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        n_layers = common["num_hidden_layers"]
        bias = bool(r.get("attention_bias", False))
        window = r.get("sliding_window", 4096)
        older = r.get("sliding_window_size")  # the name early Gemma-2 configs used
        if older is not None and int(older) != int(window):
            raise UnsupportedConfigError(
                f"{r.family} config: 'sliding_window_size'={older} disagrees with "
                f"'sliding_window'={window}")
        layer_types = r.get("layer_types")
        if layer_types is None:
            layer_types = cls._default_layer_types(r, n_layers)
        out = dict(
            hidden_act=_gemma_act(r),
            attention_bias=bias,
            attention_out_bias=bias,
            sandwich_norms=True,
            query_pre_attn_scalar=float(r.get("query_pre_attn_scalar", 256)),
            attn_logit_softcapping=cls._cap(r, "attn_logit_softcapping", 50.0),
            final_logit_softcapping=cls._cap(r, "final_logit_softcapping", 30.0),
            sliding_window=int(window),
            sliding_layers=_layer_types(r.family, layer_types, n_layers),
        )
        return out

    @staticmethod
    def _cap(r: _Reader, key: str, default: float | None) -> float | None:
        # Present with null means "no soft-capping"; absent means the family's default.
        r.read.add(key)
        if key not in r.hf:
            return default
        value = r.hf[key]
        return None if value is None else float(value)


@dataclasses.dataclass(frozen=True)
class Gemma3TextConfig(Gemma2Config):
    """Gemma 3 (text): Gemma 2's block with an RMSNorm on each query and key head, no
    soft-capping, five local layers per global one, and separate rotary bases for local
    (10k, unscaled) and global (1M, linearly scaled on the 4B-27B releases) layers.

    Reads ``model_type: "gemma3_text"`` (Gemma-3-270M, 1B and the text part of larger ones).
    """

    model_type: ClassVar[str] = "gemma3_text"
    architecture: ClassVar[str] = "Gemma3ForCausalLM"

    rope_theta: float = 1000000.0
    qk_norm: bool = True

    @classmethod
    def _tiny_family_defaults(cls) -> dict[str, Any]:
        return dict(hidden_act="gelu_tanh", tie_word_embeddings=True, sandwich_norms=True,
                    qk_norm=True, query_pre_attn_scalar=16.0, sliding_window=4,
                    sliding_layers=(True, False), rope_theta=1000000.0,
                    sliding_rope_theta=10000.0)

    @classmethod
    def _default_layer_types(cls, r: _Reader, n_layers: int) -> list[str]:
        # Transformers' Gemma 3 rule: every pattern-th layer (1-based) is global, pattern 6.
        pattern = int(r.get("sliding_window_pattern", r.get("_sliding_window_pattern", 6)))
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)]

    @classmethod
    def _read_common(cls, r: _Reader) -> dict[str, Any]:
        # The rotary fields are per layer type here; hide them from the shared reader.
        rope = {k: r.hf.pop(k) for k in ("rope_theta", "rope_parameters", "rope_scaling",
                                          "rope_local_base_freq") if k in r.hf}
        common = super()._read_common(r)
        r.hf.update(rope)
        params = r.get("rope_parameters") or {}
        if params and not all(isinstance(v, Mapping) for v in params.values()):
            # A flat rope_parameters dict applies to the global layers, as rope_scaling does.
            params = {"full_attention": params}
        unknown = sorted(set(params) - {"full_attention", "sliding_attention"})
        if unknown:
            raise UnsupportedConfigError(f"{r.family} config: rope_parameters for {unknown}")
        full = {**(r.get("rope_scaling") or {}), **(params.get("full_attention") or {})}
        local = dict(params.get("sliding_attention") or {})
        theta = r.get("rope_theta", full.get("rope_theta", 1000000.0))
        if "rope_theta" in full and float(full["rope_theta"]) != float(theta):
            raise UnsupportedConfigError(
                f"{r.family} config: 'rope_theta'={theta} disagrees with rope_parameters' "
                f"{full['rope_theta']}")
        local_theta = r.get("rope_local_base_freq", local.get("rope_theta", 10000.0))
        if "rope_theta" in local and float(local["rope_theta"]) != float(local_theta):
            raise UnsupportedConfigError(
                f"{r.family} config: 'rope_local_base_freq'={local_theta} disagrees with "
                f"rope_parameters' {local['rope_theta']}")
        if _rope_scaling(r.family, local, allowed=()) is not None:
            raise UnsupportedConfigError(f"{r.family} config: scaled local rotary embeddings")
        common.update(rope_theta=float(theta), sliding_rope_theta=float(local_theta),
                      rope_scaling=_rope_scaling(r.family, full, allowed=("linear",)))
        return common

    @classmethod
    def _read_family(cls, r: _Reader, common: dict[str, Any]) -> dict[str, Any]:
        # Read (hence allowed) either way; an explicit `layer_types` wins, as in transformers.
        r.get("sliding_window_pattern")
        r.get("_sliding_window_pattern")
        out = super()._read_family(r, common)
        out.update(qk_norm=True,
                   attn_logit_softcapping=cls._cap(r, "attn_logit_softcapping", None),
                   final_logit_softcapping=cls._cap(r, "final_logit_softcapping", None))
        return out


CONFIG_CLASSES: dict[str, type[DecoderConfig]] = {
    c.model_type: c for c in (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig, Phi3Config,
                              GemmaConfig, Gemma2Config, Gemma3TextConfig)
}

_REFUSED_MODEL_TYPES = {
    "gemma3": "a Gemma-3 vision-language checkpoint (Gemma3ForConditionalGeneration, its weights "
              "under 'language_model.'); only text-only Gemma-3 checkpoints ('gemma3_text': "
              "270M, 1B) are supported",
}


def config_from_hf(hf: Mapping[str, Any]) -> DecoderConfig:
    """Reads a Hugging Face ``config.json`` dict into the matching family config.

    Dispatches on ``model_type`` (or, when absent, on ``architectures``).

    Args:
        hf: the parsed ``config.json`` (or the dict the GGUF reader builds from metadata).

    Returns:
        The family's config (one of :data:`CONFIG_CLASSES`: Llama, Qwen2, Qwen3, Mistral, Phi-3,
        Gemma, Gemma 2, Gemma 3 text).

    Raises:
        UnsupportedConfigError: unknown or refused model type / architecture, or a field outside
            the allowlist (named in the message).
    """
    if not isinstance(hf, Mapping):
        raise TypeError(f"config_from_hf expects a dict, got {type(hf).__name__}")
    model_type = hf.get("model_type")
    if model_type is None:
        archs = hf.get("architectures") or []
        by_arch = {c.architecture: c for c in CONFIG_CLASSES.values()}
        for arch in archs:
            if arch in by_arch:
                model_type = by_arch[arch].model_type
                break
        else:
            raise UnsupportedConfigError(
                f"config has no 'model_type' and unsupported architectures {archs!r}; supported: "
                f"{sorted(by_arch)}"
            )
    if model_type in _REFUSED_MODEL_TYPES:
        raise UnsupportedConfigError(f"model_type {model_type!r}: {_REFUSED_MODEL_TYPES[model_type]}")
    if model_type not in CONFIG_CLASSES:
        raise UnsupportedConfigError(
            f"unsupported model_type {model_type!r}; supported: {sorted(CONFIG_CLASSES)}"
        )
    return CONFIG_CLASSES[model_type].from_hf_config(hf)


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
