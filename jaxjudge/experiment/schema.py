"""Experiment configs: what to extract and how to report it, as typed Python data.

An experiment is a Python file with a ``get_config(arg=None)`` function returning an
`ExperimentConfig` (big_vision style: a sweep is data, not a bash loop). The grid it describes
is judges x tasks x aspects x score scales; every cell of that grid gets the configured
methods, each with its hyper-parameters chosen on development data.

Every field is checked on construction against its annotation and declared bounds
(`jaxjudge.experiment.typed`); a `ConfigError` names the field. `config_from_dict` and
`with_overrides` refuse unknown field names, suggesting the closest one.

A config's parts, `ModelSpec`, `TaskSpec` and `SubsetSpec`, with `resolve_model_path` (the
symbolic model and data paths that keep configs portable) and `engine_options`, live in
`jaxjudge.experiment.specs`; this module re-exports them.

Human-score mapping (used for MSE, SDD and the Beta fit of distribution calibration): a human
score s on the task's own range ``[a, b]`` (SummEval 1-5, STS-B 0-5, SemRel 0-1) is mapped
linearly onto the prompt's range ``[lo, hi]``: ``lo + (s - a) / (b - a) * (hi - lo)``. For
SummEval on 1-5 this is the identity, on 0-4 it is ``s - 1``. Correlations do not change.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jaxjudge.experiment.confirmation import Confirmation
from jaxjudge.experiment.endpoint import Endpoint
from jaxjudge.experiment.hardware import check_mesh
from jaxjudge.jobs.spec import model_named, partner_of, task_named
from jaxjudge.store.location import LocationError
from jaxjudge.store.location import check_location as _check_location
from jaxjudge.experiment.specs import (
    ModelSpec,
    SubsetSpec,
    TaskSpec,
    _check_engine_options,
    _check_name,
    engine_options,
    resolve_model_path,
)
from jaxjudge.experiment.typed import (
    ConfigError,
    Typed,
    build_dataclass,
    choose,
    coerce,
    from_dict,
    opt,
    replace_fields,
    to_dict,
)
from jaxjudge.prompts import ScoreScale
from jaxjudge.report.grids import (
    CONTRASTIVE_LAMS,
    CONTRASTIVE_TEMPS,
    LAMBDA_GRID,
    LAMBDA_GRID_EXTENDED,
    METHODS,
    METRICS,
    SELECT_METRICS,
    method_variants,
)
from jaxjudge.report.methods import METHODS as METHOD_REGISTRY, PARSED, REFERENCE

__all__ = [
    "ConfigError",
    "Endpoint",
    "ModelSpec",
    "SubsetSpec",
    "TaskSpec",
    "ExperimentConfig",
    "check_location",
    "check_run_name",
    "config_from_dict",
    "config_to_dict",
    "engine_options",
    "resolve_model_path",
    "with_overrides",
]

Method = Literal[METHODS]
Metric = Literal[METRICS]


def check_run_name(where: str, run: Any) -> str:
    """A run name is one folder name: letters, digits, '-', '_', '.', not starting with '.'."""
    coerce(where, run, str)
    if run.startswith(".") or not all(c.isalnum() or c in "-_." for c in run):
        raise ConfigError(f"{where}: {run!r} may only hold letters, digits, '-', '_', '.' and must not start with '.' "
                          "(a run is one folder under the results root)")
    return run


@dataclass(frozen=True)
class ExperimentConfig(Typed):
    """A validated experiment: a grid of cells, the methods run on each, and how to report.

    Attributes:
      name: experiment name; results go to ``<results_root>/<name>/<run>/``.
      description: one paragraph for the run's README table header.
      models: every model the experiment needs (judges and assistants).
      judges: names of the models scored as the main judge (None: every model that is not
        only an assistant; see `judge_names`).
      pairs: ``(main, assistant)`` model names for contrastive decoding (one tokenizer where
        contrastive generation runs; the score distributions are matched by candidate text).
      control_pairs: ``(main, other assistant)`` model names for ``contrastive_other``:
        contrastive decoding against an assistant of another family, a mechanism control; the
        two judges' score candidates are matched by their text, not their token ids.
      tasks: the data sets.
      scales: score ranges, e.g. ``("0-4", "1-5", "2-6", "3-7")``.
      methods: method families from `jaxjudge.report.grids.METHODS`.
      temperatures: temperatures of the expected score (0.2 as in the random-number paper, and
        1.0, the plain expectation).
      greedy: also report the greedy (argmax) score of each method.
      deb_tp: numbers Tp of least-perplexity random-number prompts averaged for the prior.
      lambdas: lambda grid of Deb-R / Deb-T (0.1 .. 1.0).
      lambdas_extended: a second, wider grid reported as separate ``*_ext`` variants (0.1 .. 10),
        or None.
      contrastive_lams, contrastive_temps: the contrastive-decoding grid (lambda x main-model
        temperature); ``contrastive_fine`` adds a finer grid as the ``contrastive_fine`` variant.
      contrastive_temperature: which logits the temperature divides, ``"t_main"`` (the
        public code) or ``"t_asst"``.
      contrastive_generate_lam, contrastive_generate_t_main, contrastive_generate_t_asst,
        contrastive_generate_alpha: the fixed settings of the ``contrastive_generate`` method
        (greedy generation decoding ``log_softmax(main / t_main) - lam * log_softmax(assistant
        / t_asst)`` over the full vocabulary among the tokens whose main-model probability is
        at least ``alpha`` times the largest, `jaxjudge.engine.contrastive_generate`); not
        searched, since each setting costs a generation pass. Defaults lambda 0.5, both
        temperatures 1 and alpha 0.1 (the contrastive-decoding paper's plausibility
        threshold).
      select_metric: metric maximised (or minimised, for errors) on dev.
      select_per_group: select on the per-document metric instead of the pooled one.
      metrics: metrics reported on test (each with a grouped bootstrap interval).
      ci_metrics: metrics that get an interval (default: all of ``metrics``); Kendall's tau is
        O(N^2) per resample, so large CPU runs may leave it out.
      n_boot: bootstrap resamples; alpha: 1 - confidence level.
      min_ci_groups: fewest reported (test) groups for which an interval is printed; below it
        the cell shows the estimate and the reason (see `jaxjudge.metrics.intervals.MIN_CI_GROUPS`).
      ci_method: ``"expanded"`` (the percentile interval at levels widened for the number of
        groups, `jaxjudge.metrics.expanded_levels`), ``"percentile"`` or ``"bca"`` (bias-
        corrected and accelerated, with a leave-one-group-out jackknife). The expanded one is
        the default: it is the one `experiments/coverage.py` measured at 93-97% coverage
        from 20 groups up, where the percentile interval gave about 90%.
      seed: seed of the bootstrap (folds have their own ``TaskSpec.fold_seed``).
      generation_max_new_tokens: new tokens of the greedy generation (``generate`` method).
      prompt_style: ``"chat"`` (the model's chat template) or ``"raw"``.
      store_root: where extraction stores live; results_root: where runs are written.
      run: run name (default: set by the CLI from the date).
      changes: what changed since the run's previous committed version (one line each),
        printed in its notes.
      primary: the primary endpoint (`Endpoint`), printed first and read unadjusted; every
        other comparison is Holm-adjusted. None: every comparison is secondary.
      confirmation: a confirmatory run's registered plan beyond ``primary`` (`Confirmation`:
        secondary endpoints, the runs registered together, the verdict rule, the power analysis);
        part of the analysis plan `jaxjudge extract` registers before the first forward pass.
      comparisons: extra ``(method, other method)`` pairs compared over ranges with paired
        intervals, beside the defaults (every method against vanilla, its matched baseline and
        the calibration baseline with the best dev metric).
      nested_rows: tuned rows (besides the primary endpoint's own) whose interval also redoes the
        dev-side choice in every resample, at the primary's reading: a comparison between two
        such rows (or one and the vanilla judge) then carries a nested interval beside the
        conditional one, which a claim can read (`jaxjudge.report.claims.Claim.nested`). Needs a
        primary endpoint with ``selection="nested"``.
      dtype: the judges' parameter and compute dtype, ``"float32"`` or ``"bfloat16"`` (part of
        every store's key: stores of another dtype are not reused).
      attention: the judges' attention, ``"xla"`` (XLA's dense masked attention, any backend) or
        ``"splash"`` (JAX's Pallas splash kernel for a TPU, `jaxjudge.models.Judge.use_attention`;
        refused off a TPU). Not part of a store's key: it changes numbers by float rounding only.
      mesh: ``"auto"`` (the default): the mesh planner's choice (`jaxjudge.models.mesh_plan`):
        on accelerators the smallest ``model`` axis with which the judges' parameters, KV cache
        and activations fit every chip's usable memory with 10% to spare, every other chip on
        ``data`` (``data`` across slices, ``model`` inside one); on CPU devices, no mesh (one
        device per process: CPU devices share the host's RAM and cores). Or device mesh axis
        sizes, e.g. ``{"data": 2, "model": 4}`` (rows over ``data``, heads over ``model``); one
        axis may be -1 (the devices the others leave); None: no mesh, one device. Checked
        against the devices before any model loads (`jaxjudge.experiment.mesh_for`); under
        several processes, sizes that multiply to all of their devices make one mesh over them
        (one SPMD program), see `jaxjudge.experiment.distributed`.
      compile_cache: folder of the persistent XLA compilation cache (None: the command line's
        default, ``$JAXJUDGE_XLA_CACHE`` or ``~/.cache/jaxjudge/xla``).
      claim_lease: seconds after which a chunk claimed by another worker sharing the store
        root, and silent (no heartbeat) that long, is taken over (a dead process's claim on
        the same host is taken over at once): `jaxjudge extract` started several times on one
        store, on one machine or on several sharing a filesystem, splits every job's chunks.
      engine: the engine's options (`jaxjudge.engine.EngineOptions` fields: batch size,
        context length, ...), each checked against its field's type and bounds.
      method_options: options of the method families that declare them, under the family's
        name (``{'batch_strength': {'strengths': (0.0, 0.5, 1.0)}}``), each checked against the
        family's options class (`jaxjudge.report.methods.Method.options`); unset fields keep
        the class's defaults.
    """

    name: str
    models: tuple[ModelSpec, ...]
    tasks: tuple[TaskSpec, ...]
    scales: tuple[str, ...] = ("0-4", "1-5", "2-6", "3-7")
    methods: tuple[Method, ...] = (REFERENCE,)
    description: str = opt("", empty=True)
    judges: tuple[str, ...] | None = None
    pairs: tuple[tuple[str, str], ...] = opt((), empty=True)
    control_pairs: tuple[tuple[str, str], ...] = opt((), empty=True)
    temperatures: tuple[float, ...] = opt((0.2, 1.0), gt=0)
    greedy: bool = True
    deb_tp: tuple[int, ...] = opt((10, 100), min=1)
    lambdas: tuple[float, ...] = opt(LAMBDA_GRID, min=0)
    lambdas_extended: tuple[float, ...] | None = opt(LAMBDA_GRID_EXTENDED, min=0)
    contrastive_lams: tuple[float, ...] = opt(CONTRASTIVE_LAMS, min=0)
    contrastive_temps: tuple[float, ...] = opt(CONTRASTIVE_TEMPS, gt=0)
    contrastive_fine: bool = False
    contrastive_temperature: Literal["t_main", "t_asst"] = "t_main"
    contrastive_generate_lam: float = opt(0.5, min=0)
    contrastive_generate_t_main: float = opt(1.0, gt=0)
    contrastive_generate_t_asst: float = opt(1.0, gt=0)
    contrastive_generate_alpha: float = opt(0.1, min=0, max=1)
    select_metric: Literal[SELECT_METRICS] = "spearman"
    select_per_group: bool = False
    metrics: tuple[Metric, ...] = METRICS
    ci_metrics: tuple[str, ...] | None = opt(None, empty=True)
    n_boot: int = opt(1000, min=1)
    alpha: float = opt(0.05, gt=0, lt=1)
    min_ci_groups: int = opt(10, min=2)
    ci_method: Literal["expanded", "percentile", "bca"] = "expanded"
    seed: int = opt(0, min=0)
    generation_max_new_tokens: int = opt(24, min=1)
    prompt_style: Literal["chat", "raw"] = "chat"
    store_root: str = "stores"
    results_root: str = "results"
    run: str | None = None
    changes: tuple[str, ...] = opt((), empty=True)
    primary: Endpoint | None = None
    confirmation: Confirmation | None = None
    comparisons: tuple[tuple[str, str], ...] = opt((), empty=True)
    nested_rows: tuple[str, ...] = opt((), empty=True)
    dtype: Literal["float32", "bfloat16"] = "float32"
    attention: Literal["xla", "splash"] = "xla"
    mesh: Literal["auto"] | Mapping[str, int] | None = "auto"
    compile_cache: str | None = None
    claim_lease: float = opt(120.0, gt=0)
    engine: Mapping[str, Any] = opt(factory=dict)
    method_options: Mapping[str, Mapping[str, Any]] = opt(factory=dict)

    def check(self) -> None:
        w = "ExperimentConfig"
        _check_name(f"{w}.name", self.name)
        names = [m.name for m in self.models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"{w}.models: duplicate model name {dup[0]!r}")
        for field in ("pairs", "control_pairs"):
            for i, pair in enumerate(getattr(self, field)):
                for name in pair:
                    choose(f"{w}.{field}[{i}]", name, names)
                if pair[0] == pair[1]:
                    raise ConfigError(f"{w}.{field}[{i}]: main and assistant are the same model {pair[0]!r}")
        for i, j in enumerate(self.judges or ()):
            if j not in names:
                raise ConfigError(f"{w}.judges[{i}]: model {j!r} is not in models {names}")
        seen = [t.task for t in self.tasks]
        dup = sorted({t for t in seen if seen.count(t) > 1})
        if dup:
            raise ConfigError(f"{w}.tasks: task {dup[0]!r} appears twice; list all its aspects in one TaskSpec")
        for i, s in enumerate(self.scales):
            try:
                ScoreScale.parse(s)
            except ValueError as e:
                raise ConfigError(f"{w}.scales[{i}]: {s!r}: {e}") from None
        if len(set(self.scales)) != len(self.scales):
            raise ConfigError(f"{w}.scales: duplicate scale in {list(self.scales)}")
        needs_pair = [m for m in self.methods if METHOD_REGISTRY[m].needs_assistant]
        if needs_pair and not self.pairs:
            raise ConfigError(f"{w}.pairs: methods {needs_pair} need at least one (main, assistant) pair")
        needs_control = [m for m in self.methods if METHOD_REGISTRY[m].needs_control]
        if needs_control and not self.control_pairs:
            raise ConfigError(f"{w}.control_pairs: methods {needs_control} need at least one (main, other "
                              "assistant) pair")
        lonely = [j for j in self.judge_names if j not in {m for m, _ in self.pairs}]
        if needs_pair and lonely and len(needs_pair) == len(self.methods):
            raise ConfigError(f"{w}.judges: judges {lonely} have no assistant in pairs")
        if self.ci_metrics is None:  # a derived default, recorded as resolved
            object.__setattr__(self, "ci_metrics", self.metrics)
        for i, m in enumerate(self.ci_metrics):
            choose(f"{w}.ci_metrics[{i}]", m, self.metrics)
        if self.run is not None:
            check_run_name(f"{w}.run", self.run)
        for field in ("store_root", "results_root", "compile_cache"):
            check_location(f"{w}.{field}", getattr(self, field))
        for i, pair in enumerate(self.comparisons):
            for name in pair:
                self.check_row_name(f"{w}.comparisons[{i}]", name)
        for i, name in enumerate(self.nested_rows):
            self.check_row_name(f"{w}.nested_rows[{i}]", name)
        if self.nested_rows and (self.primary is None or self.primary.selection != "nested"):
            raise ConfigError(f"{w}.nested_rows: needs a primary endpoint with selection 'nested' (its reading is "
                              "the one the rows are bootstrapped at)")
        if self.primary is not None:
            self.check_row_name(f"{w}.primary.method", self.primary.method)
            if self.primary.versus is not None:
                self.check_row_name(f"{w}.primary.versus", self.primary.versus)
            choose(f"{w}.primary.score", self.primary.score, self.readings())
            if self.primary.statistic not in ("mean", "spread", "relative"):
                choose(f"{w}.primary.statistic", self.primary.statistic, self.scales)
            if self.primary.selection == "nested" and self.ci_method == "bca":
                raise ConfigError(f"{w}.primary.selection: 'nested' needs ci_method 'expanded' or 'percentile' "
                                  "(bca needs a jackknife the nested bootstrap does not compute)")
        for i, e in enumerate(self.confirmation.secondary if self.confirmation else ()):
            for field in ("method", "versus"):
                if getattr(e, field) is not None:
                    self.check_row_name(f"{w}.confirmation.secondary[{i}].{field}", getattr(e, field))
            choose(f"{w}.confirmation.secondary[{i}].score", e.score, self.readings())
        _check_engine_options(f"{w}.engine", self.engine)
        self.family_options()  # checks method_options
        if isinstance(self.mesh, Mapping):
            check_mesh(f"{w}.mesh", self.mesh)

    # -- lookups ----------------------------------------------------------------------------

    def readings(self) -> tuple[str, ...]:
        """The score readings of the report's rows (``expected@T``, ``greedy``, ``generate``)."""
        out = tuple(f"expected@{t:g}" for t in self.temperatures)
        out += ("greedy",) * self.greedy
        if any(m in PARSED for m in self.methods):
            out += ("generate",)
        return out

    def family_options(self) -> dict[str, Any]:
        """The options of every configured family that declares them (`method_options`, over
        the options class's defaults). Raises ConfigError naming the entry of
        ``method_options`` that is no configured family with options, or a bad field."""
        w = "ExperimentConfig.method_options"
        with_options = [m for m in self.methods if METHOD_REGISTRY[m].options is not None]
        for name in self.method_options:
            if name not in with_options:
                close = difflib.get_close_matches(name, with_options, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"{w}: {name!r} is no configured method with options {with_options}{hint}")
        return {m: build_dataclass(METHOD_REGISTRY[m].options, self.method_options.get(m, {}), f"{w}[{m!r}]")
                for m in with_options}

    def check_row_name(self, where: str, name: str) -> None:
        """Refuse a row (method variant) name no configured method family produces."""
        rows = method_variants(self)
        if name not in rows:
            close = difflib.get_close_matches(name, rows, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where}: {name!r} is no row of the configured methods {rows}{hint}")

    @property
    def judge_names(self) -> tuple[str, ...]:
        """The main judges: ``judges`` if given, else every model that is not only an assistant."""
        if self.judges is not None:
            return tuple(self.judges)
        assistants_only = {a for _, a in (*self.pairs, *self.control_pairs)} - {m for m, _ in self.pairs}
        return tuple(m.name for m in self.models if m.name not in assistants_only)

    def model(self, name: str) -> ModelSpec:
        return model_named(self.models, name, self.name, ConfigError)

    def assistant_of(self, judge: str) -> str | None:
        return partner_of(self.pairs, judge)

    def control_of(self, judge: str) -> str | None:
        """The judge's other-family assistant in ``control_pairs`` (None if it has none)."""
        return partner_of(self.control_pairs, judge)

    def task(self, name: str) -> TaskSpec:
        return task_named(self.tasks, name, self.name, ConfigError)


