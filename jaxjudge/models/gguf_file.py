"""A GGUF file's header, read in one pass: its metadata as Python values and its tensor table.

`gguf.GGUFReader` builds a numpy view for every part of every metadata value, which for a
vocabulary of 150,000 strings and as many merges is millions of small arrays: about 7 s of CPU
for Qwen2.5's file and 2.3 s for SmolLM2's on this project's 2-core test machine, paid on every
open (a load opens a file twice, and every process that loads a judge opens it again). This
reader walks the same bytes with `struct` and decodes each value once. Tensor data is not read
here: each `TensorInfo` maps its bytes from the file when asked, with the dtype and shape
`gguf.GGUFReader` gives them (typed elements for F16/F32/F64/I8-I64, rows of quantised blocks
as bytes otherwise), which is what `gguf.quants.dequantize` takes.

The format (versions 2 and 3; either byte order): magic ``GGUF``, version (u32), tensor count
and key/value count (u64 each); key/value pairs (key: u64 length + UTF-8; value type: u32;
value; an array is its element type u32, count u64, elements); tensor infos (name, number of
dimensions u32, dimensions u64 fastest-varying first, type u32, data offset u64); padding to
``general.alignment`` (default 32); tensor data.

`tests/models/test_gguf_file.py` compares everything read here with `gguf.GGUFReader` on the
embedded judge's file and on files written by `gguf.GGUFWriter` with every value type.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf.quants import quant_shape_to_byte_shape

from jaxjudge.models.gguf_config import GGUFFormatError, UnsupportedGGUFError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# Scalar value types: struct code (without byte order) and numpy dtype.
_SCALARS = {
    GGUFValueType.UINT8: ("B", np.uint8), GGUFValueType.INT8: ("b", np.int8),
    GGUFValueType.UINT16: ("H", np.uint16), GGUFValueType.INT16: ("h", np.int16),
    GGUFValueType.UINT32: ("I", np.uint32), GGUFValueType.INT32: ("i", np.int32),
    GGUFValueType.UINT64: ("Q", np.uint64), GGUFValueType.INT64: ("q", np.int64),
    GGUFValueType.FLOAT32: ("f", np.float32), GGUFValueType.FLOAT64: ("d", np.float64),
    GGUFValueType.BOOL: ("?", np.bool_),
}

# Tensor types whose data is typed elements; every other type is rows of blocks, as bytes.
_ELEMENT_TYPES = {
    GGMLQuantizationType.F16: np.float16, GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F64: np.float64, GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16, GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


class TruncatedHeader(GGUFFormatError):
    """The bytes given end inside the header (a whole file: it is truncated; a file's first
    bytes, `GGUFFile.from_head`: more of them are needed)."""


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table.

    Attributes:
      name: the tensor's GGUF name.
      tensor_type: its encoding.
      shape: dimensions as stored, fastest-varying first (`gguf.ReaderTensor.shape`).
      n_elements, n_bytes: its element count and data size.
      data_offset: where its data starts in the file.
    """

    name: str
    tensor_type: GGMLQuantizationType
    shape: np.ndarray
    n_elements: int
    n_bytes: int
    data_offset: int
    _file: GGUFFile = field(repr=False, compare=False)

    @property
    def data(self) -> np.ndarray:
        """The stored bytes, mapped from the file: typed elements in numpy order, or rows of
        quantised blocks as ``uint8`` (the layout `gguf.GGUFReader` gives)."""
        dims = tuple(int(d) for d in reversed(self.shape.tolist()))
        kind = _ELEMENT_TYPES.get(self.tensor_type)
        if kind is None:
            kind, count, dims = np.uint8, self.n_bytes, quant_shape_to_byte_shape(dims, self.tensor_type)
        else:
            count = self.n_elements
        dtype = np.dtype(kind).newbyteorder(self._file.byte_order)
        return np.ndarray((count,), dtype, self._file.memmap(), self.data_offset).reshape(dims)


