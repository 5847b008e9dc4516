"""Reading a Hugging Face ``config.json`` dict under an allowlist, and its rotary-scaling fields.

A field the decoder reads is parsed and checked; a field known to be irrelevant to inference
(dtype, token ids, dropout, ...) is ignored; any other field raises
:class:`UnsupportedConfigError` naming it unless its value is empty (``None``, ``False``, ``0``,
``[]``, ``{}``). The family configs of :mod:`jaxjudge.models.config` read through
:class:`FieldReader`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

__all__ = [
    "UnsupportedConfigError",
    "Llama3RopeScaling",
    "LinearRopeScaling",
    "RopeScaling",
    "FieldReader",
    "parse_rope",
    "rope_scaling_from",
    "layer_types_flags",
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


class FieldReader:
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


def parse_rope(r: FieldReader) -> tuple[float, RopeScaling | None]:
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
    return float(theta), rope_scaling_from(r.family, merged)


def rope_scaling_from(family: str, merged: Mapping[str, Any],
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


def layer_types_flags(family: str, layer_types: Any, n_layers: int) -> tuple[bool, ...]:
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
