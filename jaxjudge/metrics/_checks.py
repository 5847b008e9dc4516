"""Eager input validation for the public metric and diagnostic entry points.

The jitted cores never look at values. The public wrappers call the functions here first:
shape checks always run (shapes are static, so they work under `jit` and `vmap` too), value
checks (NaN, empty mask, out-of-range scores, bad group ids) run only when the inputs are
concrete arrays, i.e. when the caller is eager. Inside a trace they are skipped silently,
because a traced value cannot be inspected without breaking compilation.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

_MAX_ROWS_SHOWN = 10


def is_traced(*arrays: Any) -> bool:
    """True when any argument is a JAX tracer (we are inside `jit`, `vmap`, `grad`...)."""
    return any(isinstance(a, jax.core.Tracer) for a in arrays if a is not None)


def format_rows(rows: np.ndarray) -> str:
    """Render row indices for an error message, shortening long lists."""
    rows = [int(r) for r in np.asarray(rows).ravel()]
    if len(rows) > _MAX_ROWS_SHOWN:
        head = ", ".join(str(r) for r in rows[:_MAX_ROWS_SHOWN])
        return f"[{head}, ... ({len(rows)} rows)]"
    return "[" + ", ".join(str(r) for r in rows) + "]"


def _shape_of(a: Any) -> tuple[int, ...]:
    return tuple(np.shape(a)) if not hasattr(a, "shape") else tuple(a.shape)


def as_vector(a: Any, name: str) -> np.ndarray:
    """`a` as a 1-D numpy array (any dtype); raises naming `name` otherwise."""
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr


def check_all_finite(a: np.ndarray, name: str) -> None:
    """Raise when any entry of `a` is NaN or inf."""
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ValueError(f"{name} contains NaN or inf at rows {format_rows(bad)}")


def check_vector(a: Any, name: str, n: int | None = None) -> int:
    """Check that `a` is 1-D (and of length `n` when given); return its length."""
    shape = _shape_of(a)
    if len(shape) != 1:
        raise ValueError(f"{name} must be 1-D [N], got shape {shape}")
    if n is not None and shape[0] != n:
        raise ValueError(f"{name} has length {shape[0]} but expected {n} (shape mismatch)")
    return shape[0]


def effective_weights(
    n: int, mask: Any | None, weights: Any | None, *, mask_name: str = "mask"
) -> jax.Array:
    """Combine an optional bool mask and optional weights into float32 weights `[N]`.

    Raises:
      ValueError: on a shape mismatch.
      TypeError: when `mask` is not boolean (a float mask is too easily confused with weights).
    """
    w = jnp.ones((n,), jnp.float32)
    if weights is not None:
        check_vector(weights, "weights", n)
        w = jnp.asarray(weights, jnp.float32)
    if mask is not None:
        check_vector(mask, mask_name, n)
        mask = jnp.asarray(mask)
        if mask.dtype != jnp.bool_:
            raise TypeError(
                f"{mask_name} must be a boolean array, got dtype {mask.dtype}; "
                "pass real-valued weights through `weights=` instead"
            )
        w = jnp.where(mask, w, 0.0)
    return w


def check_weight_values(w: jax.Array, *, what: str = "mask") -> np.ndarray:
    """Eager checks on combined weights; returns the boolean selection as numpy."""
    w_np = np.asarray(w)
    bad = np.flatnonzero(~np.isfinite(w_np) | (w_np < 0))
    if bad.size:
        raise ValueError(f"weights must be finite and >= 0; bad rows {format_rows(bad)}")
    sel = w_np > 0
    if not sel.any():
        raise ValueError(f"the {what} selects no rows (empty mask or all weights zero)")
    return sel


def check_finite(a: Any, name: str, sel: np.ndarray) -> None:
    """Raise when `a` holds NaN or inf inside the selected rows."""
    a_np = np.asarray(a, dtype=np.float64)
    bad_nan = np.flatnonzero(np.isnan(a_np) & sel)
    if bad_nan.size:
        raise ValueError(
            f"{name} contain NaN at rows {format_rows(bad_nan)}; drop them or mask them out"
        )
    bad_inf = np.flatnonzero(np.isinf(a_np) & sel)
    if bad_inf.size:
        raise ValueError(f"{name} contain inf at rows {format_rows(bad_inf)}")


def check_pair(
    x: Any,
    y: Any,
    mask: Any | None,
    weights: Any | None,
    *,
    metric: str,
    min_rows: int,
    warn_constant: bool,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Validate a (prediction, human) pair; return float32 `x`, `y` and weights `[N]`.

    Shape checks always run. Value checks run only for concrete inputs: NaN/inf inside the
    selection, an empty selection, fewer than `min_rows` selected rows, and (a warning, like
    scipy's ConstantInputWarning) a constant input for a correlation.
    """
    n = check_vector(x, "x (predictions)")
    check_vector(y, "y (human scores)", n)
    w = effective_weights(n, mask, weights)
    x = jnp.asarray(x, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    if is_traced(x, y, w):
        return x, y, w
    sel = check_weight_values(w)
    check_finite(x, "x (predictions)", sel)
    check_finite(y, "y (human scores)", sel)
    if sel.sum() < min_rows:
        raise ValueError(f"{metric} needs at least {min_rows} selected rows, got {int(sel.sum())}")
    if warn_constant:
        for arr, name in ((x, "x (predictions)"), (y, "y (human scores)")):
            vals = np.asarray(arr)[sel]
            if vals.min() == vals.max():
                warnings.warn(
                    f"{name} is constant within the selection; {metric} is undefined and "
                    "returns NaN",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return x, y, w


def check_groups(groups: Any, n: int, num_groups: int | None) -> tuple[jax.Array, int]:
    """Validate integer group codes `[N]`; infer `num_groups` eagerly when not given.

    Raises:
      ValueError: shape mismatch, codes outside [0, num_groups), a code with no rows at all
        (the codes are not contiguous: use `encode_groups`), or `num_groups` missing under a
        trace.
      TypeError: non-integer codes.
    """
    check_vector(groups, "groups", n)
    dtype = groups.dtype if hasattr(groups, "dtype") else np.asarray(groups).dtype
    if not np.issubdtype(dtype, np.integer):
        raise TypeError(
            f"groups must be integer codes 0..G-1, got dtype {dtype}; "
            "convert arbitrary ids with jaxjudge.metrics.encode_groups"
        )
    groups = jnp.asarray(groups, jnp.int32)
    if is_traced(groups):
        if num_groups is None:
            raise ValueError("num_groups must be given (static) when groups is traced")
        return groups, int(num_groups)
    g_np = np.asarray(groups)
    if num_groups is None:
        num_groups = int(g_np.max()) + 1 if n else 0
    num_groups = int(num_groups)
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    out = np.flatnonzero((g_np < 0) | (g_np >= num_groups))
    if out.size:
        raise ValueError(
            f"group ids outside [0, {num_groups}) at rows {format_rows(out)}; "
            "use jaxjudge.metrics.encode_groups to build codes"
        )
    counts = np.bincount(g_np, minlength=num_groups)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValueError(
            f"groups {format_rows(empty)} have no rows; group codes must be contiguous "
            "0..num_groups-1 (use jaxjudge.metrics.encode_groups)"
        )
    return groups, num_groups


# -- float64 inputs of the diagnostics (`jaxjudge.diagnostics`) -----------------------------------
#
# Every public diagnostic converts its inputs through these so that a wrong shape, a NaN or a
# length mismatch is reported with the parameter's name instead of surfacing later as a NaN
# statistic.


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
