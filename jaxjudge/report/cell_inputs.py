"""The inputs of one evaluation cell: its arrays, the options of its methods, its dev/test split.

A *cell* is one (judge, task, aspect, score scale). Its inputs are the engine's arrays (the
judge's candidate log-probabilities `[N, K]`, validity, optional greedy generations, the
random-number and content-free arrays, an assistant model's arrays) plus the human scores, the
group (source document) of each example and a dev/test split with F folds
(`jaxjudge.report.cell.evaluate_cell` runs the methods on it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxjudge.debias import least_perplexity
from jaxjudge.metrics.intervals import MIN_CI_GROUPS
from jaxjudge.prompts import ScoreScale
from jaxjudge.select import Splits, fixed_split, kfold_splits

__all__ = ["CellArrays", "CellReport", "MethodOptions", "RandomPrior", "make_splits", "score_kinds"]


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
      control: `[N, K]` the other-family assistant's log-probabilities (``control_pairs``;
        candidates matched by their text), or None.
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
    control: np.ndarray | None = None  # [N, K] the other-family assistant's (``control_pairs``)
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
        for name, arr in (("content_free", self.content_free), ("assistant", self.assistant),
                          ("control", self.control)):
            if arr is not None:
                arr = np.asarray(arr, np.float32)
                want = (arr.shape[0], k) if name == "content_free" else (n, k)
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
    per-document (summary-level) metrics. ``nested`` also gives tuned rows the selection
    metric's interval with the selection redone inside each resample
    (`jaxjudge.select.nested_bootstrap`): True for every tuned row, or a tuple of row names
    (the pipeline asks for the primary endpoint's rows); ``nested_scores`` limits it to those
    readings (None: every reading); a fixed row named there (not the reference) gets it too, its
    predictions scored on the same resamples. ``margins``: the registered margins of a confirmatory
    plan; each interval over ranges with a p-value then also gets ``p_margin`` (`jaxjudge.report.ranges`).
    ``family_options`` holds ``(family, options)`` pairs: the
    options of the families that declare them (`jaxjudge.report.methods.Method.options`), as
    the config's ``method_options`` set them; `family` reads them.
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
    nested: bool | tuple[str, ...] = False
    nested_scores: tuple[str, ...] | None = None
    margins: tuple[float, ...] = ()
    family_options: tuple[tuple[str, Any], ...] = ()

    def family(self, name: str, cls: type) -> Any:
        """The options of method family ``name``: the configured ones, else ``cls()`` (its
        options class's defaults)."""
        return dict(self.family_options).get(name) or cls()

    def nested_for(self, row: str, score: str) -> bool:
        """Whether a tuned row read at ``score`` gets the nested interval."""
        if self.nested is False or (self.nested_scores is not None and score not in self.nested_scores):
            return False
        return self.nested is True or row in self.nested

    @classmethod
    def from_config(cls, cfg, task) -> MethodOptions:
        """Options of `ExperimentConfig` ``cfg`` for `TaskSpec` ``task`` (the fine contrastive
        grids are the class defaults: the config does not set them)."""
        return cls(
            methods=tuple(cfg.methods), temperatures=tuple(cfg.temperatures), greedy=cfg.greedy,
            deb_tp=tuple(cfg.deb_tp), lambdas=tuple(cfg.lambdas),
            lambdas_extended=None if cfg.lambdas_extended is None else tuple(cfg.lambdas_extended),
            contrastive_lams=tuple(cfg.contrastive_lams), contrastive_temps=tuple(cfg.contrastive_temps),
            contrastive_fine=cfg.contrastive_fine, contrastive_temperature=cfg.contrastive_temperature,
            select_metric=cfg.select_metric, select_per_group=cfg.select_per_group and task.per_group,
            metrics=tuple(cfg.metrics), ci_metrics=tuple(cfg.ci_metrics), per_group=bool(task.per_group),
            n_boot=cfg.n_boot, alpha=cfg.alpha, seed=cfg.seed, min_ci_groups=cfg.min_ci_groups,
            ci_method=cfg.ci_method, family_options=tuple(cfg.family_options().items()),
        )


@dataclass
class CellReport:
    """Result of `evaluate_cell`.

    Attributes:
      rows: one JSON-able dict per (method variant, score kind) (see `evaluate_cell`).
      aux: JSON-able extras for figures: score distributions, random-number priors, and the
        dev/test metric over each tuned method's grid.
      replicates: ``(method, score reading) -> [B]`` bootstrap replicates of each row's
        selection metric (not saved: `jaxjudge.report.ranges` combines them across cells).
      resample_key: identifies the cell's resamples (`jaxjudge.report.cell_stats.resample_key`).
      num_groups: groups the bootstrap resamples (the reported ones).
      nested: ``(method, score reading) -> [B]`` replicates of the selection metric with the
        dev-side choice redone in each resample, for the rows `MethodOptions.nested` names and
        the vanilla judge read the same way, on the same resamples as ``replicates`` (not saved).
    """

    rows: list[dict[str, Any]]
    aux: dict[str, Any]
    replicates: dict[tuple[str, str], Any] = field(default_factory=dict)
    nested: dict[tuple[str, str], Any] = field(default_factory=dict)
    resample_key: str = ""
    num_groups: int = 0


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

