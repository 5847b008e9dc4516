"""The language model inside a vision-language checkpoint (Gemma 3 4B-27B), the vision tower skipped.

Gemma 3's 4B, 12B and 27B releases on the Hub are vision-language checkpoints
(``model_type: "gemma3"``, ``Gemma3ForConditionalGeneration``): a SigLIP vision tower, a
projector into the text embedding space, and a Gemma 3 text decoder. A judge reads text only,
so jaxjudge loads the decoder alone:

- the config is the nested ``text_config``, whose absent fields take transformers'
  ``Gemma3TextConfig`` defaults (the Hub configs give only what differs from them: the 4B's
  names its width, depth, window and rotary scaling and nothing else), with the top level's
  special-token ids;
- the tensors are the decoder's under either naming transformers has written
  (``language_model.model.*`` and ``language_model.lm_head.*`` in the released checkpoints,
  ``model.language_model.*`` and ``lm_head.*`` in later saves); the vision tower's and the
  projector's are skipped by name, and any other tensor is refused by name.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from jaxjudge.models.config_reader import UnsupportedConfigError

__all__ = ["is_vision_language", "text_config", "text_tensors", "GEMMA3_TEXT_DEFAULTS"]

# transformers' Gemma3TextConfig defaults for the fields a Hub ``text_config`` may leave out
# (tests/models/test_vision_language.py compares them with transformers' own).
GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
    "tie_word_embeddings": True,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "attention_bias": False,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "sliding_window_pattern": 6,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
}

# Top-level fields of a Gemma 3 vision-language config that concern the image path, the file or
# the processor: read and dropped. Any other top-level field is refused by name.
_VISION_FIELDS = frozenset({
    "architectures", "model_type", "text_config", "vision_config", "mm_tokens_per_image",
    "boi_token_index", "eoi_token_index", "image_token_index", "boi_token_id", "eoi_token_id",
    "image_token_id", "initializer_range", "torch_dtype", "dtype", "transformers_version",
    "_name_or_path", "name_or_path", "use_cache", "processor_class",
})
# Top-level fields that belong to the text decoder (a save may put them at either level).
_TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id", "tie_word_embeddings")

_ARCHITECTURE = "Gemma3ForConditionalGeneration"
# (prefix, replacement) of the decoder's tensors under each naming transformers has written.
_TEXT_PREFIXES = (
    ("language_model.model.", "model."),
    ("model.language_model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("lm_head.", "lm_head."),
)
_SKIPPED_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                     "model.multi_modal_projector.")


def is_vision_language(hf: Mapping[str, Any]) -> bool:
    """Whether a ``config.json`` dict is a Gemma 3 vision-language checkpoint's."""
    return hf.get("model_type") == "gemma3" or (
        hf.get("model_type") is None and _ARCHITECTURE in (hf.get("architectures") or ()))


def text_config(hf: Mapping[str, Any]) -> dict[str, Any]:
    """The text decoder's ``config.json`` dict (``model_type: "gemma3_text"``) of a Gemma 3
    vision-language config.

    Raises:
        UnsupportedConfigError: no ``text_config``, a text config of another model type, or a top-level
            field that is neither the image path's nor the decoder's (named).
    """
    inner = hf.get("text_config")
    if not isinstance(inner, Mapping):
        raise UnsupportedConfigError("gemma3 (vision-language) config: 'text_config' is missing or not a dict")
    kind = inner.get("model_type", "gemma3_text")
    if kind != "gemma3_text":
        raise UnsupportedConfigError(f"gemma3 (vision-language) config: text_config has model_type {kind!r}, "
                                     "expected 'gemma3_text'")
    unknown = sorted(set(hf) - _VISION_FIELDS - set(_TOKEN_FIELDS))
    if unknown:
        raise UnsupportedConfigError(f"gemma3 (vision-language) config: unsupported top-level field(s) {unknown}")
    out = {**GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in inner.items() if v is not None}}
    for key in _TOKEN_FIELDS:
        if hf.get(key) is not None:
            out[key] = hf[key]
    out["model_type"] = "gemma3_text"
    out["architectures"] = ["Gemma3ForCausalLM"]
    if "layer_types" in out:  # an explicit layer list replaces the default pattern
        out.pop("sliding_window_pattern", None)
    return out


def text_tensors(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The decoder's tensors of a Gemma 3 vision-language checkpoint, named as a text-only
    checkpoint names them (``model.layers.0...``, ``lm_head.weight``).

    Raises:
        ValueError: a tensor outside the decoder, the vision tower and the projector (named), or
            one decoder tensor under two names.
    """
    out: dict[str, np.ndarray] = {}
    for name, value in tensors.items():
        if name.startswith(_SKIPPED_PREFIXES):
            continue
        for prefix, replacement in _TEXT_PREFIXES:
            if name.startswith(prefix):
                new = replacement + name[len(prefix):]
                break
        else:
            raise ValueError(f"gemma3 (vision-language) checkpoint: tensor {name!r} belongs to neither the "
                             "language model, the vision tower nor the projector")
        if new in out:
            raise ValueError(f"gemma3 (vision-language) checkpoint: tensor {new!r} appears under two names")
        out[new] = value
    return out
