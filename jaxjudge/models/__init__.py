"""Judge models: NNX decoders (Llama, Qwen2/3, Mistral, Phi-3, Gemma 1/2/3) from GGUF files or HF
folders.

The entry point is :func:`~jaxjudge.models.loading.load`::

    from jaxjudge import engine, models
    judge = models.load(models.default_model_path())      # SmolLM2-135M-Instruct (GGUF)
    logits_bv = engine.calls.next_token_logits(judge, ["The capital of France is"])

A source is a ``.gguf`` file, a Hugging Face folder (``config.json`` + safetensors +
``tokenizer.json``) or a Hub repo id (fetched only when online). The first load converts the
weights and stores them in the Orbax cache (:mod:`jaxjudge.models.weights_cache`); later loads of the
same content and dtype restore from there.

The other public names are re-exported lazily from their modules, so importing one submodule
does not import them all.
"""

from __future__ import annotations

import importlib
from typing import Any

# module -> the public names it defines, re-exported here.
_EXPORTS = {
    "loading": ("load", "ModelHashMismatch"),
    "gguf": ("default_model_path", "gguf_dir", "load_gguf", "GGUFFormatError", "UnsupportedGGUFError"),
    "tokenizer": ("UnsupportedTokenizerError",),
    "judge": ("Judge",),
    "config": ("DecoderConfig", "LlamaConfig", "Qwen2Config", "Qwen3Config", "MistralConfig",
               "Phi3Config", "GemmaConfig", "Gemma2Config", "Gemma3TextConfig",
               "UnsupportedConfigError", "config_from_hf"),
    "sharding": ("make_mesh",),
    "weights_cache": ("clear_cache", "cache_root"),
}
# name -> module it lives in.
_LAZY = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jaxjudge.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"jaxjudge.models.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
