"""Every method of the two papers on one cell's cached arrays: select on dev, score on test.

A *cell* is one (judge, task, aspect, score scale). Its inputs are the engine's arrays (the
judge's candidate log-probabilities `[N, K]`, validity, optional greedy generations, the
random-number and content-free arrays, an assistant model's arrays) plus the human scores, the
group (source document) of each example and a dev/test split with F folds.

For each method and each way of reading a score from the distribution (the expected score at
each temperature, the greedy score, or the parsed greedy generation) this module:

1. builds the adjusted log-probabilities of every fold, `[F, N, K]`: fixed methods need no
   choice; tuned ones choose their hyper-parameters on each fold's dev examples with
   `jaxjudge.select.grid_search` (one compiled call over grid x folds);
2. reads predictions `[F, N]` and, for the expected score, the scored distribution (for SDD).
   Temperature convention: a reading at temperature T tempers every input distribution
   first (the judge's candidate distribution, and the content-free, batch, dev-marginal,
   random-number and assistant distributions a method derives its prior from), then applies
   the adjustment, and reads the result with no second temperature. So distribution
   calibration is `p_T(y) q(y) / pbar_T(y)` (q enters once), contextual and batch
   calibration divide by their prior measured at T, and Deb-R / Deb-T's lambda multiplies
   `B = log U - log P_random,T` in log-probability units at every T (the paper's 0.1-1.0
   grid). The greedy reading is at T = 1;
3. scores the test side of every fold and averages over folds, with a grouped bootstrap 95%
   interval for each metric and for the difference from the vanilla judge read the same way
   (paired: both scored on the same resamples). The bootstrap resamples whole groups of the
   reported side only: the test groups of a fixed split; under k-fold every group (each is
   on the test side of some fold), each fold's test metric recomputed on the resample.
   Hyper-parameters stay as chosen on the original dev data, so the interval is conditional
   on the selection. Undefined resamples are counted (``n_boot_nan``, ``nan_share``); above
   `NAN_SHARE_MAX` of them, or with fewer than `MIN_CI_GROUPS` reported groups, no interval
   is given and ``reason`` says why. Per-document means state how many test documents had a
   defined metric (``docs_defined`` of ``docs``, fewest over folds).

Human scores are mapped linearly onto the prompt's range before anything is computed (see
`jaxjudge.report.config`); correlations are unchanged by that, MSE and SDD are on the prompt's
scale. Correlations and MSE of the ``generate`` method are computed over the parsed rows only;
its validity is the parse rate. The validity of the other methods is the extraction's
``valid`` flag (the greedy next token starts a score candidate), which no adjustment changes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge import metrics as M
from jaxjudge.debias import (
    batch_calibration,
    contextual_calibration,
    contrastive,
    distribution_correction,
    expected_score,
    greedy_score,
    human_prior,
    latent_prior,
    least_perplexity,
    prior_correction,
    rectify,
)
from jaxjudge.prompts import ScoreScale
from jaxjudge.select import (
    Splits,
    contrastive_adjust,
    fixed_split,
    grid_search,
    kfold_splits,
    lambda_grid,
    lambda_temperature_grid,
    product_grid,
    rectify_adjust,
)

__all__ = [
    "RandomPrior",
    "CellArrays",
    "MethodOptions",
    "CellReport",
    "evaluate_cell",
    "make_splits",
    "map_human",
    "score_kinds",
    "test_side_intervals",
    "MIN_CI_GROUPS",
    "NAN_SHARE_MAX",
]

_CORRELATIONS = ("pearson", "spearman", "kendall")
_GROUPABLE = ("pearson", "spearman", "kendall", "mse")

NAN_SHARE_MAX = 0.05
"""Above this share of undefined bootstrap resamples a cell prints no interval (the survivors
are a biased subsample: e.g. resamples whose test side holds one distinct parsed score)."""

MIN_CI_GROUPS = 10
"""Fewest reported (test) groups for which the report prints an interval. Below it the
percentile bootstrap of a correlation under-covers badly (3 test documents: about 77% for a
nominal 95%); `tests/test_coverage.py` and `benchmarks/coverage.py` measure coverage at and
above this minimum."""


@dataclass(frozen=True)
class RandomPrior:
    """Random-number prompts of one variant under a judge.

    Attributes:
      logprobs: `[P, K]` candidate log-probabilities after each prompt.
      nll: `[P]` sequence negative log-likelihood of each prompt (perplexity ranking).
    """

    logprobs: np.ndarray
    nll: np.ndarray

    def top_indices(self, tp: int) -> np.ndarray:
        """`[tp]` indices of the `tp` least-perplexity prompts."""
        p = self.logprobs.shape[0]
        if not 1 <= tp <= p:
            raise ValueError(f"Tp={tp} random-number prompts requested, but the store has {p}")
        return np.asarray(least_perplexity(jnp.asarray(self.nll, jnp.float32), tp))

    def top(self, tp: int) -> np.ndarray:
        """`[tp, K]` log-probabilities of the `tp` least-perplexity prompts."""
        return self.logprobs[self.top_indices(tp)]


@dataclass
class CellArrays:
    """All arrays of one (judge, task, aspect, scale) cell, aligned on the N examples.

    Attributes:
      scale: the prompt's score scale (K candidates).
      logprobs: `[N, K]` the judge's candidate log-probabilities.
      human: `[N]` human scores on the task's own range.
      human_range: `(a, b)` that range (SummEval (1, 5), STS-B (0, 5), SemRel (0, 1)).
      groups: `[N]` source-document (group) id of each example.
      example_ids: `[N]` example ids.
      valid: `[N]` bool, the greedy next token starts a score; None: all valid.
      truncated: `[N]` bool, the prompt's source text was cut to fit the context; None: unknown.
      truncated_tokens: `[N]` int, source tokens cut from each prompt; None: unknown (stores
        written before the engine recorded it).
      generated: `[N]` scores parsed from greedy generation (NaN: parse failure), or None.
      random: variant (``"R"``, ``"T"``) -> `RandomPrior` of the judge.
      content_free: `[M, K]` log-probabilities on content-free inputs, or None.
      assistant: `[N, K]` the assistant model's log-probabilities, or None.
      assistant_random: variant -> `RandomPrior` of the assistant (same prompts, same order).
      split_labels: `[N]` data split of each example (``"dev"``/``"test"``...), or None.
    """

    scale: ScoreScale
    logprobs: np.ndarray
    human: np.ndarray
    human_range: tuple[float, float]
    groups: np.ndarray
    example_ids: np.ndarray | None = None
    valid: np.ndarray | None = None
    truncated: np.ndarray | None = None
    truncated_tokens: np.ndarray | None = None
    generated: np.ndarray | None = None
    contrastive_generated: np.ndarray | None = None  # [N] parsed contrastive generations (NaN: parse failure)
    random: Mapping[str, RandomPrior] = field(default_factory=dict)
    content_free: np.ndarray | None = None
    assistant: np.ndarray | None = None
    assistant_random: Mapping[str, RandomPrior] = field(default_factory=dict)
    split_labels: np.ndarray | None = None

    def __post_init__(self) -> None:
        lp = np.asarray(self.logprobs, np.float32)
        if lp.ndim != 2 or lp.shape[1] != self.scale.size:
            raise ValueError(
                f"logprobs must be [N, K] with K={self.scale.size} (scale {self.scale.name}), got {lp.shape}"
            )
        n = lp.shape[0]
        if not np.isfinite(lp).all():
            bad = np.flatnonzero(~np.isfinite(lp).all(1))
            raise ValueError(f"logprobs contain NaN/inf at rows {bad[:10].tolist()}")
        self.logprobs = lp
        self.human = np.asarray(self.human, np.float64)
        self.groups = np.asarray(self.groups)
        for name in ("human", "groups", "example_ids", "valid", "truncated", "truncated_tokens", "generated",
                     "contrastive_generated", "split_labels"):
            a = getattr(self, name)
            if a is not None and np.shape(a) != (n,):
                raise ValueError(f"{name} must be [N]=[{n}] like logprobs, got shape {np.shape(a)}")
        if not np.isfinite(self.human).all():
            raise ValueError(f"human scores contain NaN at rows {np.flatnonzero(~np.isfinite(self.human))[:10].tolist()}")
        a, b = self.human_range
        out = np.flatnonzero((self.human < a - 1e-9) | (self.human > b + 1e-9))
        if out.size:
            raise ValueError(f"human scores outside their range [{a}, {b}] at rows {out[:10].tolist()}")
        if self.valid is not None:
            self.valid = np.asarray(self.valid, bool)
        if self.generated is not None:
            self.generated = np.asarray(self.generated, np.float64)
        k = self.scale.size
        for name, arr in (("content_free", self.content_free), ("assistant", self.assistant)):
            if arr is not None:
                arr = np.asarray(arr, np.float32)
                want = (n, k) if name == "assistant" else (arr.shape[0], k)
                if arr.ndim != 2 or arr.shape != want:
                    raise ValueError(f"{name} must be {list(want)}, got {list(arr.shape)}")
                setattr(self, name, arr)
        for label, priors in (("random", self.random), ("assistant_random", self.assistant_random)):
            for v, rp in priors.items():
                if rp.logprobs.ndim != 2 or rp.logprobs.shape[1] != k or rp.nll.shape != rp.logprobs.shape[:1]:
                    raise ValueError(
                        f"{label}[{v!r}]: logprobs must be [P, {k}] and nll [P], got "
                        f"{list(rp.logprobs.shape)} and {list(rp.nll.shape)}"
                    )

    @property
    def n(self) -> int:
        return self.logprobs.shape[0]


@dataclass(frozen=True)
class MethodOptions:
    """How one cell is evaluated (built from an `ExperimentConfig` by the pipeline).

    Attributes mirror the config fields of the same names; ``per_group`` adds the
    per-document (summary-level) metrics.
    """

    methods: tuple[str, ...] = ("vanilla",)
    temperatures: tuple[float, ...] = (0.2, 1.0)
    greedy: bool = True
    deb_tp: tuple[int, ...] = (10,)
    lambdas: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(1, 11))
    lambdas_extended: tuple[float, ...] | None = None
    contrastive_lams: tuple[float, ...] = (0.01, 0.1, 0.5, 1.0)
    contrastive_temps: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 5.0)
    contrastive_fine: bool = False
    contrastive_lams_fine: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(0, 21))
    contrastive_temps_fine: tuple[float, ...] = tuple(round(0.25 * i, 2) for i in range(2, 21))
    contrastive_temperature: str = "t_main"
    select_metric: str = "spearman"
    select_per_group: bool = False
    metrics: tuple[str, ...] = ("pearson", "spearman", "kendall", "mse", "sdd", "validity")
    ci_metrics: tuple[str, ...] | None = None
    per_group: bool = False
    n_boot: int = 1000
    alpha: float = 0.05
    seed: int = 0
    min_ci_groups: int = MIN_CI_GROUPS
    ci_method: str = "expanded"

    @classmethod
    def from_config(cls, cfg, task) -> MethodOptions:
        """Options of `ExperimentConfig` ``cfg`` for `TaskSpec` ``task``."""
        from jaxjudge.report import grids as C  # noqa: PLC0415

        return cls(
            methods=tuple(cfg.methods), temperatures=tuple(cfg.temperatures), greedy=cfg.greedy,
            deb_tp=tuple(cfg.deb_tp), lambdas=tuple(cfg.lambdas),
            lambdas_extended=None if cfg.lambdas_extended is None else tuple(cfg.lambdas_extended),
            contrastive_lams=tuple(cfg.contrastive_lams), contrastive_temps=tuple(cfg.contrastive_temps),
            contrastive_fine=cfg.contrastive_fine, contrastive_lams_fine=C.CONTRASTIVE_LAMS_FINE,
            contrastive_temps_fine=C.CONTRASTIVE_TEMPS_FINE, contrastive_temperature=cfg.contrastive_temperature,
            select_metric=cfg.select_metric, select_per_group=cfg.select_per_group and task.per_group,
            metrics=tuple(cfg.metrics), ci_metrics=tuple(cfg.ci_metrics), per_group=bool(task.per_group),
            n_boot=cfg.n_boot, alpha=cfg.alpha, seed=cfg.seed, min_ci_groups=cfg.min_ci_groups,
            ci_method=cfg.ci_method,
        )


@dataclass
class CellReport:
    """Result of `evaluate_cell`.

    Attributes:
      rows: one JSON-able dict per (method variant, score kind) (see `evaluate_cell`).
      aux: JSON-able extras for figures: score distributions, random-number priors, and the
        dev/test metric over each tuned method's grid.
    """

    rows: list[dict[str, Any]]
    aux: dict[str, Any]


# -- helpers ------------------------------------------------------------------------------------


def map_human(human: np.ndarray, human_range: tuple[float, float], scale: ScoreScale) -> np.ndarray:
    """Human scores mapped linearly from their range ``[a, b]`` onto ``[scale.lo, scale.hi]``.

    Args:
      human: `[N]` human scores in ``[a, b]``.
      human_range: ``(a, b)``.
      scale: the prompt's scale.

    Returns:
      `[N]` float64 ``lo + (s - a) / (b - a) * (hi - lo)``.
    """
    a, b = human_range
    return scale.lo + (np.asarray(human, np.float64) - a) / (b - a) * (scale.hi - scale.lo)


def score_kinds(options: MethodOptions) -> list[tuple[str, float | None]]:
    """``[("expected@0.2", 0.2), ("expected@1", 1.0), ("greedy", None)]`` for the options."""
    kinds = [(f"expected@{t:g}", float(t)) for t in options.temperatures]
    if options.greedy:
        kinds.append(("greedy", None))
    return kinds


def make_splits(
    mode: str,
    groups: np.ndarray,
    *,
    n_folds: int = 5,
    seed: int = 0,
    dev_groups: Sequence[str] | None = None,
    split_labels: np.ndarray | None = None,
    original: tuple[str, str] | None = None,
) -> Splits:
    """Dev/test masks for one cell.

    Args:
      mode: ``"kfold"`` (grouped, dev = one fold, test = the others), ``"fixed_docs"`` (dev =
        ``dev_groups``) or ``"original"`` (dev/test = the examples whose ``split_labels`` are
        ``original[0]`` / ``original[1]``).
      groups: `[N]` group ids.
      n_folds, seed: of ``"kfold"``.
      dev_groups: of ``"fixed_docs"``.
      split_labels, original: of ``"original"``.

    Returns:
      `jaxjudge.select.Splits` with `[F, N]` masks.
    """
    if mode == "kfold":
        return kfold_splits(groups, n_folds, seed)
    if mode == "fixed_docs":
        if dev_groups is None:
            raise ValueError("split 'fixed_docs' needs dev_groups")
        present = set(np.asarray(groups).tolist())
        return fixed_split(groups, [g for g in dev_groups if g in present] or list(dev_groups))
    if mode == "original":
        if split_labels is None or original is None:
            raise ValueError("split 'original' needs split_labels and original=(dev, test)")
        labels = np.asarray(split_labels)
        dev, test = labels == original[0], labels == original[1]
        for label, m in zip(original, (dev, test)):
            if not m.any():
                raise ValueError(f"split 'original': no example has split label {label!r}")
        if (dev | test).all():
            return fixed_split(dev_mask=dev)
        return Splits(dev=dev[None], test=test[None], fold_ids=None)
    raise ValueError(f"unknown split mode {mode!r}; expected 'kfold', 'fixed_docs' or 'original'")


@functools.lru_cache(maxsize=32)
def _grouped_selector(name: str, codes_bytes: bytes, n: int, num_groups: int):
    # Cached so that repeated grid searches hand grid_search the same metric object and reuse
    # its compilation.
    codes = np.frombuffer(codes_bytes, np.int32).reshape(n)
    return M.grouped_metric(name, codes, num_groups)


def _selector(options: MethodOptions, codes: M.GroupCodes):
    name = options.select_metric
    minimize = name == "mse"
    if options.select_per_group:
        return _grouped_selector(name, codes.codes.astype(np.int32).tobytes(), codes.codes.shape[0], codes.num_groups), minimize
    return name, minimize


def _combined_adjust(params, data):
    """Contrastive decoding, then the Deb-T correction of the (combined) judge's prior.

    With ``data["rand_asst"]`` the prior is that of the contrastive combination itself, on the
    random-number prompts, at the same (lambda, temperature); otherwise the main judge's.
    """
    t_main = params.get("t_main", 1.0)
    t_asst = params.get("t_asst", 1.0)
    adj = contrastive(data["main"], data["asst"], params["lam"], t_main, t_asst)  # [N, K]
    if "rand_asst" in data:
        prior_logits = contrastive(data["rand_main"], data["rand_asst"], params["lam"], t_main, t_asst)  # [P, K]
    else:
        prior_logits = data["rand_main"]
    return rectify(adj, prior_correction(latent_prior(prior_logits)), params["lam_d"])


@functools.partial(jax.jit, static_argnames=("adjust_fn",))
def _adjust_per_fold(chosen, data, *, adjust_fn):
    return jax.vmap(lambda p: adjust_fn(p, data))(chosen)  # [F, N, K]


def _to_list(x) -> list:
    return np.asarray(x).tolist()


def _mean_over_folds(a: np.ndarray) -> list[float | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = np.nanmean(np.asarray(a, np.float64), axis=-1)
    return [None if not np.isfinite(v) else float(v) for v in np.atleast_1d(m)]


# -- statistics -----------------------------------------------------------------------------------


def _stat_names(options: MethodOptions, has_probs: bool, has_delta: bool, subset: Sequence[str]) -> tuple[str, ...]:
    names = []
    for m in subset:
        if m == "sdd" and not has_probs:
            continue
        names.append(m)
        if options.per_group and m in _GROUPABLE:
            names.append(f"{m}_doc")
    if has_delta:
        sel = options.select_metric if options.select_metric in _GROUPABLE else "spearman"
        names.append(f"delta_{sel}_doc" if options.select_per_group else f"delta_{sel}")
    return tuple(names)


def _kendall_terms(sx, sy, ww, same=None):
    """Per-row pair sums of Kendall's tau-b: `[N]` each of sum_j ww_j s_ij for the three sums.

    Under the bootstrap only the row weights change, so tau-b's three pair sums are quadratic
    forms `ww^T S ww` of fixed sign matrices: one matrix-vector product per resample (a matrix
    product over a batch of resamples) instead of re-deriving every pair's signs.
    """
    sx = sx.astype(jnp.float32)  # [N, N] sign(x_i - x_j)
    sy = sy.astype(jnp.float32)  # [N, N] sign(y_i - y_j)
    mats = (sx * sy, jnp.abs(sx), jnp.abs(sy))
    if same is not None:
        mats = tuple(m * same for m in mats)
    return tuple(m @ ww for m in mats)  # num, nx, ny: [N] each


def _tau(num, nx, ny):
    ok = (nx > 0) & (ny > 0)
    return jnp.where(ok, jnp.clip(num / jnp.sqrt(jnp.where(ok, nx * ny, 1.0)), -1.0, 1.0), jnp.nan)


def _kendall_pooled(sx, sy, ww):
    num, nx, ny = (jnp.dot(ww, t) for t in _kendall_terms(sx, sy, ww))
    return _tau(num, nx, ny)


def _kendall_doc(sx, sy, ww, codes, num_groups: int):
    """Per-document tau-b averaged like `jaxjudge.metrics.grouped` (mean row weight per group)."""
    same = (codes[:, None] == codes[None, :]).astype(jnp.float32)  # [N, N]
    seg = lambda v: jax.ops.segment_sum(v, codes, num_segments=num_groups)  # noqa: E731
    num, nx, ny = (seg(ww * t) for t in _kendall_terms(sx, sy, ww, same))  # [G] each
    tau = _tau(num, nx, ny)
    pos = ww > 0
    wsum, count = seg(jnp.where(pos, ww, 0.0)), seg(pos.astype(jnp.float32))
    gw = jnp.where(jnp.isnan(tau), 0.0, wsum / jnp.maximum(count, 1.0))
    total = jnp.sum(gw)
    return jnp.where(total > 0, jnp.sum(gw * jnp.nan_to_num(tau)) / jnp.where(total > 0, total, 1.0), jnp.nan)


def _needs_kendall(names: Sequence[str]) -> bool:
    return any(n in ("kendall", "kendall_doc") for n in names)


@functools.lru_cache(maxsize=64)
def _make_stat(names: tuple[str, ...], num_groups: int):
    """`stat(*arrays, w) -> [S]`: every statistic of `names`, averaged over folds.

    Arrays (leading axis N): pred `[N, F]`, base `[N, F]` (vanilla, for deltas), human on the
    scale `[N]`, human minus lo `[N]` (SDD), log-probs `[N, F, K]`, test `[N, F]` float, ok `[N]`
    (finite prediction), valid `[N]`, group codes `[N]`, and for Kendall the int8 sign matrices
    sign(pred_i - pred_j) `[N, F, N]` and sign(human_i - human_j) `[N, N]` (placeholders
    `[N, F, 1]`, `[N, 1]` otherwise).
    """

    def metric(name, pred, human, codes, ww):
        if name.endswith("_doc"):
            return M.grouped(name[: -len("_doc")], pred, human, codes, num_groups=num_groups, weights=ww)
        return M.get_metric(name)(pred, human, weights=ww)

    def stat(pred_nf, base_nf, human, hrel, probs_nfk, test_nf, ok, valid, codes, sx_nfn, sy_nn, w):
        def per_fold(pred, base, probs, test, sx):
            rows = w * test  # [N] multiplicity of each test row in this resample
            ww = rows * ok
            out = []
            for name in names:
                if name == "validity":
                    out.append(jnp.sum(rows * valid) / jnp.sum(rows))
                elif name == "sdd":
                    out.append(M.sdd_from_logprobs(probs, hrel, 0, weights=ww))
                elif name == "kendall":
                    out.append(_kendall_pooled(sx, sy_nn, ww))
                elif name == "kendall_doc":
                    out.append(_kendall_doc(sx, sy_nn, ww, codes, num_groups))
                elif name.startswith("delta_"):
                    inner = name[len("delta_"):]
                    out.append(metric(inner, pred, human, codes, ww) - metric(inner, base, human, codes, ww))
                else:
                    out.append(metric(name, pred, human, codes, ww))
            return jnp.stack(out)

        per = jax.vmap(per_fold, in_axes=(1, 1, 1, 1, 1))(pred_nf, base_nf, probs_nfk, test_nf, sx_nfn)  # [F, S]
        return jnp.mean(per, axis=0)

    stat.__name__ = "cell_stat_" + "_".join(names)
    return stat


@functools.lru_cache(maxsize=64)
def _point_stat(names: tuple[str, ...], num_groups: int):
    stat = _make_stat(names, num_groups)
    return jax.jit(lambda *arrays: stat(*arrays, jnp.ones_like(arrays[2])))


def _signs(v: np.ndarray) -> np.ndarray:
    """int8 `[..., N, N]` sign(v_i - v_j) over the last axis of `v`."""
    return np.sign(v[..., :, None] - v[..., None, :]).astype(np.int8)


def _interval_dict(
    estimate: float, reps: np.ndarray | None, alpha: float, *, num_groups: int | None = None,
    min_groups: int = MIN_CI_GROUPS, jack: np.ndarray | None = None, method: str = "percentile",
) -> dict[str, Any]:
    """``{estimate, low, high}`` plus, for a bootstrapped statistic, ``n_boot``,
    ``n_boot_nan`` and ``nan_share``; ``reason`` says why an interval is withheld."""
    est = float(estimate)
    out: dict[str, Any] = {"estimate": est if math.isfinite(est) else None, "low": None, "high": None}
    if reps is None:
        return out
    r_all = np.asarray(reps, np.float64)
    r = r_all[np.isfinite(r_all)]
    out["n_boot"] = int(r_all.size)
    out["n_boot_nan"] = int(r_all.size - r.size)
    out["nan_share"] = out["n_boot_nan"] / max(r_all.size, 1)
    if num_groups is not None and num_groups < min_groups:
        out["reason"] = f"too few groups ({num_groups} < {min_groups})"
    elif out["nan_share"] > NAN_SHARE_MAX:
        out["reason"] = f"{out['nan_share']:.0%} of resamples undefined"
    elif r.size:
        if method == "bca":
            lo, hi = M.bca_quantiles(est, r, jack, alpha)
        else:
            levels = M.expanded_levels(num_groups, alpha) if method == "expanded" else (alpha / 2, 1 - alpha / 2)
            lo, hi = np.quantile(r, levels)
        out["low"], out["high"] = float(lo), float(hi)
    return out


def _docs_defined(name: str, pred_fn: np.ndarray, ctx: dict[str, Any], ok: np.ndarray) -> dict[str, int]:
    """How many test documents have a defined within-document metric (fewest over folds)."""
    base = name[: -len("_doc")]
    codes, g = ctx["codes"].codes, ctx["codes"].num_groups
    best = None
    for i in range(ctx["f"]):
        sel = (ctx["test"][i] > 0) & (ok > 0)
        if not sel.any():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            vals = np.asarray(M.per_group(base, np.nan_to_num(pred_fn[i]), ctx["human"], codes, sel, num_groups=g))
        n_docs = int(np.unique(codes[ctx["test"][i] > 0]).size)
        cand = {"docs_defined": int(np.isfinite(vals).sum()), "docs": n_docs}
        if best is None or cand["docs_defined"] - cand["docs"] < best["docs_defined"] - best["docs"]:
            best = cand
    return best or {"docs_defined": 0, "docs": 0}


def _stats_context(human, groups, test, k, lo, valid, labels=None) -> dict[str, Any]:
    """What `_score_stats` needs of a cell: human scores on the scale, groups, test masks."""
    test = np.asarray(test, bool)
    f, n = test.shape
    report_rows = np.flatnonzero(test.any(0))
    if report_rows.size == 0:
        raise ValueError(f"no test example in any fold for {labels or 'this cell'}")
    groups = np.asarray(groups)
    return dict(
        n=n, f=f, k=k, human=human, hrel=np.clip(human - lo, 0, k - 1),
        test=test.astype(np.float32), codes=M.encode_groups(groups), valid=np.asarray(valid, np.float32),
        report_rows=report_rows, report_codes=M.encode_groups(groups[report_rows]),
    )


def test_side_intervals(
    pred: np.ndarray,
    human: np.ndarray,
    groups: np.ndarray,
    splits: Splits,
    options: MethodOptions,
    *,
    base: np.ndarray | None = None,
) -> tuple[dict[str, dict], dict[str, dict]]:
    """The report's metrics and intervals for predictions already made, as `evaluate_cell`
    computes them for each method (the same code path).

    Args:
      pred: `[F, N]` (or `[N]`, shared by all folds) predictions, NaN where undefined.
      human: `[N]` human scores (on the prediction's scale).
      groups: `[N]` group ids.
      splits: dev/test masks `[F, N]`; only the test side enters.
      options: metrics, per_group, n_boot, alpha, seed, min_ci_groups (SDD is not computed).
      base: `[F, N]` or `[N]` predictions of a baseline for the paired difference
        ``delta_<select_metric>``, or None.

    Returns:
      ``(metrics, deltas)``: name -> ``{estimate, low, high, n_boot_nan, nan_share, reason?}``.
    """
    test = np.asarray(splits.test, bool)
    f, n = test.shape
    pred = np.broadcast_to(np.asarray(pred, np.float64), (f, n))
    base = None if base is None else np.broadcast_to(np.asarray(base, np.float64), (f, n))
    human = np.asarray(human, np.float64)
    ok = np.isfinite(pred).all(0).astype(np.float32)
    ctx = _stats_context(human, groups, test, 1, float(np.min(human)), np.ones(n))
    opts = dataclasses.replace(options, metrics=tuple(m for m in options.metrics if m not in ("sdd",)))
    return _score_stats(pred, base, None, ok, ctx, opts)


def _score_stats(
    pred_fn: np.ndarray,
    base_fn: np.ndarray | None,
    probs_fnk: np.ndarray | None,
    ok: np.ndarray,
    ctx: dict[str, Any],
    options: MethodOptions,
) -> tuple[dict[str, dict], dict[str, dict]]:
    """(metrics, deltas): name -> {estimate, low, high, ...} for one method read one way.

    The bootstrap describes the reported side only: it resamples whole groups among those with
    a test row in some fold (a fixed split: the test groups; k-fold: every group, each fold's
    test metric recomputed on the resampled groups with the folds' hyper-parameters held as
    chosen). Deltas use the same resamples as the metric (paired).
    """
    rows = ctx["report_rows"]
    codes = ctx["report_codes"]
    n, f, k = rows.size, ctx["f"], ctx["k"]
    has_probs = probs_fnk is not None
    has_delta = base_fn is not None
    ci_set = set(options.ci_metrics if options.ci_metrics is not None else options.metrics)
    # One statistic for every reading and method (SDD and the delta always computed, then
    # dropped where undefined): a cell's shape then compiles the bootstrap once, not per method.
    ci_names = _stat_names(options, True, True, [m for m in options.metrics if m in ci_set])
    point_names = _stat_names(options, True, False, [m for m in options.metrics if m not in ci_set])
    kendall = _needs_kendall(ci_names + point_names)
    pred_r = pred_fn[:, rows]
    pred_clean = np.nan_to_num(pred_r)  # NaN rows (parse failures) carry weight 0
    human = ctx["human"][rows]
    arrays = (
        jnp.asarray(pred_clean.T, jnp.float32),  # [n, F]
        jnp.asarray((pred_r if base_fn is None else base_fn[:, rows]).T, jnp.float32),
        jnp.asarray(human, jnp.float32),
        jnp.asarray(ctx["hrel"][rows], jnp.float32),
        jnp.asarray(np.zeros((n, f, k), np.float32) if probs_fnk is None else np.transpose(probs_fnk[:, rows], (1, 0, 2)), jnp.float32),
        jnp.asarray(ctx["test"][:, rows].T, jnp.float32),
        jnp.asarray(ok[rows], jnp.float32),
        jnp.asarray(ctx["valid"][rows], jnp.float32),
        jnp.asarray(codes.codes, jnp.int32),
        jnp.asarray(np.transpose(_signs(pred_clean), (1, 0, 2)) if kendall else np.zeros((n, f, 1), np.int8)),
        jnp.asarray(_signs(human) if kendall else np.zeros((n, 1), np.int8)),
    )
    out: dict[str, dict] = {}
    if ci_names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            est, reps = M.bootstrap_distribution(
                _make_stat(ci_names, codes.num_groups), arrays, codes.codes,
                n_boot=options.n_boot, seed=options.seed,
            )
            jack = None
            if options.ci_method == "bca":
                jack = np.asarray(M.jackknife_distribution(_make_stat(ci_names, codes.num_groups), arrays, codes.codes))
        est, reps = np.asarray(est), np.asarray(reps)
        for i, name in enumerate(ci_names):
            out[name] = _interval_dict(est[i], reps[:, i], options.alpha, num_groups=codes.num_groups,
                                       min_groups=options.min_ci_groups, jack=None if jack is None else jack[:, i],
                                       method=options.ci_method)
    if point_names:
        est = np.asarray(_point_stat(point_names, codes.num_groups)(*arrays))
        for i, name in enumerate(point_names):
            out[name] = _interval_dict(est[i], None, options.alpha)
    for name, iv in out.items():
        if name.endswith("_doc") and not name.startswith("delta_") and iv.get("estimate") is not None:
            iv.update(_docs_defined(name, pred_fn, ctx, ok))
    if not has_probs:
        out = {k_: v for k_, v in out.items() if k_ != "sdd"}
    deltas = {k_[len("delta_"):]: v for k_, v in out.items() if k_.startswith("delta_") and has_delta}
    metrics = {k_: v for k_, v in out.items() if not k_.startswith("delta_")}
    for m in options.metrics:  # undefined for this reading (e.g. SDD of a greedy score)
        metrics.setdefault(m, {"estimate": None, "low": None, "high": None})
    return metrics, deltas


# -- the cell -------------------------------------------------------------------------------------


def evaluate_cell(
    arrays: CellArrays,
    splits: Splits,
    options: MethodOptions,
    labels: Mapping[str, Any] | None = None,
    *,
    predictions: dict | None = None,
) -> CellReport:
    """Run every configured method on one cell.

    Args:
      arrays: the cell's arrays.
      splits: dev/test masks `[F, N]` (see `make_splits`).
      options: methods, grids, metrics, bootstrap settings.
      labels: identifying fields copied into every row (judge, task, aspect, ...).
      predictions: if a dict, filled with ``(method, score kind) -> [F, N]`` predictions of
        every row (what `jaxjudge.report.few_labels` builds on).

    Returns:
      `CellReport`. Each row holds the labels and ``scale``, ``method`` (variant name),
      ``score`` (``"expected@0.2"``, ``"greedy"``, ``"generate"``), ``metrics`` (name ->
      ``{"estimate", "low", "high", "n_boot_nan"}``, None where undefined; ``*_doc`` are
      per-document means; ``n_boot_nan`` counts resamples where the metric was undefined, which
      the interval leaves out), ``delta`` (the
      selection metric minus the vanilla judge's, same reading, paired interval),
      ``hparams`` (the chosen values per fold), ``dev_metric`` / ``test_metric`` (selection
      metric per fold), ``relative`` (relative improvement of the selection metric over the
      vanilla judge and over the greedy generation), ``n``, ``n_folds``, ``n_test``.
    """
    labels = dict(labels or {})
    scale = arrays.scale
    values = scale.values  # [K]
    k, n = scale.size, arrays.n
    dev, test = np.asarray(splits.dev, bool), np.asarray(splits.test, bool)
    if dev.ndim != 2 or dev.shape[1] != n or test.shape != dev.shape:
        raise ValueError(f"splits must be [F, N] with N={n}, got dev {dev.shape}, test {test.shape}")
    f = dev.shape[0]
    human = map_human(arrays.human, arrays.human_range, scale)
    codes = M.encode_groups(arrays.groups)
    valid = np.ones(n, bool) if arrays.valid is None else arrays.valid
    ctx = _stats_context(human, arrays.groups, test, k, scale.lo, valid, labels)
    logits = jnp.asarray(arrays.logprobs)
    selector, minimize = _selector(options, codes)
    methods = set(options.methods)
    rows: list[dict[str, Any]] = []
    aux: dict[str, Any] = {
        **labels, "scale": scale.name, "values": values.tolist(),
        # Human scores on the prompt's range, rounded to the nearest candidate (for figures).
        "human_counts": np.bincount(np.clip(np.rint((human - scale.lo) / scale.step), 0, k - 1).astype(int), minlength=k).tolist(),
        "priors": {}, "grids": {}, "distributions": {},
    }

    n_truncated = None if arrays.truncated is None else int(np.asarray(arrays.truncated, bool).sum())
    # Where prompts were cut, how many source tokens in all (None: the store predates the count).
    cut = {} if not n_truncated else {
        "n_tokens_cut": None if arrays.truncated_tokens is None else int(np.asarray(arrays.truncated_tokens).sum())}

    def base_row(method: str, kind: str) -> dict[str, Any]:
        return {**labels, "scale": scale.name, "method": method, "score": kind, "n": n, "n_folds": f,
                "n_test": int(test.any(0).sum()), "n_truncated": n_truncated, **cut}

    kinds = score_kinds(options)

    # The temperature convention: a reading at temperature T first tempers every input
    # distribution (the judge's, the content-free, random-number and assistant ones), so that
    # each prior is measured at T and each adjustment acts on the distribution that is scored;
    # the adjusted log-probabilities are then read as they are (no second temperature). The
    # greedy reading is at T = 1.
    def tau(kind_t) -> float:
        return 1.0 if kind_t[1] is None else float(kind_t[1])

    def tempered(kind_t) -> jax.Array:
        return jax.nn.log_softmax(logits / tau(kind_t), -1)  # [N, K]

    def vanilla(kind_t) -> jax.Array:
        # The vanilla judge read each way: every other method's baseline for deltas.
        return jnp.broadcast_to(tempered(kind_t), (f, n, k))

    def read(adj_fnk, kind_t):
        kind, t = kind_t
        if t is None:
            return np.asarray(greedy_score(adj_fnk, values)), None
        pred = np.asarray(expected_score(adj_fnk, values, 1.0))
        # SDD compares with integer human-score neighbours: defined for unit-step scales only.
        # (log-probabilities: SDD is computed from them, with no floor)
        probs = np.asarray(jax.nn.log_softmax(adj_fnk, axis=-1)) if scale.step == 1 else None
        return pred, probs

    base_pred = {kt[0]: read(vanilla(kt), kt)[0] for kt in kinds}
    dist_kind = "greedy" if options.greedy else kinds[0][0]
    ones = np.ones(n, np.float32)

    def selection_per_fold(pred_fn: np.ndarray, mask: np.ndarray) -> list[float | None]:
        out = []
        for i in range(f):
            sel = mask[i] & np.isfinite(pred_fn[i])
            x = np.nan_to_num(pred_fn[i])
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    if options.select_per_group:
                        v = M.grouped(options.select_metric, x, human, codes.codes, sel, num_groups=codes.num_groups)
                    else:
                        v = M.get_metric(options.select_metric)(x, human, sel)
                v = float(v)
            except ValueError:  # too few rows, or no document with a defined metric
                v = float("nan")
            out.append(v if math.isfinite(v) else None)
        return out

    def emit(method: str, adj_fnk, kind_t, hparams=None, dev_metric=None, test_metric=None):
        kind = kind_t[0]
        pred, probs = read(adj_fnk, kind_t)
        if predictions is not None:
            predictions[(method, kind)] = pred
        mets, deltas = _score_stats(pred, None if method == "vanilla" else base_pred[kind], probs, ones, ctx, options)
        row = base_row(method, kind)
        row.update(
            metrics=mets, delta=deltas or None, hparams=hparams or [{} for _ in range(f)],
            dev_metric=dev_metric if dev_metric is not None else selection_per_fold(pred, dev),
            test_metric=test_metric if test_metric is not None else selection_per_fold(pred, test),
        )
        rows.append(row)
        # Score distribution of this method: argmax over all examples, mean over folds, drawn
        # with the hyper-parameters chosen for the greedy reading (what a judge would output).
        if kind == dist_kind:
            top = np.asarray(jnp.argmax(adj_fnk, -1))  # [F, N]
            frac = np.mean([np.bincount(top[i], minlength=k) / n for i in range(f)], axis=0)
            aux["distributions"][method] = {
                "argmax_fraction": frac.tolist(),
                "mean_probs": np.asarray(jnp.mean(jax.nn.softmax(adj_fnk, -1), axis=(0, 1))).tolist(),
            }

    def tuned(method: str, adjust_fn, grid, data, kind_t, param_names):
        kind, t = kind_t
        res = grid_search(
            adjust_fn, grid, human, dev, test, selector, values=values, temperature=1.0,
            data=data, score="greedy" if t is None else "expected", minimize=minimize,
        )
        chosen = jax.tree.map(np.asarray, res.chosen)
        # Grid values are float32: round so that 0.1 reads 0.1 in the tables.
        hp = [{p: round(float(chosen[p][i]), 6) for p in param_names} for i in range(f)]
        adj = _adjust_per_fold(res.chosen, data, adjust_fn=adjust_fn)
        aux["grids"][f"{method}|{kind}"] = {
            "params": {p: [round(v, 6) for v in _to_list(grid[p])] for p in param_names},
            "dev": _mean_over_folds(res.dev), "test": _mean_over_folds(res.test),
        }
        dm = [None if not math.isfinite(v) else float(v) for v in np.asarray(res.dev_metric)]
        tm = [None if not math.isfinite(v) else float(v) for v in np.asarray(res.test_metric)]
        emit(method, adj, kind_t, hp, dm, tm)

    # -- fixed methods --
    if "vanilla" in methods:
        for kt in kinds:
            emit("vanilla", vanilla(kt), kt)
    # Parsed generations: the judge's greedy reply, and the contrastive (main - lambda *
    # assistant) greedy reply; validity is the parse rate.
    for gname, role, generated in (("generate", "generate", arrays.generated),
                                   ("contrastive_generate", "contrastive_generate", arrays.contrastive_generated)):
        if gname not in methods:
            continue
        if generated is None:
            raise ValueError(f"method {gname!r} needs parsed generations (role {role!r}) for {labels}")
        gen = np.broadcast_to(generated, (f, n))
        ok = np.isfinite(generated).astype(np.float32)
        mets, _ = _score_stats(gen, None, None, ok, {**ctx, "valid": ok}, options)
        row = base_row(gname, "generate")
        row.update(metrics=mets, delta=None, hparams=[{} for _ in range(f)],
                   dev_metric=selection_per_fold(gen, dev), test_metric=selection_per_fold(gen, test),
                   parse_failures=int((~np.isfinite(generated)).sum()),
                   n_distinct_parsed=len({float(v) for v in generated[np.isfinite(generated)]}),
                   # The fewest distinct parsed scores on any fold's test side: 1 there leaves
                   # that fold's correlation (and so the mean over folds) undefined.
                   n_distinct_parsed_test=min(
                       len({float(v) for v in generated[t & np.isfinite(generated)]}) for t in test))
        rows.append(row)
        counts = np.bincount(
            np.clip(np.rint((generated[np.isfinite(generated)] - scale.lo) / scale.step), 0, k - 1).astype(int),
            minlength=k,
        )
        aux["distributions"][gname] = {"argmax_fraction": (counts / n).tolist(), "mean_probs": None}
    if "contextual" in methods:
        if arrays.content_free is None:
            raise ValueError(f"method 'contextual' needs content-free arrays (role 'content_free') for {labels}")
        for kt in kinds:
            cf = jnp.asarray(arrays.content_free) / tau(kt)  # the content-free prior at T
            emit("contextual", jnp.broadcast_to(contextual_calibration(tempered(kt), cf), (f, n, k)), kt)
    if "batch" in methods:
        for kt in kinds:
            emit("batch", jnp.stack([batch_calibration(tempered(kt), jnp.asarray(test[i])) for i in range(f)]), kt)
    if "distribution" in methods:
        # p_T(y) * q(y) / pbar_T(y): q (Beta fit on dev labels only) enters once, the judge's
        # marginal pbar is measured on dev at the reading's temperature.
        qs = [human_prior(jnp.asarray(human, jnp.float32), values, jnp.asarray(dev[i])) for i in range(f)]
        hps = [{"q": [round(float(x), 6) for x in np.asarray(q)]} for q in qs]
        for kt in kinds:
            lt = tempered(kt)
            adj = jnp.stack([rectify(lt, distribution_correction(lt, qs[i], jnp.asarray(dev[i])), 1.0) for i in range(f)])
            emit("distribution", adj, kt, hparams=hps)

    # -- tuned methods --
    for variant in ("R", "T"):
        family = f"deb_{variant.lower()}"
        if family not in methods:
            continue
        if variant not in arrays.random:
            raise ValueError(f"method {family!r} needs random-number arrays (role 'random_{variant.lower()}') for {labels}")
        rp = arrays.random[variant]
        for tp in options.deb_tp:
            top = jnp.asarray(rp.top(tp))  # [Tp, K]
            aux["priors"].setdefault(variant, {})[f"tp{tp}"] = np.asarray(latent_prior(top)).tolist()  # at T = 1
            grids = [("", options.lambdas)]
            if options.lambdas_extended is not None:
                grids.append(("_ext", options.lambdas_extended))
            for suffix, lams in grids:
                for kt in kinds:
                    # l = the judge's log-probabilities at T; B from P_random measured at T;
                    # lambda multiplies B in log-probability units, whatever T is.
                    data = {"logits": tempered(kt), "correction": prior_correction(latent_prior(top / tau(kt)))}
                    tuned(f"{family}_tp{tp}{suffix}", rectify_adjust, lambda_grid(lams), data, kt, ("lam",))

    if methods & {"contrastive", "contrastive_deb_t"}:
        if arrays.assistant is None:
            raise ValueError(f"contrastive methods need the assistant's score arrays for {labels}")
        tname = options.contrastive_temperature
        asst = jnp.asarray(arrays.assistant)

        def cdata_at(kt):
            # Both models tempered at the reading's T; the grid's own temperature then
            # normalises one model against the other.
            return {"main": logits / tau(kt), "asst": asst / tau(kt)}
        if "contrastive" in methods:
            grid_sets = [("contrastive", options.contrastive_lams, options.contrastive_temps)]
            if options.contrastive_fine:
                grid_sets.append(("contrastive_fine", options.contrastive_lams_fine, options.contrastive_temps_fine))
            for name, lams, temps in grid_sets:
                grid = lambda_temperature_grid(lams, temps, name=tname)
                for kt in kinds:
                    tuned(name, contrastive_adjust, grid, cdata_at(kt), kt, ("lam", tname))
        if "contrastive_deb_t" in methods:
            if "T" not in arrays.random:
                raise ValueError(f"method 'contrastive_deb_t' needs the judge's random_t arrays for {labels}")
            rp = arrays.random["T"]
            arp = arrays.assistant_random.get("T")
            for tp in options.deb_tp:
                # Perplexity is ranked under the main judge: the combination has no sequence NLL.
                idx = rp.top_indices(tp)
                if arp is not None and arp.logprobs.shape != rp.logprobs.shape:
                    raise ValueError(
                        f"assistant random_t arrays {arp.logprobs.shape} do not match the judge's {rp.logprobs.shape}"
                    )
                grid = product_grid(lam=options.contrastive_lams, **{tname: options.contrastive_temps}, lam_d=options.lambdas)
                for kt in kinds:
                    cdata = dict(cdata_at(kt), rand_main=jnp.asarray(rp.logprobs[idx]) / tau(kt))
                    if arp is not None:
                        cdata["rand_asst"] = jnp.asarray(arp.logprobs[idx]) / tau(kt)
                    tuned(f"contrastive_deb_t_tp{tp}", _combined_adjust, grid, cdata, kt, ("lam", tname, "lam_d"))

    # Rows in the order the methods were configured (variants of a family together).
    order = {m: i for i, m in enumerate(options.methods)}

    def family(method: str) -> int:
        for m in sorted(order, key=len, reverse=True):
            if method == m or method.startswith(m + "_"):
                return order[m]
        return len(order)

    rows.sort(key=lambda r: family(r["method"]))
    _add_relative(rows, options)
    return CellReport(rows=rows, aux=aux)


def _add_relative(rows: list[dict[str, Any]], options: MethodOptions) -> None:
    """Relative improvement of the selection metric over the vanilla judge read the same way
    and over the parsed greedy generation: ``(m - b) / |b|`` (point estimates; the paired
    interval of the difference from vanilla is in ``delta``)."""
    name = f"{options.select_metric}_doc" if options.select_per_group else options.select_metric

    def est(r):
        return None if r is None else (r["metrics"].get(name) or {}).get("estimate")

    gen = next((r for r in rows if r["method"] == "generate"), None)
    for r in rows:
        van = next((v for v in rows if v["method"] == "vanilla" and v["score"] == r["score"]), None)
        rel = {}
        for key, base in (("vs_vanilla", van), ("vs_generate", gen)):
            m, b = est(r), est(base)
            ok = base is not None and base is not r and m is not None and b not in (None, 0.0)
            rel[key] = (m - b) / abs(b) if ok else None
        r["relative"] = {"metric": name, **rel}
