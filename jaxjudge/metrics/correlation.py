"""Agreement metrics between predictions and human scores: Pearson, Spearman, Kendall tau-b, MSE.

Every metric is computed by one *segmented* core `(x, y, w, groups, num_groups) -> [G]` that
returns the metric inside each group at once; the plain (dataset-level) metric is the same core
with one group. The cores are pure, jitted, float32, and take per-row weights `w >= 0`:

* a row with `w == 0` is ignored entirely (this is how `mask=` is implemented: ranks, means and
  pair counts see only the selected rows);
* integer weights behave exactly like repeating a row that many times (this is what the
  grouped bootstrap relies on);
* a group with fewer than two selected rows, or whose `x` or `y` is constant among its
  selected rows, gives NaN for the correlations (scipy also gives NaN there); MSE needs one row.

Public entry points (`pearson`, `spearman`, `kendall`, `mse`, `neg_mse`) validate their
inputs eagerly (see `_checks.py`) and then call the jitted cores; under an outer `jit`/`vmap`
only the static shape checks run. The summary-level metrics (`grouped`, `per_group`,
`grouped_metric`) run the same cores with many groups; they live in `jaxjudge.metrics.summary_level`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp

from jaxjudge.metrics import _checks

_F32 = jnp.float32

# Rows processed at once by the O(N^2) Kendall core: bounds its memory at [_KENDALL_ROWS, N].
_KENDALL_ROWS = 128


class MetricFn(Protocol):
    """A metric as used by selection: `(x [N], y [N], mask [N] bool | None) -> scalar`."""

    def __call__(
        self, x: jax.Array, y: jax.Array, mask: jax.Array | None = None, *, weights: Any = None
    ) -> jax.Array: ...


# ----------------------------------------------------------------------------------------
# Segment helpers. With one group the plain reductions are used (faster than a scatter).


def _seg_sum(v: jax.Array, groups: jax.Array, num_groups: int) -> jax.Array:
    if num_groups == 1:
        return jnp.sum(v)[None]
    return jax.ops.segment_sum(v, groups, num_segments=num_groups)


def _seg_max(v: jax.Array, groups: jax.Array, num_groups: int) -> jax.Array:
    if num_groups == 1:
        return jnp.max(v)[None]
    return jax.ops.segment_max(v, groups, num_segments=num_groups)


def _seg_min(v: jax.Array, groups: jax.Array, num_groups: int) -> jax.Array:
    if num_groups == 1:
        return jnp.min(v)[None]
    return jax.ops.segment_min(v, groups, num_segments=num_groups)


def _safe_div(a: jax.Array, b: jax.Array) -> jax.Array:
    return a / jnp.where(b != 0, b, 1.0)


def _nonconstant(v: jax.Array, pos: jax.Array, groups: jax.Array, num_groups: int) -> jax.Array:
    """Per group: True when `v` takes at least two distinct values among selected rows `[G]`.

    Exact comparison of the extremes, so a constant input is detected even when its float32
    mean is not exactly representable (where a centred variance would come out tiny, not 0).
    """
    hi = _seg_max(jnp.where(pos, v, -jnp.inf), groups, num_groups)
    lo = _seg_min(jnp.where(pos, v, jnp.inf), groups, num_groups)
    return hi > lo


def _centred_scaled(
    v: jax.Array, w: jax.Array, pos: jax.Array, groups: jax.Array, num_groups: int
) -> jax.Array:
    """Weighted group-centred values, divided by their group's max |.| `[N]`.

    Centring is done twice (the corrected two-pass algorithm): the second pass removes the
    rounding error of the first mean, which matters for data with a large offset. Scaling by
    the max keeps squares away from float32 overflow/underflow; correlation is scale-free.
    """
    wsum = _seg_sum(w, groups, num_groups)
    mean = _safe_div(_seg_sum(w * v, groups, num_groups), wsum)
    d = jnp.where(pos, v - mean[groups], 0.0)
    d = jnp.where(pos, d - _safe_div(_seg_sum(w * d, groups, num_groups), wsum)[groups], 0.0)
    scale = _seg_max(jnp.abs(d), groups, num_groups)
    return _safe_div(d, scale[groups])


@dataclasses.dataclass(frozen=True)
class _Selected:
    """The rows a core reads (`_prepare`): `x`, `y`, `w` `[N]` zeroed outside `pos` `[N]` (w > 0)."""

    x: jax.Array
    y: jax.Array
    w: jax.Array
    pos: jax.Array


def _prepare(x, y, w) -> _Selected:
    pos = w > 0
    # Unselected rows may hold NaN (an invalid judge output): zero them so 0 * NaN never leaks.
    return _Selected(jnp.where(pos, x, 0.0), jnp.where(pos, y, 0.0), jnp.where(pos, w, 0.0), pos)


# ----------------------------------------------------------------------------------------
# Segmented cores: (x [N], y [N], w [N], groups [N] int32, num_groups) -> [G]


def _corr_defined(x, y, pos, groups, num_groups):
    count = _seg_sum(pos.astype(_F32), groups, num_groups)
    return (
        (count >= 2)
        & _nonconstant(x, pos, groups, num_groups)
        & _nonconstant(y, pos, groups, num_groups)
    )


def _pearson_groups(x, y, w, groups, num_groups: int) -> jax.Array:
    s = _prepare(x, y, w)
    dx = _centred_scaled(s.x, s.w, s.pos, groups, num_groups)
    dy = _centred_scaled(s.y, s.w, s.pos, groups, num_groups)
    sxy = _seg_sum(s.w * dx * dy, groups, num_groups)
    sxx = _seg_sum(s.w * dx * dx, groups, num_groups)
    syy = _seg_sum(s.w * dy * dy, groups, num_groups)
    r = jnp.clip(_safe_div(sxy, jnp.sqrt(sxx) * jnp.sqrt(syy)), -1.0, 1.0)
    return jnp.where(_corr_defined(s.x, s.y, s.pos, groups, num_groups), r, jnp.nan)


def _midranks(v, w, groups, num_groups: int) -> jax.Array:
    """Weighted mid-ranks of `v` within each group `[N]`, O(N log N) time, O(N) memory.

    rank_i = (weight of rows in i's group with a smaller value) + (weight of i's tie block)/2.
    With integer weights this is the average rank of the repeated data minus 1/2, and a
    constant shift does not change a correlation. Rows of weight 0 get a rank but add no
    weight, so they cannot move anyone else's rank: their values need not be masked.

    The sort, the tie blocks and the permutation depend on `v` and `groups` only, never on
    `w`. Under a vmap over weights (the bootstrap) they are computed once for the batch; each
    resample pays one cumulative sum and gathers, no sort and no scatter.
    """
    n = v.shape[0]
    idx = jnp.arange(n)
    if num_groups == 1:
        order = jnp.argsort(v)
    else:
        order = jnp.lexsort((v, groups))  # primary key: group, then value
    inverse = jnp.argsort(order)  # sorted position of each row
    vs, gs = v[order], groups[order]
    new_group = jnp.concatenate([jnp.ones((1,), bool), gs[1:] != gs[:-1]])
    new_block = new_group | jnp.concatenate([jnp.ones((1,), bool), vs[1:] != vs[:-1]])
    last = jnp.concatenate([new_block[1:], jnp.ones((1,), bool)])  # last row of its tie block
    block_start = jax.lax.cummax(jnp.where(new_block, idx, 0))  # [N] sorted positions
    block_end = jax.lax.cummin(jnp.where(last, idx, n - 1), reverse=True)
    group_start = jax.lax.cummax(jnp.where(new_group, idx, 0))
    ws = w[order]
    through = jnp.cumsum(ws)  # weight sorted at or before each position
    before = through - ws  # weight sorted strictly before each position
    block_w = through[block_end] - before[block_start]
    rank_sorted = before[block_start] - before[group_start] + 0.5 * block_w
    return rank_sorted[inverse]


def _spearman_groups(x, y, w, groups, num_groups: int) -> jax.Array:
    # Ranks from the unmasked values (see `_midranks`): under a bootstrap's vmap over `w` the
    # sorts of x and y are then shared by the whole batch.
    rx = _midranks(x, w, groups, num_groups)
    ry = _midranks(y, w, groups, num_groups)
    # Ties map to equal ranks exactly, so constancy of the ranks equals constancy of x, y.
    return _pearson_groups(rx, ry, w, groups, num_groups)


def _kendall_groups(x, y, w, groups, num_groups: int) -> jax.Array:
    """Kendall tau-b per group. O(N^2) time; memory O(_KENDALL_ROWS * N) per call.

    Over ordered pairs (i, j) of rows in the same group, with pair weight w_i w_j:
      tau_b = sum sgn(dx) sgn(dy) / sqrt(sum |sgn(dx)| * sum |sgn(dy)|).
    The denominator sums count pairs not tied in x (resp. y), which is n0 - n1 of the
    textbook formula; copies of one row (integer weights) are tied in both and drop out,
    exactly as scipy treats repeated data.
    """
    s = _prepare(x, y, w)
    x, y, w = s.x, s.y, s.w
    n = x.shape[0]

    def row(i):
        sx = jnp.sign(x[i] - x)
        sy = jnp.sign(y[i] - y)
        pw = w[i] * w
        if num_groups > 1:
            pw = jnp.where(groups == groups[i], pw, 0.0)
        return jnp.sum(pw * sx * sy), jnp.sum(pw * jnp.abs(sx)), jnp.sum(pw * jnp.abs(sy))

    num, nx, ny = jax.lax.map(row, jnp.arange(n), batch_size=min(n, _KENDALL_ROWS))
    num = _seg_sum(num, groups, num_groups)
    nx = _seg_sum(nx, groups, num_groups)
    ny = _seg_sum(ny, groups, num_groups)
    tau = jnp.clip(_safe_div(num, jnp.sqrt(nx) * jnp.sqrt(ny)), -1.0, 1.0)
    return jnp.where(_corr_defined(x, y, s.pos, groups, num_groups), tau, jnp.nan)


def _mse_groups(x, y, w, groups, num_groups: int) -> jax.Array:
    s = _prepare(x, y, w)
    wsum = _seg_sum(s.w, groups, num_groups)
    err = _seg_sum(s.w * jnp.square(s.x - s.y), groups, num_groups)
    return jnp.where(wsum > 0, _safe_div(err, wsum), jnp.nan)


def _neg_mse_groups(x, y, w, groups, num_groups: int) -> jax.Array:
    return -_mse_groups(x, y, w, groups, num_groups)


_jit_groups = functools.partial(jax.jit, static_argnames=("num_groups",))
_CORES: dict[str, Callable[..., jax.Array]] = {
    "pearson": _jit_groups(_pearson_groups),
    "spearman": _jit_groups(_spearman_groups),
    "kendall": _jit_groups(_kendall_groups),
    "mse": _jit_groups(_mse_groups),
    "neg_mse": _jit_groups(_neg_mse_groups),
}
_IS_CORRELATION = {
    "pearson": True, "spearman": True, "kendall": True, "mse": False, "neg_mse": False
}


# ----------------------------------------------------------------------------------------
# Public dataset-level metrics.


def _dataset_metric(name: str, x, y, mask, weights) -> jax.Array:
    corr = _IS_CORRELATION[name]
    x, y, w = _checks.check_pair(
        x, y, mask, weights, metric=name, min_rows=2 if corr else 1, warn_constant=corr
    )
    groups = jnp.zeros(x.shape, jnp.int32)
    return _CORES[name](x, y, w, groups, num_groups=1)[0]


def pearson(x: Any, y: Any, mask: Any | None = None, *, weights: Any | None = None) -> jax.Array:
    """Pearson correlation of `x` and `y` over the selected rows.

    Args:
      x: predictions `[N]`.
      y: human scores `[N]`.
      mask: bool `[N]` or None (all rows). Unselected rows are ignored entirely.
      weights: float `[N]` >= 0 or None. Integer weights equal repeating rows; combined with
        `mask` by zeroing unselected rows.

    Returns:
      float32 scalar in [-1, 1]; NaN when fewer than 2 rows are selected or `x` or `y` is
      constant on them (eager calls raise / warn instead, see `_checks.check_pair`).
    """
    return _dataset_metric("pearson", x, y, mask, weights)


def spearman(x: Any, y: Any, mask: Any | None = None, *, weights: Any | None = None) -> jax.Array:
    """Spearman rank correlation (average ranks for ties) over the selected rows.

    Ranks are computed among the selected rows only, by one sort and segment sums: O(N log N)
    time, O(N) memory, so it can be vmapped over large hyper-parameter grids.

    Args/Returns: as `pearson`.
    """
    return _dataset_metric("spearman", x, y, mask, weights)


def kendall(x: Any, y: Any, mask: Any | None = None, *, weights: Any | None = None) -> jax.Array:
    """Kendall tau-b (scipy.stats.kendalltau, variant='b') over the selected rows.

    O(N^2) time; pairs are formed in row blocks so memory is O(128 * N) per evaluation (times
    the vmapped batch size under `vmap`).

    Args/Returns: as `pearson`.
    """
    return _dataset_metric("kendall", x, y, mask, weights)


def mse(x: Any, y: Any, mask: Any | None = None, *, weights: Any | None = None) -> jax.Array:
    """Mean squared error (weighted mean of (x - y)^2) over the selected rows.

    Args/Returns: as `pearson`; NaN only when no row is selected.
    """
    return _dataset_metric("mse", x, y, mask, weights)


def neg_mse(x: Any, y: Any, mask: Any | None = None, *, weights: Any | None = None) -> jax.Array:
    """Negative MSE, so that every registered metric is maximised by selection."""
    return _dataset_metric("neg_mse", x, y, mask, weights)


METRICS: dict[str, MetricFn] = {
    "pearson": pearson,
    "spearman": spearman,
    "kendall": kendall,
    "mse": mse,
    "neg_mse": neg_mse,
}
"""Registered metrics by name. All take `(x, y, mask=None, *, weights=None)`."""

HIGHER_IS_BETTER: dict[str, bool] = {
    "pearson": True,
    "spearman": True,
    "kendall": True,
    "mse": False,
    "neg_mse": True,
}


def get_metric(name: str) -> MetricFn:
    """The registered metric called `name` (see `METRICS`).

    Raises:
      ValueError: unknown name; the message lists the known names.
    """
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; known metrics: {sorted(METRICS)}")
    return METRICS[name]
