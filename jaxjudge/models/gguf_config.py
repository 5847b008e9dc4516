"""GGUF metadata -> a Hugging Face ``config.json``-shaped dict (:func:`hf_config_from_gguf`).

Some Gemma settings are not written to the file because llama.cpp fixes them in code; they are
filled in here with llama.cpp's values, which are also those of every released config.json:
Gemma 3's local layers use rotary base 10000 and one layer in six is global; Gemma 2 alternates
local and global layers; both scale scores by ``head_dim ** -0.5`` except the 27B releases,
which scale by ``(hidden_size / num_heads) ** -0.5``. An ``{arch}.*`` metadata key this reader
does not know raises, naming it, since it might change the computation.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "GGUFFormatError",
    "UnsupportedGGUFError",
    "SUPPORTED_ARCHITECTURES",
    "ROPE_FREQS_TENSOR",
    "hf_config_from_gguf",
]


class GGUFFormatError(ValueError):
    """The file is not a readable GGUF file (truncated, corrupted, inconsistent)."""


class UnsupportedGGUFError(ValueError):
    """The file is valid but uses an architecture, encoding or option this reader refuses."""


# GGUF `general.architecture` -> (Hugging Face model_type, architectures entry, hidden_act).
# llama.cpp writes Mistral (v0.1-v0.3) and SmolLM as `llama`: the computation is the same.
SUPPORTED_ARCHITECTURES: dict[str, tuple[str, str, str]] = {
    "llama": ("llama", "LlamaForCausalLM", "silu"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM", "silu"),
    "gemma": ("gemma", "GemmaForCausalLM", "gelu_pytorch_tanh"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM", "gelu_pytorch_tanh"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM", "gelu_pytorch_tanh"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM", "silu"),
    "phi3": ("phi3", "Phi3ForCausalLM", "silu"),
}
# Block counts of the 27B Gemma releases, whose scores llama.cpp scales by (D / N) ** -0.5.
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}

# `{arch}.*` metadata keys read into the config; any other `{arch}.*` key with a non-empty value
# raises, since it might change the computation.
_KNOWN_ARCH_KEYS = frozenset(
    {
        "context_length",
        "embedding_length",
        "block_count",
        "feed_forward_length",
        "attention.head_count",
        "attention.head_count_kv",
        "attention.layer_norm_rms_epsilon",
        "attention.key_length",
        "attention.value_length",
        "rope.freq_base",
        "rope.dimension_count",
        "rope.scaling.type",
        "rope.scaling.factor",
        "rope.scaling.original_context_length",
        "rope.scaling.finetuned",
        "vocab_size",
        "attention.sliding_window",
        "attn_logit_softcapping",
        "final_logit_softcapping",
    }
)
# Per-frequency factors of Phi-3's long-context rotary scaling ("longrope"), which is refused.
_LONGROPE_TENSORS = frozenset({"rope_factors_long.weight", "rope_factors_short.weight"})
# Precomputed Llama-3.1 rotary factors: folded into the config, not a parameter.
ROPE_FREQS_TENSOR = "rope_freqs.weight"


def _llama3_rope_factors(inv_freq: np.ndarray, factor: float, low: float, high: float,
                         original: int) -> np.ndarray:
    """Per-frequency divisors of Llama-3.1 rotary scaling (what llama.cpp stores in rope_freqs)."""
    wavelen = 2 * np.pi / inv_freq
    smooth = (original / wavelen - low) / (high - low)
    blended = 1.0 / ((1.0 - smooth) / factor + smooth)
    return np.where(wavelen < original / high, 1.0,
                    np.where(wavelen > original / low, factor, blended))


def _rope_scaling_from_freqs(freqs: np.ndarray, theta: float, head_dim: int,
                             path: Path) -> dict[str, Any]:
    """Recovers Llama-3.1 ``rope_scaling`` from the ``rope_freqs`` tensor llama.cpp writes.

    The tensor holds the per-frequency divisors only, not the four parameters. Every Llama-3.x
    release uses low_freq_factor 1, high_freq_factor 4 and an original context of 8192, with
    ``factor`` the largest divisor; the parameters are accepted only if they reproduce the
    tensor.
    """
    freqs = np.asarray(freqs, dtype=np.float64).reshape(-1)
    if freqs.shape != (head_dim // 2,):
        raise UnsupportedGGUFError(
            f"{path}: tensor {ROPE_FREQS_TENSOR!r} has shape {freqs.shape}, expected ({head_dim // 2},)"
        )
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factor = float(freqs.max())
    guess = dict(factor=factor, low_freq_factor=1.0, high_freq_factor=4.0,
                 original_max_position_embeddings=8192)
    expected = _llama3_rope_factors(inv_freq, factor, 1.0, 4.0, 8192)
    if not np.allclose(freqs, expected, rtol=1e-4, atol=1e-5):
        raise UnsupportedGGUFError(
            f"{path}: tensor {ROPE_FREQS_TENSOR!r} holds rotary scaling factors that do not match "
            "Llama-3.1's scheme (low 1, high 4, original context 8192); refusing to guess"
        )
    return {"rope_type": "llama3", **guess}


class _ArchMeta:
    """The ``{arch}.*`` metadata of one file, read with the file's path in every error."""

    def __init__(self, meta: Mapping[str, Any], arch: str, path: Path):
        self.meta, self.prefix, self.path = meta, f"{arch}.", path

    def get(self, key: str, default: Any = None) -> Any:
        return self.meta.get(self.prefix + key, default)

    def need(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise GGUFFormatError(f"{self.path}: required metadata {self.prefix + key!r} is missing")
        return value

    def single(self, key: str, value: Any) -> int:
        # Some writers store per-layer counts; this decoder has one value for all layers.
        if isinstance(value, list):
            if not value or any(v != value[0] for v in value):
                raise UnsupportedGGUFError(f"{self.path}: per-layer {self.prefix + key!r}={value} is not supported")
            value = value[0]
        return int(value)


def _architecture(meta: Mapping[str, Any], path: Path) -> str:
    """The file's architecture, refused when unsupported or when it carries an ``{arch}.*`` key
    this reader does not know (with a value that is not empty)."""
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedGGUFError(
            f"{path}: general.architecture={arch!r} is not supported; supported: "
            f"{sorted(SUPPORTED_ARCHITECTURES)}"
        )
    prefix = f"{arch}."
    for key, value in meta.items():
        if key.startswith(prefix) and key[len(prefix):] not in _KNOWN_ARCH_KEYS:
            if value in (None, False, 0, 0.0, "", []):
                continue
            raise UnsupportedGGUFError(
                f"{path}: metadata {key!r}={value!r} is not understood by this reader; refusing "
                "to guess its effect on the logits"
            )
    return arch


def _heads(m: _ArchMeta, hidden: int) -> tuple[int, int, int]:
    """Query heads, key/value heads and the head width, checked (no partial rotary dimensions)."""
    path, prefix = m.path, m.prefix
    heads = m.single("attention.head_count", m.need("attention.head_count"))
    kv_heads = m.single("attention.head_count_kv", m.get("attention.head_count_kv", heads))
    head_dim = m.get("attention.key_length")
    if head_dim is None:
        if hidden % heads:
            raise GGUFFormatError(
                f"{path}: embedding_length={hidden} is not a multiple of head_count={heads} and "
                "attention.key_length is missing"
            )
        head_dim = hidden // heads
    head_dim = int(head_dim)
    value_dim = int(m.get("attention.value_length", head_dim))
    if value_dim != head_dim:
        raise UnsupportedGGUFError(
            f"{path}: attention.value_length={value_dim} differs from key_length={head_dim}"
        )
    rot = m.get("rope.dimension_count")
    if rot is not None and int(rot) != head_dim:
        raise UnsupportedGGUFError(
            f"{path}: {prefix}rope.dimension_count={rot} rotates part of each {head_dim}-wide head; "
            "partial rotary embeddings are not supported"
        )
    return heads, kv_heads, head_dim


def _vocab(m: _ArchMeta, tensor_shapes: Mapping[str, tuple[int, ...]], hidden: int) -> int:
    """The vocabulary size: the token list's, checked against the embedding and the declared size."""
    path = m.path
    tokens = m.meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise GGUFFormatError(f"{path}: tokenizer.ggml.tokens is missing")
    vocab = len(tokens)
    embed_shape = tensor_shapes.get("token_embd.weight")
    if embed_shape is None:
        raise GGUFFormatError(f"{path}: tensor 'token_embd.weight' is missing")
    if tuple(embed_shape) != (vocab, hidden):
        raise GGUFFormatError(
            f"{path}: token_embd.weight has shape {tuple(embed_shape)} but the vocabulary has "
            f"{vocab} tokens and embedding_length is {hidden}"
        )
    declared_vocab = m.get("vocab_size")
    if declared_vocab is not None and int(declared_vocab) != vocab:
        raise GGUFFormatError(
            f"{path}: {m.prefix}vocab_size={declared_vocab} but the token list has {vocab} entries"
        )
    return vocab


def _family_fields(hf: dict[str, Any], arch: str, m: _ArchMeta, tensor_shapes: Mapping[str, tuple[int, ...]],
                   act: str) -> None:
    """Adds to ``hf`` what one family's config has beyond the common fields (biases, windows,
    Gemma's scalings and soft-caps)."""
    if arch == "llama":
        hf["attention_bias"] = "blk.0.attn_q.bias" in tensor_shapes
        hf["mlp_bias"] = "blk.0.ffn_gate.bias" in tensor_shapes
    if arch == "qwen3":
        hf["attention_bias"] = "blk.0.attn_q.bias" in tensor_shapes
    if arch == "phi3":
        longrope = sorted(_LONGROPE_TENSORS & set(tensor_shapes))
        if longrope:
            raise UnsupportedGGUFError(
                f"{m.path}: tensors {longrope} hold Phi-3's long-context rotary scaling ('longrope'), "
                "which is not supported")
        window = m.get("attention.sliding_window")
        if window:
            hf["sliding_window"] = int(window)
    if arch in ("gemma2", "gemma3"):
        del hf["hidden_act"]
        hf["hidden_activation"] = act
        window = m.get("attention.sliding_window")
        if window is None:
            raise GGUFFormatError(f"{m.path}: required metadata {m.prefix + 'attention.sliding_window'!r} "
                                  "is missing")
        hf["sliding_window"] = int(window)
        hf["attention_bias"] = False
        # Not in the file: llama.cpp's rule (see the module docstring).
        big = hf["num_hidden_layers"] == _GEMMA_27B_LAYERS[arch]
        hf["query_pre_attn_scalar"] = hf["hidden_size"] // hf["num_attention_heads"] if big else hf["head_dim"]
        if arch == "gemma2":
            # llama.cpp's defaults when the file does not say: 50 and 30, as in every release.
            for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)):
                hf[key] = float(m.get(key, default))
        else:
            # Every layer type's rotary base, as transformers 5 writes them.
            hf["rope_local_base_freq"] = 10000.0
            hf["sliding_window_pattern"] = 6
            hf["attn_logit_softcapping"] = hf["final_logit_softcapping"] = None


