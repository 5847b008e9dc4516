"""Group ids (source documents, sentences, clusters) as contiguous integer codes.

Every grouped computation of the library (per-document metrics, the grouped bootstrap,
cluster-robust errors, grouped folds) encodes its group ids here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from jaxjudge.metrics._checks import format_rows

__all__ = ["GroupCodes", "encode_groups"]


class GroupCodes(NamedTuple):
    """Result of `encode_groups`."""

    codes: np.ndarray  # int32 [N] in 0..G-1
    num_groups: int  # G, a Python int (usable as a static argument)
    names: np.ndarray  # [G] distinct ids in code order; names[codes] == ids


def encode_groups(ids: Any, *, order: str = "sorted", name: str = "group ids", n: int | None = None) -> GroupCodes:
    """Turn arbitrary group ids (strings, ints, ...) into contiguous int32 codes.

    Args:
      ids: `[N]` ids, e.g. SummEval source-document ids.
      order: ``"sorted"`` (code g is the g-th smallest id) or ``"first"`` (code g is the g-th
        id to appear; the diagnostics' cluster sums and document bootstrap draw in this order).
      name: what the ids are, for error messages.
      n: the expected N, or None.

    Returns:
      `GroupCodes(codes [N] int32, num_groups, names [G])`.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D [N] array, got shape {ids.shape}")
    if n is not None and ids.shape[0] != n:
        raise ValueError(f"{name} has {ids.shape[0]} entries, expected {n}")
    if ids.dtype.kind == "f" and np.isnan(ids).any():
        raise ValueError(f"{name} contain NaN at rows {format_rows(np.flatnonzero(np.isnan(ids)))}")
    if ids.dtype == object and any(x is None for x in ids):
        raise ValueError(f"{name} contain None at row {[x is None for x in ids].index(True)}")
    names, first, codes = np.unique(ids, return_index=True, return_inverse=True)
    codes = codes.ravel()
    if order == "first":
        appearance = np.argsort(first)  # sorted-name indices in order of first appearance
        codes, names = np.argsort(appearance)[codes], names[appearance]
    elif order != "sorted":
        raise ValueError(f"order must be 'sorted' or 'first', got {order!r}")
    return GroupCodes(codes.astype(np.int32), int(names.shape[0]), names)