def config_from_dict(d: Mapping[str, Any]) -> ExperimentConfig:
    """Build a config from a plain dict; an unknown field raises `ConfigError` naming it."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"config must be a dict, got {type(d).__name__}")
    return from_dict(ExperimentConfig, d)


def check_location(name: str, value: str | None) -> None:
    """A folder the run reads or writes is a local (or mounted) path or ``gs://bucket/prefix``
    (with the ``gcs`` extra installed; `jaxjudge.store.location`). Any other scheme, one whose
    libraries are missing, or a typo such as ``gs:/bucket`` is refused naming the field, never
    taken for a local folder called ``gs:``."""
    try:
        _check_location(name, value)
    except LocationError as e:
        raise ConfigError(str(e)) from None


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """JSON-able dict of the config (tuples as lists); `config_from_dict` inverts it."""
    return to_dict(cfg)


def with_overrides(cfg: ExperimentConfig, overrides: Sequence[str] | Mapping[str, Any]) -> ExperimentConfig:
    """A copy of ``cfg`` with top-level fields replaced (e.g. from the command line).

    Args:
      cfg: the config.
      overrides: ``["n_boot=200", "scales=1-5,2-6", "engine={'batch_size': 4}"]`` (each value
        read as its field's annotation, `jaxjudge.experiment.typed.parse_text`), or a dict.

    Raises:
      ConfigError: an unknown field (named, with the closest known one) or a bad value.
    """
    changes = replace_fields(cfg, overrides)
    # A derived field follows its source: ci_metrics defaults to metrics, so overriding metrics
    # alone moves ci_metrics with it unless the config chose a proper subset of its own.
    if "metrics" in changes and "ci_metrics" not in changes and tuple(cfg.ci_metrics) == tuple(cfg.metrics):
        changes["ci_metrics"] = None
    return dataclasses.replace(cfg, **changes)