def _rope_scaling(m: _ArchMeta, rope_freqs: np.ndarray | None, theta: float, head_dim: int
                  ) -> dict[str, Any] | None:
    """The rotary scaling: from the ``rope_freqs`` tensor, or as the metadata names it (None: none)."""
    scaling_type = m.get("rope.scaling.type")
    if rope_freqs is not None:
        if scaling_type not in (None, "none"):
            raise UnsupportedGGUFError(
                f"{m.path}: both {ROPE_FREQS_TENSOR!r} and rope.scaling.type={scaling_type!r} are present"
            )
        return _rope_scaling_from_freqs(rope_freqs, theta, head_dim, m.path)
    if scaling_type in (None, "none"):
        return None
    scaling: dict[str, Any] = {"rope_type": str(scaling_type), "factor": m.get("rope.scaling.factor")}
    original = m.get("rope.scaling.original_context_length")
    if original is not None:
        scaling["original_max_position_embeddings"] = int(original)
    # Passed on as written; the config reader accepts or refuses the scheme by name.
    return scaling


def hf_config_from_gguf(meta: Mapping[str, Any], tensor_shapes: Mapping[str, tuple[int, ...]],
                        path: Path | str = "GGUF file",
                        rope_freqs: np.ndarray | None = None) -> dict[str, Any]:
    """Builds a ``config.json``-shaped dict from GGUF metadata.

    Args:
        meta: the metadata (:func:`read_metadata`).
        tensor_shapes: GGUF tensor name -> shape in Hugging Face order (rows first); decides
            tied embeddings (no ``output.weight``) and biases, and is checked against the sizes.
        path: the file, for error messages.
        rope_freqs: the dequantised ``rope_freqs.weight`` tensor, if the file has one.

    Returns:
        The config dict (``model_type``, ``hidden_size``, ..., token ids).

    Raises:
        UnsupportedGGUFError: unknown architecture or ``{arch}.*`` key, partial rotary
            dimensions, inconsistent sizes (each named).
    """
    path = Path(path)
    arch = _architecture(meta, path)
    model_type, hf_arch, act = SUPPORTED_ARCHITECTURES[arch]
    m = _ArchMeta(meta, arch, path)
    hidden = int(m.need("embedding_length"))
    heads, kv_heads, head_dim = _heads(m, hidden)
    vocab = _vocab(m, tensor_shapes, hidden)
    theta = float(m.get("rope.freq_base", 10000.0))
    hf: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": int(m.need("feed_forward_length")),
        "num_hidden_layers": int(m.need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": float(m.need("attention.layer_norm_rms_epsilon")),
        "rope_theta": theta,
        "max_position_embeddings": int(m.get("context_length", 8192)),
        "tie_word_embeddings": "output.weight" not in tensor_shapes,
        "hidden_act": act,
    }
    _family_fields(hf, arch, m, tensor_shapes, act)
    scaling = _rope_scaling(m, rope_freqs, theta, head_dim)
    if scaling is not None:
        hf["rope_scaling"] = scaling
    for gguf_key, hf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                             ("padding_token_id", "pad_token_id")):
        value = meta.get(f"tokenizer.ggml.{gguf_key}")
        if value is not None:
            hf[hf_key] = int(value)
    return hf
