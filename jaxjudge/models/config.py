"""Configurations of the judge decoders: one frozen dataclass per model family.

Every family (Llama, Qwen2, Qwen3, Mistral, Phi-3, Gemma, Gemma 2, Gemma 3 text) shares
:class:`~jaxjudge.models.decoder_config.DecoderConfig`; the subclasses here fix the family's
switches (biases, norm form, activation, embedding scaling) and defaults, provide a ``tiny()``
size for tests and a ``from_hf_config()`` reader for a Hugging Face ``config.json`` dict (the
GGUF reader produces the same dict, so both sources share this path). This module is the
public face of the configs: it re-exports the base class, the rotary-scaling records and the
error type.

``from_hf_config`` works from an allowlist (:mod:`jaxjudge.models.config_reader`). A judge whose
logits are slightly wrong gives wrong scores silently, so an unexplained option is a refusal,
never a guess.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from jaxjudge.models.config_reader import (
    FieldReader,
    LinearRopeScaling,
    Llama3RopeScaling,
    UnsupportedConfigError,
    layer_types_flags,
    rope_scaling_from,
)
from jaxjudge.models.decoder_config import DecoderConfig, rope_inverse_frequencies
from jaxjudge.models.vision_language import is_vision_language, text_config

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


@dataclasses.dataclass(frozen=True)
class LlamaConfig(DecoderConfig):
    """Llama 2/3 (and SmolLM, TinyLlama, ...): SwiGLU, RMSNorm, optional biases."""

    model_type: ClassVar[str] = "llama"
    architecture: ClassVar[str] = "LlamaForCausalLM"

    rope_theta: float = 10000.0

    @classmethod
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
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
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
        return dict(hidden_act=cls._silu(r), attention_bias=True,
                    **_qwen_windows(r, common["num_hidden_layers"]))


@dataclasses.dataclass(frozen=True)
class MistralConfig(DecoderConfig):
    """Mistral: Llama without biases, with an optional sliding window on every layer."""

    model_type: ClassVar[str] = "mistral"
    architecture: ClassVar[str] = "MistralForCausalLM"

    @classmethod
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
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
    def _default_tie(cls) -> bool:
        return True

    @classmethod
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
        bias = bool(r.get("attention_bias", False))
        return dict(hidden_act=_gemma_act(r), attention_bias=bias, attention_out_bias=bias)


def _qwen_windows(r: FieldReader, n_layers: int) -> dict[str, Any]:
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
                sliding_layers=layer_types_flags(r.family, layer_types, n_layers))


@dataclasses.dataclass(frozen=True)
class Qwen3Config(DecoderConfig):
    """Qwen3: Llama with an RMSNorm on each query and key head, an explicit ``head_dim``, no
    biases by default, Qwen2's optional per-layer sliding windows."""

    model_type: ClassVar[str] = "qwen3"
    architecture: ClassVar[str] = "Qwen3ForCausalLM"

    rope_theta: float = 1000000.0
    qk_norm: bool = True

    @classmethod
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
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
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
        # Only used by the long-context scaling, which parse_rope refuses.
        r.get("original_max_position_embeddings")
        r.get("embd_pdrop")
        window = r.get("sliding_window")
        return dict(hidden_act=cls._silu(r),
                    sliding_window=None if window is None else int(window))


def _gemma_act(r: FieldReader) -> str:
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
        # The class defaults (GeGLU, tied head, sandwich norms) plus small-model settings.
        return dict(query_pre_attn_scalar=16.0, attn_logit_softcapping=50.0,
                    final_logit_softcapping=30.0, sliding_window=4, sliding_layers=(True, False))

    @classmethod
    def _default_layer_types(cls, r: FieldReader, n_layers: int) -> list[str]:
        # Transformers' Gemma 2 rule when `layer_types` is absent: local and global alternate.
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]

    @classmethod
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
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
            sliding_layers=layer_types_flags(r.family, layer_types, n_layers),
        )
        return out

    @staticmethod
    def _cap(r: FieldReader, key: str, default: float | None) -> float | None:
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
        # Gemma 2's without the soft-capping, with a local rotary base.
        return dict(query_pre_attn_scalar=16.0, sliding_window=4, sliding_layers=(True, False),
                    sliding_rope_theta=10000.0)

    @classmethod
    def _default_layer_types(cls, r: FieldReader, n_layers: int) -> list[str]:
        # Transformers' Gemma 3 rule: every pattern-th layer (1-based) is global, pattern 6.
        pattern = int(r.get("sliding_window_pattern", r.get("_sliding_window_pattern", 6)))
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)]

    @classmethod
    def _read_common(cls, r: FieldReader) -> dict[str, Any]:
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
        if rope_scaling_from(r.family, local, allowed=()) is not None:
            raise UnsupportedConfigError(f"{r.family} config: scaled local rotary embeddings")
        common.update(rope_theta=float(theta), sliding_rope_theta=float(local_theta),
                      rope_scaling=rope_scaling_from(r.family, full, allowed=("linear",)))
        return common

    @classmethod
    def _read_family(cls, r: FieldReader, common: dict[str, Any]) -> dict[str, Any]:
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



def config_from_hf(hf: Mapping[str, Any]) -> DecoderConfig:
    """Reads a Hugging Face ``config.json`` dict into the matching family config.

    Dispatches on ``model_type`` (or, when absent, on ``architectures``). A Gemma 3
    vision-language config (``model_type: "gemma3"``) reads as its text decoder
    (`jaxjudge.models.vision_language`).

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
    if is_vision_language(hf):  # Gemma 3 4B-27B: the text decoder, the vision tower skipped
        return Gemma3TextConfig.from_hf_config(text_config(hf))
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
    if model_type not in CONFIG_CLASSES:
        raise UnsupportedConfigError(
            f"unsupported model_type {model_type!r}; supported: {sorted(CONFIG_CLASSES)}"
        )
    return CONFIG_CLASSES[model_type].from_hf_config(hf)
