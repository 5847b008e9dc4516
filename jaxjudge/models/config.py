"""Configurations of the judge decoders: one frozen dataclass per model family.

Every family (Llama, Qwen2, Mistral, Gemma) shares :class:`DecoderConfig`; the subclasses fix
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
    "DecoderConfig",
    "LlamaConfig",
    "Qwen2Config",
    "MistralConfig",
    "GemmaConfig",
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


def _parse_rope(r: _Reader) -> tuple[float, Llama3RopeScaling | None]:
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
    merged = {**scaling, **params}
    if theta is None:
        theta = merged.get("rope_theta", 10000.0)
    elif "rope_theta" in merged and float(merged["rope_theta"]) != float(theta):
        raise UnsupportedConfigError(
            f"{r.family} config: 'rope_theta'={theta} disagrees with rope_parameters' "
            f"{merged['rope_theta']}"
        )
    rope_type = merged.get("rope_type", merged.get("type", "default"))
    if merged.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedConfigError(
            f"{r.family} config: 'partial_rotary_factor'={merged['partial_rotary_factor']} is "
            "not supported"
        )
    if rope_type in ("default", None):
        return float(theta), None
    if rope_type != "llama3":
        raise UnsupportedConfigError(
            f"{r.family} config: rope_scaling type {rope_type!r} is not supported "
            "(only 'llama3' and unscaled rotary embeddings are)"
        )
    known = {"rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings", "partial_rotary_factor"}
    extra = sorted(set(merged) - known)
    if extra:
        raise UnsupportedConfigError(
            f"{r.family} config: unknown llama3 rope_scaling field(s) {extra}"
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
            f"{r.family} config: llama3 rope_scaling lacks field {e.args[0]!r}"
        ) from None
    if scale.high_freq_factor <= scale.low_freq_factor:
        raise UnsupportedConfigError(
            f"{r.family} config: llama3 rope_scaling needs high_freq_factor > low_freq_factor"
        )
    return float(theta), scale


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
        rope_scaling: Llama-3.1 rotary scaling, or None for plain rotary embeddings.
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
    rope_scaling: Llama3RopeScaling | None = None
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    attention_out_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    sliding_window: int | None = None
    sliding_layers: tuple[bool, ...] | None = None
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
        per_layer = attn + mlp + 2 * d
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
        n_layers = common["num_hidden_layers"]
        use_sw = bool(r.get("use_sliding_window", False))
        window = r.get("sliding_window")
        max_window_layers = r.get("max_window_layers", 28)
        layer_types = r.get("layer_types")
        if not use_sw:
            window = None
        if window is None:
            if layer_types and any(t != "full_attention" for t in layer_types):
                raise UnsupportedConfigError(
                    f"qwen2 config: 'layer_types' asks for {sorted(set(layer_types))} but no "
                    "sliding window is enabled"
                )
            return dict(hidden_act=cls._silu(r), attention_bias=True)
        if layer_types is None:
            # Transformers' rule: layers from max_window_layers on use the window.
            layer_types = ["sliding_attention" if i >= max_window_layers else "full_attention"
                           for i in range(n_layers)]
        bad = sorted(set(layer_types) - {"sliding_attention", "full_attention"})
        if bad or len(layer_types) != n_layers:
            raise UnsupportedConfigError(f"qwen2 config: unsupported 'layer_types' {layer_types!r}")
        return dict(
            hidden_act=cls._silu(r),
            attention_bias=True,
            sliding_window=int(window),
            sliding_layers=tuple(t == "sliding_attention" for t in layer_types),
        )


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
        # Gemma releases write hidden_act="gelu" while meaning the tanh approximation;
        # transformers maps it to gelu_pytorch_tanh, and so do we.
        act = r.get("hidden_act", "gelu_pytorch_tanh")
        act2 = r.get("hidden_activation")
        for name, value in (("hidden_act", act), ("hidden_activation", act2)):
            if value not in (None, "gelu", "gelu_pytorch_tanh"):
                raise UnsupportedConfigError(
                    f"gemma config: {name} {value!r} is not supported (only the tanh-approximated "
                    "GELU is)"
                )
        bias = bool(r.get("attention_bias", False))
        return dict(hidden_act="gelu_tanh", attention_bias=bias, attention_out_bias=bias)


CONFIG_CLASSES: dict[str, type[DecoderConfig]] = {
    c.model_type: c for c in (LlamaConfig, Qwen2Config, MistralConfig, GemmaConfig)
}

_REFUSED_MODEL_TYPES = {
    "gemma2": "Gemma-2 needs attention/final logit soft-capping, extra post-norms and alternating "
              "local attention, which this decoder does not implement",
    "gemma3": "Gemma-3 needs extra norms (q/k norm, post-norms) and local/global attention, which "
              "this decoder does not implement",
    "gemma3_text": "Gemma-3 needs extra norms (q/k norm, post-norms) and local/global attention, "
                   "which this decoder does not implement",
}


def config_from_hf(hf: Mapping[str, Any]) -> DecoderConfig:
    """Reads a Hugging Face ``config.json`` dict into the matching family config.

    Dispatches on ``model_type`` (or, when absent, on ``architectures``).

    Args:
        hf: the parsed ``config.json`` (or the dict the GGUF reader builds from metadata).

    Returns:
        A :class:`LlamaConfig`, :class:`Qwen2Config`, :class:`MistralConfig` or
        :class:`GemmaConfig`.

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


def rope_inverse_frequencies(cfg: DecoderConfig) -> np.ndarray:
    """The H/2 rotary inverse frequencies, after Llama-3 scaling when configured.

    Computed in float32 like transformers does, so positions far into a long prompt rotate by
    the same angles as in the reference implementation.

    Returns:
        float32 array [H/2].
    """
    h = cfg.head_dim
    exponent = np.arange(0, h, 2, dtype=np.float32) / np.float32(h)
    inv = (np.float32(1.0) / (np.float32(cfg.rope_theta) ** exponent)).astype(np.float32)
    s = cfg.rope_scaling
    if s is None:
        return inv
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
