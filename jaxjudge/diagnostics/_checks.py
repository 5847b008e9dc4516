"""Input validation shared by the diagnostics modules.

Every public diagnostic converts its inputs through these helpers so that a wrong shape, a
NaN or a length mismatch is reported with the parameter's name instead of surfacing later as a
NaN statistic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def as_float_vector(x, name: str, *, min_len: int = 1) -> np.ndarray:
    """Converts `x` to a finite float64 vector.

    Args:
      x: array-like of numbers, shape [N].
      name: parameter name used in error messages.
      min_len: smallest accepted N.

    Returns:
      float64 array of shape [N].
    """
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an array of numbers: {err}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.shape[0] < min_len:
        raise ValueError(f"{name} needs at least {min_len} values, got {arr.shape[0]}")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"{name} has a non-finite value at index {int(np.argmax(bad))}")
    return arr


def as_logprob_pairs(x, name: str) -> np.ndarray:
    """Converts `x` to a float64 array of shape [P, 2] with no NaN or +inf.

    -inf is allowed: a token the model gives zero probability has log-probability -inf.
    """
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an array of log-probabilities: {err}") from None
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"{name} must have shape [P, 2] (columns: answer A, answer B), got {arr.shape}")
    bad = np.isnan(arr) | (arr == np.inf)
    if bad.any():
        row = int(np.argmax(bad.any(axis=1)))
        raise ValueError(f"{name} has NaN or +inf at row {row}")
    both_neg_inf = np.all(arr == -np.inf, axis=1)
    if both_neg_inf.any():
        row = int(np.argmax(both_neg_inf))
        raise ValueError(f"{name} row {row}: both answer tokens have log-probability -inf")
    return arr


def same_length(**arrays: Sequence | np.ndarray) -> int:
    """Checks that all named arrays have the same first dimension; returns it."""
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise ValueError(f"length mismatch: {desc}")
    return next(iter(lengths.values()))


def as_groups(groups, n: int, name: str = "groups") -> tuple[np.ndarray, int]:
    """Maps arbitrary hashable group labels to integer codes 0..G-1.

    Args:
      groups: sequence of N hashable labels (strings, ints).
      n: expected N.
      name: parameter name for error messages.

    Returns:
      (codes [N] int64, G).
    """
    labels = list(groups) if not isinstance(groups, np.ndarray) else groups.tolist()
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} entries, expected {n}")
    index: dict = {}
    codes = np.empty(n, dtype=np.int64)
    for i, g in enumerate(labels):
        codes[i] = index.setdefault(g, len(index))
    return codes, len(index)