class GGUFFile:
    """The header of a GGUF file.

    Attributes:
      path: the file.
      version: the format version.
      byte_order: ``"<"`` or ``">"``.
      metadata: key -> value (str, int, float, bool, or a list of those), in file order. A
        float32 value is the shortest decimal that rounds to it (``1e-05``, as the config.json
        the file was made from wrote it); float32 array elements are kept unrounded.
      kinds: key -> ``(value type, element type or None)``, for writing the value again.
      tensors: the tensor table, in file order.
      data_start: where tensor data begins (every ``data_offset`` counts from the file's start).

    Raises (from the constructor):
      FileNotFoundError: no such file.
      GGUFFormatError: not GGUF, an unknown version, a truncated header, a string that is not
        UTF-8, a bad alignment, a duplicated tensor name, a tensor whose data ends past the end
        of the file (each names the file and the key or tensor).
      UnsupportedGGUFError: a nested array, an unknown tensor type (named).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {self.path}")
        self._map: np.memmap | None = None
        self._head_only = False
        with open(self.path, "rb") as f:
            size = f.seek(0, 2)
            if size < 24:
                raise GGUFFormatError(f"{self.path}: not a readable GGUF file ({size} bytes: truncated?)")
            # Left to the garbage collector rather than closed: a closed map may not be released
            # while an array made from it lives, and only the header's pages are ever touched.
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._parse(memoryview(buf), size)

    @classmethod
    def from_head(cls, head: bytes, size: int, name: str) -> GGUFFile:
        """The header read from a file's first bytes ``head``, the whole file being ``size``
        bytes (a bucket object read in part); ``name`` names it in errors. No tensor's `data`
        can be read from it.

        Raises:
          TruncatedHeader: ``head`` ends inside the header (read more of the file).
          GGUFFormatError, UnsupportedGGUFError: as the constructor.
        """
        self = cls.__new__(cls)
        self.path, self._map, self._head_only = name, None, True  # a URL: not a local Path
        if len(head) < min(24, size):
            raise TruncatedHeader(f"{name}: the first {len(head)} bytes end inside the header")
        if size < 24:
            raise GGUFFormatError(f"{name}: not a readable GGUF file ({size} bytes: truncated?)")
        self._parse(memoryview(head), size)
        return self

    def memmap(self) -> np.memmap:
        """The whole file as bytes, mapped read-only (opened on first use)."""
        if self._head_only:
            raise GGUFFormatError(f"{self.path}: only the header was read (GGUFFile.from_head); no tensor data")
        if self._map is None:
            self._map = np.memmap(self.path, mode="r")
        return self._map

    # ------------------------------------------------------------------------------ parsing

    def _parse(self, buf: memoryview, size: int) -> None:
        if bytes(buf[:4]) != MAGIC:
            raise GGUFFormatError(f"{self.path}: not a readable GGUF file (no GGUF magic)")
        version = struct.unpack_from("<I", buf, 4)[0]
        self.byte_order = "<"
        if version & 0xFFFF == 0:  # written on a machine of the other byte order
            self.byte_order, version = ">", struct.unpack_from(">I", buf, 4)[0]
        if version not in VERSIONS:
            raise GGUFFormatError(f"{self.path}: GGUF version {version} is not readable (versions {VERSIONS})")
        self.version = version
        bo = self.byte_order
        try:
            n_tensors, n_kv = struct.unpack_from(bo + "QQ", buf, 8)
            offs = 24
            self.metadata: dict[str, Any] = {}
            self.kinds: dict[str, tuple[GGUFValueType, GGUFValueType | None]] = {}
            for _ in range(n_kv):
                key, offs = self._string(buf, offs, "a metadata key")
                offs = self._value(buf, offs, key)
            alignment = DEFAULT_ALIGNMENT
            if "general.alignment" in self.metadata:
                alignment = self.metadata["general.alignment"]
                if self.kinds["general.alignment"][0] != GGUFValueType.UINT32 or alignment <= 0 \
                        or alignment & (alignment - 1):
                    raise GGUFFormatError(f"{self.path}: general.alignment must be a power of two stored as "
                                          f"uint32, got {alignment!r}")
            table = []
            for _ in range(n_tensors):
                name, offs = self._string(buf, offs, "a tensor name")
                (n_dims,) = struct.unpack_from(bo + "I", buf, offs)
                dims = np.frombuffer(buf, np.dtype(np.uint64).newbyteorder(bo), n_dims, offs + 4).astype(np.uint64)
                kind, start = struct.unpack_from(bo + "IQ", buf, offs + 4 + 8 * n_dims)
                offs += 4 + 8 * n_dims + 12
                table.append((name, dims, kind, start))
        except (GGUFFormatError, UnsupportedGGUFError):
            raise
        except (struct.error, ValueError) as e:  # a read past the end of the buffer
            raise TruncatedHeader(f"{self.path}: not a readable GGUF file (header truncated?): {e}") from e
        self.data_start = offs + (-offs) % alignment
        self.tensors: list[TensorInfo] = []
        seen: set[str] = set()
        for name, dims, kind, start in table:
            if name in seen:
                raise GGUFFormatError(f"{self.path}: tensor {name!r} appears twice")
            seen.add(name)
            try:
                qtype = GGMLQuantizationType(kind)
            except ValueError:
                raise UnsupportedGGUFError(f"{self.path}: tensor {name!r} has unknown type {kind}") from None
            n = int(np.prod(dims))
            block, type_size = GGML_QUANT_SIZES[qtype]
            info = TensorInfo(name, qtype, dims, n, n * type_size // block, self.data_start + int(start), self)
            if info.data_offset + info.n_bytes > size:
                raise GGUFFormatError(f"{self.path}: tensor {name!r} ends at byte {info.data_offset + info.n_bytes} "
                                      f"but the file has {size} bytes (truncated?)")
            self.tensors.append(info)

    def _string(self, buf: memoryview, offs: int, what: str) -> tuple[str, int]:
        (n,) = struct.unpack_from(self.byte_order + "Q", buf, offs)
        raw = bytes(buf[offs + 8:offs + 8 + n])
        if len(raw) != n:
            raise struct.error(f"{what} of {n} bytes runs past the end")
        try:
            return raw.decode("utf-8"), offs + 8 + n
        except UnicodeDecodeError as e:
            raise GGUFFormatError(f"{self.path}: {what} at byte {offs} is not UTF-8: {e}") from e

    def _value(self, buf: memoryview, offs: int, key: str) -> int:
        """Reads the value of ``key`` at ``offs`` into `metadata` and `kinds`; returns the offset
        after it."""
        bo = self.byte_order
        try:
            kind = GGUFValueType(struct.unpack_from(bo + "I", buf, offs)[0])
        except ValueError:
            raise GGUFFormatError(f"{self.path}: metadata {key!r} has an unknown value type") from None
        offs += 4
        if kind == GGUFValueType.STRING:
            self.metadata[key], offs = self._string(buf, offs, f"metadata {key!r}")
            self.kinds[key] = (kind, None)
            return offs
        if kind in _SCALARS:
            code, _ = _SCALARS[kind]
            (value,) = struct.unpack_from(bo + code, buf, offs)
            if kind == GGUFValueType.FLOAT32:
                value = float(str(np.float32(value)))
            self.metadata[key], self.kinds[key] = value, (kind, None)
            return offs + struct.calcsize(code)
        # An array: element type, count, elements.
        sub_raw, count = struct.unpack_from(bo + "IQ", buf, offs)
        offs += 12
        try:
            sub = GGUFValueType(sub_raw)
        except ValueError:
            raise GGUFFormatError(f"{self.path}: metadata {key!r} has an unknown element type") from None
        if sub == GGUFValueType.ARRAY:
            raise UnsupportedGGUFError(f"{self.path}: nested array in metadata {key!r}")
        if sub == GGUFValueType.STRING:
            values = []
            for _ in range(count):
                s, offs = self._string(buf, offs, f"an element of metadata {key!r}")
                values.append(s)
        else:
            dtype = np.dtype(_SCALARS[sub][1]).newbyteorder(bo)
            arr = np.frombuffer(buf, dtype, count, offs)
            values = [bool(v) for v in arr] if sub == GGUFValueType.BOOL else arr.tolist()
            offs += count * dtype.itemsize
        self.metadata[key], self.kinds[key] = values, (kind, sub)
        return offs
