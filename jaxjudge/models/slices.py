"""Reading only the slices of a safetensors checkpoint that this process's devices hold.

On a mesh, every parameter is split over devices (`jaxjudge.models.sharding`), and on a pod each
host addresses only its own devices. :func:`lazy_safetensors` opens a checkpoint without reading
a tensor: each name maps to a `LazyTensor` (file, key, shape, dtype). `jaxjudge.models.convert.
build_model` then asks, device by device, for the block of each parameter that device holds, and
:func:`read_block` reads just the source rows and columns that block is made of
(``safe_open(...).get_slice``), through the same layout change the key table names (a torch
``[out, in]`` weight transposed to ``[in, out]``, a flat axis split into heads and head width).

A block needs a contiguous range of each source axis, so the bytes read equal the bytes held
whenever a split axis is sharded on its leading part (heads, not head width), as the project's
rules shard them; otherwise the covering range is read. `ReadCounter` counts the bytes read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open

__all__ = ["LazyTensor", "ReadCounter", "lazy_safetensors", "read_block", "layout_groups"]

# safetensors dtype names -> numpy dtypes (bfloat16 through ml_dtypes, as safetensors' numpy loader).
_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _np_dtype(name: str) -> np.dtype:
    if name == "BF16":
        import ml_dtypes  # noqa: PLC0415

        return np.dtype(ml_dtypes.bfloat16)
    if name not in _DTYPES:
        raise ValueError(f"unsupported safetensors dtype {name!r}")
    return np.dtype(_DTYPES[name])


@dataclasses.dataclass
class ReadCounter:
    """Bytes and tensors read through `LazyTensor.read` (shared by one checkpoint's tensors)."""

    bytes: int = 0
    reads: int = 0


class _Files:
    """One open handle per safetensors file of a checkpoint, opened on first use."""

    def __init__(self) -> None:
        self._open: dict[str, Any] = {}

    def get(self, path: str):
        if path not in self._open:
            try:
                self._open[path] = safe_open(path, framework="np")
            except Exception as e:  # safetensors raises its own types on a bad header
                raise ValueError(f"cannot read safetensors file {path}: {e}") from e
        return self._open[path]


@dataclasses.dataclass(frozen=True)
class LazyTensor:
    """One tensor of a safetensors file, read block by block (``rows``: a row range of it, for
    the fused tensors split by `jaxjudge.models.convert.unfuse`)."""

    path: str
    key: str
    full_shape: tuple[int, ...]
    dtype: np.dtype
    files: _Files = dataclasses.field(repr=False, compare=False)
    counter: ReadCounter = dataclasses.field(repr=False, compare=False)
    rows: tuple[int, int] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        if self.rows is None:
            return self.full_shape
        return (self.rows[1] - self.rows[0],) + self.full_shape[1:]

    @property
    def ndim(self) -> int:
        return len(self.full_shape)

    def row_range(self, lo: int, hi: int) -> "LazyTensor":
        """Rows ``[lo, hi)`` of this tensor, still unread."""
        base = 0 if self.rows is None else self.rows[0]
        return dataclasses.replace(self, rows=(base + lo, base + hi))

    def read(self, index: tuple[slice, ...] | None = None) -> np.ndarray:
        """The block ``index`` (one ``slice`` per axis, steps of 1; None: all of it)."""
        shape = self.shape
        index = tuple(slice(None) for _ in shape) if index is None else tuple(index)
        spans = [s.indices(n)[:2] for s, n in zip(index, shape)]
        if self.rows is not None:
            spans[0] = (spans[0][0] + self.rows[0], spans[0][1] + self.rows[0])
        handle = self.files.get(self.path)
        try:
            block = handle.get_slice(self.key)[tuple(slice(a, b) for a, b in spans)]
        except Exception as e:
            raise ValueError(f"cannot read tensor {self.key!r} from {self.path}: {e}") from e
        block = np.asarray(block)
        self.counter.bytes += block.nbytes
        self.counter.reads += 1
        return block

    def __array__(self, dtype=None, copy=None):  # a whole read, where a caller needs the values
        out = self.read()
        return out if dtype is None else out.astype(dtype)


def lazy_safetensors(folder: str | Path, counter: ReadCounter | None = None) -> dict[str, LazyTensor]:
    """Name -> `LazyTensor` for ``folder``'s single or sharded safetensors checkpoint; reads only
    the files' headers.

    Raises:
        FileNotFoundError: no checkpoint, or a shard named by the index is missing.
        ValueError: a bad header or index (file named), or a key in two shards.
    """
    folder = Path(folder)
    counter = counter or ReadCounter()
    files = _Files()
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise ValueError(f"{index} is not a valid safetensors index: {e}") from None
        names = sorted(set(weight_map.values()))
    elif (folder / "model.safetensors").is_file():
        weight_map, names = None, ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{folder} has neither model.safetensors nor model.safetensors.index.json")
    out: dict[str, LazyTensor] = {}
    for name in names:
        path = folder / name
        if not path.is_file():
            raise FileNotFoundError(f"safetensors shard {path} (listed in the index) is missing")
        handle = files.get(str(path))
        for key in handle.keys():
            if key in out:
                raise ValueError(f"tensor {key!r} appears in more than one shard ({name})")
            sl = handle.get_slice(key)
            out[key] = LazyTensor(str(path), key, tuple(int(n) for n in sl.get_shape()), _np_dtype(sl.get_dtype()),
                                  files, counter)
    if weight_map is not None:
        absent = sorted(set(weight_map) - set(out))
        if absent:
            raise ValueError(f"tensor(s) {absent[:5]} listed in {index.name} are not in the shards")
    return out


def layout_groups(source: tuple[int, ...], target: tuple[int, ...]) -> list[tuple[int, int]]:
    """How ``target``'s axes split ``source``'s: one ``(first, end)`` range of target axes per
    source axis, whose sizes multiply to that axis's size.

    Raises:
        ValueError: the shapes are not one a split of the other (sizes named).
    """
    groups, t = [], 0
    for size in source:
        first, prod = t, 1
        while t < len(target) and (prod < size or (t == first and size == 1 and target[t] == 1)):
            prod *= target[t]
            t += 1
            if prod == size:
                break
        if prod != size:
            raise ValueError(f"shape {source} does not split into {target}")
        groups.append((first, t))
    if any(n != 1 for n in target[t:]):
        raise ValueError(f"shape {source} does not split into {target}")
    if groups and t < len(target):  # trailing size-1 axes belong to the last group
        groups[-1] = (groups[-1][0], len(target))
    return groups


def read_block(tensor: LazyTensor, transposed: bool, target: tuple[int, ...],
               index: tuple[slice, ...]) -> np.ndarray:
    """The block ``index`` of ``tensor`` laid out as ``target`` (after a transpose of its two axes
    when ``transposed``), reading only the source ranges the block covers.

    Args:
        tensor: the source (a torch-layout weight, bias, norm or embedding).
        transposed: whether the layout is ``tensor.T.reshape(target)`` (else ``reshape``).
        target: the parameter's shape (one layer's, for a stacked parameter).
        index: one ``slice`` per target axis.
    """
    src_shape = tensor.shape[::-1] if transposed else tensor.shape
    groups = layout_groups(tuple(src_shape), tuple(target))
    spans = [s.indices(n)[:2] for s, n in zip(index, target)]
    src_index, block_shape, inner_index = [], [], []
    for first, end in groups:
        if end == first:  # a source axis of size 1 that the target drops
            src_index.append(slice(0, 1))
            block_shape.append(1)
            inner_index.append(0)
            continue
        inner = math.prod(target[first + 1:end])
        a, b = spans[first]
        src_index.append(slice(a * inner, b * inner))
        block_shape += [b - a] + list(target[first + 1:end])
        inner_index += [slice(0, b - a)] + [slice(*spans[i]) for i in range(first + 1, end)]
    if transposed:
        block = tensor.read(tuple(src_index[::-1])).T
    else:
        block = tensor.read(tuple(src_index))
    return block.reshape(block_shape)[tuple(inner_index)]
