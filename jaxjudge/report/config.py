"""Experiment configs: what to extract and how to report it, as validated Python data.

An experiment is a Python file with a ``get_config(arg=None)`` function returning an
`ExperimentConfig` (big_vision style: a sweep is data, not a bash loop). The grid it describes
is judges x tasks x aspects x score scales; every cell of that grid gets the configured
methods, each with its hyper-parameters chosen on development data.

Validation happens in three places, all before any forward pass:

* construction: every field is type- and value-checked (`ConfigError` names the field), and
  `config_from_dict` / `with_overrides` refuse unknown field names, suggesting the closest one;
* `validate_config(cfg)`: the model files, data files and split files exist, the judges and
  assistant pairs name configured models, each (task, aspect) has a template;
* `check_tokenizer(cfg, model, tokenizer)`: a hook the CLI calls after loading only a model's
  tokenizer; every scale's score candidates must have a token sequence of their own after the
  prompt, and distinct candidates must tokenise differently.

Symbolic paths keep configs portable (no machine-specific paths in committed files):

* model ``path``: ``"default"`` is the embedded SmolLM2 judge (`jaxjudge.models.gguf.
  default_model_path`), ``"gguf:<file>"`` a file in ``$JAXJUDGE_GGUF_DIR`` (default
  ``~/.cache/jaxjudge/gguf``, filled by ``../shared/models/get_models.sh``), anything else a
  path (``~`` expanded).
* task ``data``: ``"embedded"`` is the SummEval subset shipped in the package (4 documents),
  ``"shared"`` the task's folder under the shared data directory (``$JAXJUDGE_DATA_DIR``, else
  ``../shared/data`` seen from the working directory or from the repository), anything else a
  folder path.

Human-score mapping (used for MSE, SDD and the Beta fit of distribution calibration): a human
score s on the task's own range ``[a, b]`` (SummEval 1-5, STS-B 0-5, SemRel 0-1) is mapped
linearly onto the prompt's range ``[lo, hi]``: ``lo + (s - a) / (b - a) * (hi - lo)``. For
SummEval on 1-5 this is the identity, on 0-4 it is ``s - 1``. Correlations do not change.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ConfigError",
    "ModelSpec",
    "SubsetSpec",
    "TaskSpec",
    "ExperimentConfig",
    "Cell",
    "ExtractionJob",
    "TASKS",
    "METHODS",
    "SMOLLM2",
    "QWEN_05B",
    "GEMMA3_270M",
    "QWEN_15B",
    "KNOWN_MODELS",
    "CPU_SUMMEVAL_DEV_DOCS",
    "CPU_SUMMEVAL_TEST_DOCS",
    "CPU_SUMMEVAL_SUBSET",
    "CPU_STSB_SUBSET",
    "STSB_SELECTION",
    "SEMREL_SELECTION",
    "CPU_RUN_CHANGES",
    "LAMBDA_GRID",
    "LAMBDA_GRID_EXTENDED",
    "CONTRASTIVE_LAMS",
    "CONTRASTIVE_TEMPS",
    "CONTRASTIVE_LAMS_FINE",
    "CONTRASTIVE_TEMPS_FINE",
    "check_run_name",
    "config_from_dict",
    "config_to_dict",
    "engine_options",
    "with_overrides",
    "load_config",
    "validate_config",
    "check_tokenizer",
    "resolve_model_path",
    "resolve_data_dir",
    "file_sha256",
    "cells",
    "extraction_plan",
    "method_variants",
]


class ConfigError(ValueError):
    """An experiment config that cannot be run; the message names the field, file or value."""


# -- vocabularies ---------------------------------------------------------------------------

# Per task: the human-score range, the aspects, the default split mode, and the data splits
# the "original" mode uses as (dev, test).
TASKS: dict[str, dict[str, Any]] = {
    "summeval": {
        "human_range": (1.0, 5.0),
        "aspects": ("coherence", "consistency", "fluency", "relevance"),
        "splits": ("kfold", "fixed_docs"),
        "original": None,
        "files": ("summeval_docs.jsonl", "summeval_summaries.jsonl"),
    },
    "stsb": {
        "human_range": (0.0, 5.0),
        "aspects": ("similarity",),
        "splits": ("original", "kfold"),
        "original": ("dev", "test"),
        "files": ("stsb_dev.jsonl", "stsb_test.jsonl"),
    },
    # The SemRel2024 English test labels are not distributed: hyper-parameters are chosen on
    # the train split (a documented sample of it, see SubsetSpec.max_per_split) and reported on
    # the official dev split.
    "semrel": {
        "human_range": (0.0, 1.0),
        "aspects": ("relatedness",),
        "splits": ("original", "kfold"),
        "original": ("train", "dev"),
        "files": ("semrel_eng_train.jsonl", "semrel_eng_dev.jsonl"),
    },
}
_SHARED_SUBDIR = {"summeval": "summeval", "stsb": "stsb", "semrel": "semrel2024"}

# Method families. Each expands into named variants (see `method_variants`).
METHODS = (
    "vanilla",  # the judge's candidate distribution as is
    "generate",  # greedy generation parsed into a number (parse failures counted)
    "deb_r",  # random-number prior (raw random-number prompts), rectified with lambda
    "deb_t",  # random-number prior measured in the task's framing, rectified with lambda
    "contextual",  # contextual calibration (content-free inputs), lambda = 1
    "batch",  # batch calibration (prior = mean prediction over the test inputs), lambda = 1
    "distribution",  # distribution calibration (Beta fitted to dev human scores), lambda = 1
    "contrastive",  # main judge minus assistant, lambda x temperature chosen on dev
    "contrastive_deb_t",  # contrastive decoding, then the Deb-T correction: both chosen on dev
    "contrastive_generate",  # greedy contrastive generation over the full vocabulary, parsed (fixed lambda, t, alpha)
)
SCORE_KINDS = ("expected", "greedy", "generate")

LAMBDA_GRID = tuple(round(0.1 * i, 1) for i in range(1, 11))  # 0.1 .. 1.0
LAMBDA_GRID_EXTENDED = tuple(round(0.1 * i, 1) for i in range(1, 101))  # 0.1 .. 10.0
CONTRASTIVE_LAMS = (0.01, 0.1, 0.5, 1.0)
CONTRASTIVE_TEMPS = (0.5, 1.0, 2.0, 3.0, 5.0)
CONTRASTIVE_LAMS_FINE = tuple(round(0.05 * i, 2) for i in range(0, 21))  # 0 .. 1
CONTRASTIVE_TEMPS_FINE = tuple(round(0.25 * i, 2) for i in range(2, 21))  # 0.5 .. 5
_METRICS = ("pearson", "spearman", "kendall", "mse", "sdd", "validity")
_SELECT_METRICS = ("pearson", "spearman", "kendall", "mse", "neg_mse")


# -- small checkers -------------------------------------------------------------------------


def _fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def _str(where: str, value: Any, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise _fail(where, f"must be a non-empty string, got {value!r}")
    return value


def check_run_name(where: str, run: Any) -> str:
    """A run name is one folder name: letters, digits, '-', '_', '.', not starting with '.'."""
    _str(where, run)
    if run.startswith(".") or not all(c.isalnum() or c in "-_." for c in run):
        raise _fail(where, f"{run!r} may only hold letters, digits, '-', '_', '.' and must not start with '.' "
                           "(a run is one folder under the results root)")
    return run


# Options of `jaxjudge.engine.extract` that `run_extractions` sets itself, per job.
_ENGINE_SET_PER_JOB = ("store", "key", "progress", "on_chunk", "prompt_nll", "generate_tokens")
# Options that may be 0 (every other int option must be >= 1).
_ENGINE_NONNEG = ("min_prefix_tokens",)


def engine_options() -> dict[str, Any]:
    """The options a config's ``engine`` mapping may set: `jaxjudge.engine.extract`'s keyword
    parameters (name -> default), less those each job sets itself."""
    import inspect  # noqa: PLC0415

    from jaxjudge.engine.extract import extract  # noqa: PLC0415

    return {name: p.default for name, p in inspect.signature(extract).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in _ENGINE_SET_PER_JOB}


def _check_engine_options(where: str, engine: Mapping[str, Any]) -> None:
    if not engine:
        return
    allowed = engine_options()
    for k, v in engine.items():
        if k not in allowed:
            close = difflib.get_close_matches(str(k), list(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _fail(where, f"unknown engine option {k!r}{hint}; allowed: {', '.join(sorted(allowed))}")
        default = allowed[k]
        if v is None and default is None:
            continue
        if k == "overflow":
            _choice(f"{where}.{k}", v, ("truncate", "raise"))
        elif k == "context_length" or isinstance(default, int) and not isinstance(default, bool):
            _int(f"{where}.{k}", v, minimum=0 if k in _ENGINE_NONNEG else 1)
        elif isinstance(default, bool) and not isinstance(v, bool):
            raise _fail(f"{where}.{k}", f"must be a bool, got {v!r}")


def _tuple(where: str, value: Any, item: Callable[[str, Any], Any], *, allow_empty: bool = False) -> tuple:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _fail(where, f"must be a list or tuple, got {value!r}")
    out = tuple(item(f"{where}[{i}]", v) for i, v in enumerate(value))
    if not out and not allow_empty:
        raise _fail(where, "must not be empty")
    return out


def _number(where: str, value: Any, *, positive: bool = False, nonneg: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise _fail(where, f"must be a number, got {value!r}")
    value = float(value)
    if not np.isfinite(value):
        raise _fail(where, f"must be finite, got {value!r}")
    if positive and value <= 0:
        raise _fail(where, f"must be > 0, got {value!r}")
    if nonneg and value < 0:
        raise _fail(where, f"must be >= 0, got {value!r}")
    return value


def _int(where: str, value: Any, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _fail(where, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise _fail(where, f"must be >= {minimum}, got {value!r}")
    return int(value)


def _choice(where: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        hint = difflib.get_close_matches(str(value), list(choices), n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise _fail(where, f"unknown value {value!r}{extra}; choose from {list(choices)}")
    return value


def _unknown_fields(cls_name: str, given: Iterable[str], known: Sequence[str]) -> None:
    unknown = [k for k in given if k not in known]
    if unknown:
        k = unknown[0]
        hint = difflib.get_close_matches(k, list(known), n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ConfigError(f"{cls_name}: unknown field {k!r}{extra}; known fields: {sorted(known)}")


def _scale(where: str, value: Any):
    from jaxjudge.prompts import ScoreScale  # noqa: PLC0415

    if isinstance(value, ScoreScale):
        return value.name
    text = _str(where, value)
    try:
        scale = ScoreScale.parse(text)
    except ValueError as e:
        raise _fail(where, f"{text!r}: {e}") from None
    return scale.name


# -- specs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """A judge model.

    Attributes:
      name: short label used in tables, store keys and figure titles (e.g. ``"qwen05"``).
      path: ``"default"``, ``"gguf:<file>"`` or a file/folder path (see the module docstring).
      sha256: expected sha256 of the model file; checked by `validate_config(check_sha=True)`
        and recorded in run metadata. None: computed when needed.
    """

    name: str
    path: str
    sha256: str | None = None

    def __post_init__(self) -> None:
        _str("ModelSpec.name", self.name)
        if not all(c.isalnum() or c in "-_." for c in self.name):
            raise _fail("ModelSpec.name", f"{self.name!r} may only hold letters, digits, '-', '_', '.'")
        _str(f"ModelSpec[{self.name}].path", self.path)
        if self.sha256 is not None:
            s = _str(f"ModelSpec[{self.name}].sha256", self.sha256)
            if len(s) != 64 or any(c not in "0123456789abcdef" for c in s):
                raise _fail(f"ModelSpec[{self.name}].sha256", f"must be 64 lower-case hex digits, got {s!r}")


@dataclass(frozen=True)
class SubsetSpec:
    """A documented cut of a task's data (never a silent one).

    Attributes:
      reason: why the cut is made (recorded in every table and run's metadata).
      doc_ids: keep only these groups (SummEval documents).
      n_docs: keep the first ``n_docs`` groups in sorted order of their ids (for the
        ``fixed_docs`` split, the dev documents are always kept and counted apart).
      max_per_split: data split -> largest number of examples kept, by a seeded sample of whole
        groups (e.g. ``{"train": 500}`` for SemRel's selection side).
      seed: seed of that sample.
    """

    reason: str
    doc_ids: tuple[str, ...] | None = None
    n_docs: int | None = None
    max_per_split: Mapping[str, int] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        _str("SubsetSpec.reason", self.reason)
        if self.doc_ids is not None:
            object.__setattr__(self, "doc_ids", _tuple("SubsetSpec.doc_ids", self.doc_ids, _str))
        if self.n_docs is not None:
            _int("SubsetSpec.n_docs", self.n_docs, minimum=1)
        if self.max_per_split is not None:
            if not isinstance(self.max_per_split, Mapping) or not self.max_per_split:
                raise _fail("SubsetSpec.max_per_split", f"must be a non-empty dict, got {self.max_per_split!r}")
            clean = {
                _str("SubsetSpec.max_per_split key", k): _int(f"SubsetSpec.max_per_split[{k!r}]", v, minimum=1)
                for k, v in self.max_per_split.items()
            }
            object.__setattr__(self, "max_per_split", types.MappingProxyType(clean))
        _int("SubsetSpec.seed", self.seed, minimum=0)
        if self.doc_ids is None and self.n_docs is None and self.max_per_split is None:
            raise _fail("SubsetSpec", "set at least one of doc_ids, n_docs, max_per_split")


@dataclass(frozen=True)
class TaskSpec:
    """One data set, its aspects, and how it is split into dev (selection) and test.

    Attributes:
      task: ``"summeval"``, ``"stsb"`` or ``"semrel"``.
      aspects: human-score aspects judged (each needs a template).
      data: ``"shared"``, ``"embedded"`` (SummEval only) or a folder.
      split: ``"kfold"``: grouped k-fold, each fold's dev is one fold and its test the other
        folds (dev:test = 1:4 with 5 folds, as in the random-number paper); ``"fixed_docs"``:
        SummEval's 10-document dev split (``dev_doc_ids.txt``) and the other documents as
        test, as in the contrastive-decoding paper; ``"original"``: the data set's own splits
        (STS-B dev/test; SemRel train/dev).
      n_folds: folds of ``"kfold"``.
      fold_seed: seed of the group shuffle of ``"kfold"``.
      dev_docs: explicit dev documents for ``"fixed_docs"`` (None: the data's
        ``dev_doc_ids.txt``, or the package's copy of it).
      subset: a documented cut of the data, or None for all of it.
      per_group: also report per-document (summary-level) metrics; default True for SummEval.
    """

    task: str
    aspects: tuple[str, ...]
    data: str = "shared"
    split: str = "kfold"
    n_folds: int = 5
    fold_seed: int = 0
    dev_docs: tuple[str, ...] | None = None
    subset: SubsetSpec | None = None
    per_group: bool | None = None

    def __post_init__(self) -> None:
        _choice("TaskSpec.task", self.task, list(TASKS))
        where = f"TaskSpec[{self.task}]"
        aspects = _tuple(f"{where}.aspects", self.aspects, _str)
        for i, a in enumerate(aspects):
            _choice(f"{where}.aspects[{i}]", a, TASKS[self.task]["aspects"])
        object.__setattr__(self, "aspects", aspects)
        _str(f"{where}.data", self.data)
        if self.data == "embedded" and self.task != "summeval":
            raise _fail(f"{where}.data", "'embedded' data exists for summeval only")
        _choice(f"{where}.split", self.split, TASKS[self.task]["splits"])
        _int(f"{where}.n_folds", self.n_folds, minimum=2)
        _int(f"{where}.fold_seed", self.fold_seed, minimum=0)
        if self.dev_docs is not None:
            if self.split != "fixed_docs":
                raise _fail(f"{where}.dev_docs", "only used with split='fixed_docs'")
            object.__setattr__(self, "dev_docs", _tuple(f"{where}.dev_docs", self.dev_docs, _str))
        if self.subset is not None and not isinstance(self.subset, SubsetSpec):
            raise _fail(f"{where}.subset", f"must be a SubsetSpec, got {type(self.subset).__name__}")
        if self.per_group is None:
            object.__setattr__(self, "per_group", self.task == "summeval")
        elif not isinstance(self.per_group, bool):
            raise _fail(f"{where}.per_group", f"must be a bool, got {self.per_group!r}")

    @property
    def human_range(self) -> tuple[float, float]:
        return TASKS[self.task]["human_range"]


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated experiment: a grid of cells, the methods run on each, and how to report.

    Attributes:
      name: experiment name; results go to ``<results_root>/<name>/<run>/``.
      description: one paragraph for the run's README table header.
      models: every model the experiment needs (judges and assistants).
      judges: names of the models scored as the main judge (None: every model that is not
        only an assistant; see `judge_names`).
      pairs: ``(main, assistant)`` model names for contrastive decoding (same tokenizer).
      tasks: the data sets.
      scales: score ranges, e.g. ``("0-4", "1-5", "2-6", "3-7")``.
      methods: method families from `METHODS`.
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
        the cell shows the estimate and the reason (see `jaxjudge.metrics.fold_stat.MIN_CI_GROUPS`).
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
      engine: options passed verbatim to the engine (batch size, context length, ...).
    """

    name: str
    models: tuple[ModelSpec, ...]
    tasks: tuple[TaskSpec, ...]
    scales: tuple[str, ...] = ("0-4", "1-5", "2-6", "3-7")
    methods: tuple[str, ...] = ("vanilla",)
    description: str = ""
    judges: tuple[str, ...] | None = None
    pairs: tuple[tuple[str, str], ...] = ()
    temperatures: tuple[float, ...] = (0.2, 1.0)
    greedy: bool = True
    deb_tp: tuple[int, ...] = (10, 100)
    lambdas: tuple[float, ...] = LAMBDA_GRID
    lambdas_extended: tuple[float, ...] | None = LAMBDA_GRID_EXTENDED
    contrastive_lams: tuple[float, ...] = CONTRASTIVE_LAMS
    contrastive_temps: tuple[float, ...] = CONTRASTIVE_TEMPS
    contrastive_fine: bool = False
    contrastive_temperature: str = "t_main"
    contrastive_generate_lam: float = 0.5
    contrastive_generate_t_main: float = 1.0
    contrastive_generate_t_asst: float = 1.0
    contrastive_generate_alpha: float = 0.1
    select_metric: str = "spearman"
    select_per_group: bool = False
    metrics: tuple[str, ...] = _METRICS
    ci_metrics: tuple[str, ...] | None = None
    n_boot: int = 1000
    alpha: float = 0.05
    min_ci_groups: int = 10
    ci_method: str = "expanded"
    seed: int = 0
    generation_max_new_tokens: int = 24
    prompt_style: str = "chat"
    store_root: str = "stores"
    results_root: str = "results"
    run: str | None = None
    changes: tuple[str, ...] = ()
    engine: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        w = "ExperimentConfig"
        _str(f"{w}.name", self.name)
        if not all(c.isalnum() or c in "-_." for c in self.name):
            raise _fail(f"{w}.name", f"{self.name!r} may only hold letters, digits, '-', '_', '.'")
        if not isinstance(self.description, str):
            raise _fail(f"{w}.description", "must be a string")

        def model(where, v):
            if not isinstance(v, ModelSpec):
                raise _fail(where, f"must be a ModelSpec, got {type(v).__name__}")
            return v

        models = _tuple(f"{w}.models", self.models, model)
        names = [m.name for m in models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise _fail(f"{w}.models", f"duplicate model name {dup[0]!r}")
        object.__setattr__(self, "models", models)

        def pair(where, v):
            p = _tuple(where, v, _str)
            if len(p) != 2:
                raise _fail(where, f"must be (main, assistant), got {v!r}")
            for name in p:
                if name not in names:
                    raise _fail(where, f"model {name!r} is not in models {names}")
            if p[0] == p[1]:
                raise _fail(where, f"main and assistant are the same model {p[0]!r}")
            return p

        pairs = _tuple(f"{w}.pairs", self.pairs, pair, allow_empty=True)
        object.__setattr__(self, "pairs", pairs)
        if self.judges is not None:
            given = _tuple(f"{w}.judges", self.judges, _str)
            for i, j in enumerate(given):
                if j not in names:
                    raise _fail(f"{w}.judges[{i}]", f"model {j!r} is not in models {names}")
            object.__setattr__(self, "judges", given)
        judges = self.judge_names

        def task(where, v):
            if not isinstance(v, TaskSpec):
                raise _fail(where, f"must be a TaskSpec, got {type(v).__name__}")
            return v

        tasks = _tuple(f"{w}.tasks", self.tasks, task)
        seen = [t.task for t in tasks]
        dup = sorted({t for t in seen if seen.count(t) > 1})
        if dup:
            raise _fail(f"{w}.tasks", f"task {dup[0]!r} appears twice; list all its aspects in one TaskSpec")
        object.__setattr__(self, "tasks", tasks)
        scales = _tuple(f"{w}.scales", self.scales, _scale)
        if len(set(scales)) != len(scales):
            raise _fail(f"{w}.scales", f"duplicate scale in {list(scales)}")
        object.__setattr__(self, "scales", scales)

        methods = _tuple(f"{w}.methods", self.methods, lambda wh, v: _choice(wh, v, METHODS))
        object.__setattr__(self, "methods", methods)
        needs_pair = [m for m in methods if m.startswith("contrastive")]
        if needs_pair and not pairs:
            raise _fail(f"{w}.pairs", f"methods {needs_pair} need at least one (main, assistant) pair")
        if needs_pair:
            mains = {m for m, _ in pairs}
            lonely = [j for j in judges if j not in mains]
            if lonely and set(methods) <= {"contrastive", "contrastive_deb_t", "contrastive_generate"}:
                raise _fail(f"{w}.judges", f"judges {lonely} have no assistant in pairs")

        pos = lambda wh, v: _number(wh, v, positive=True)  # noqa: E731
        nonneg = lambda wh, v: _number(wh, v, nonneg=True)  # noqa: E731
        object.__setattr__(self, "temperatures", _tuple(f"{w}.temperatures", self.temperatures, pos))
        if not isinstance(self.greedy, bool):
            raise _fail(f"{w}.greedy", f"must be a bool, got {self.greedy!r}")
        object.__setattr__(self, "deb_tp", _tuple(f"{w}.deb_tp", self.deb_tp, lambda wh, v: _int(wh, v, minimum=1)))
        object.__setattr__(self, "lambdas", _tuple(f"{w}.lambdas", self.lambdas, nonneg))
        if self.lambdas_extended is not None:
            object.__setattr__(
                self, "lambdas_extended", _tuple(f"{w}.lambdas_extended", self.lambdas_extended, nonneg)
            )
        object.__setattr__(self, "contrastive_lams", _tuple(f"{w}.contrastive_lams", self.contrastive_lams, nonneg))
        object.__setattr__(self, "contrastive_temps", _tuple(f"{w}.contrastive_temps", self.contrastive_temps, pos))
        if not isinstance(self.contrastive_fine, bool):
            raise _fail(f"{w}.contrastive_fine", f"must be a bool, got {self.contrastive_fine!r}")
        _choice(f"{w}.contrastive_temperature", self.contrastive_temperature, ("t_main", "t_asst"))
        object.__setattr__(self, "contrastive_generate_lam",
                           nonneg(f"{w}.contrastive_generate_lam", self.contrastive_generate_lam))
        for name in ("contrastive_generate_t_main", "contrastive_generate_t_asst"):
            object.__setattr__(self, name, pos(f"{w}.{name}", getattr(self, name)))
        cg_alpha = _number(f"{w}.contrastive_generate_alpha", self.contrastive_generate_alpha, nonneg=True)
        if cg_alpha > 1:
            raise _fail(f"{w}.contrastive_generate_alpha", f"must be in [0, 1], got {cg_alpha}")
        object.__setattr__(self, "contrastive_generate_alpha", cg_alpha)
        _choice(f"{w}.select_metric", self.select_metric, _SELECT_METRICS)
        if not isinstance(self.select_per_group, bool):
            raise _fail(f"{w}.select_per_group", f"must be a bool, got {self.select_per_group!r}")
        metrics = _tuple(f"{w}.metrics", self.metrics, lambda wh, v: _choice(wh, v, _METRICS))
        object.__setattr__(self, "metrics", metrics)
        if self.ci_metrics is None:
            object.__setattr__(self, "ci_metrics", metrics)
        else:
            ci = _tuple(f"{w}.ci_metrics", self.ci_metrics, lambda wh, v: _choice(wh, v, metrics), allow_empty=True)
            object.__setattr__(self, "ci_metrics", ci)
        _int(f"{w}.n_boot", self.n_boot, minimum=1)
        _int(f"{w}.min_ci_groups", self.min_ci_groups, minimum=2)
        object.__setattr__(self, "changes", _tuple(f"{w}.changes", self.changes, _str, allow_empty=True))
        _choice(f"{w}.ci_method", self.ci_method, ("expanded", "percentile", "bca"))
        a = _number(f"{w}.alpha", self.alpha, positive=True)
        if a >= 1:
            raise _fail(f"{w}.alpha", f"must be in (0, 1), got {a}")
        _int(f"{w}.seed", self.seed, minimum=0)
        _int(f"{w}.generation_max_new_tokens", self.generation_max_new_tokens, minimum=1)
        _choice(f"{w}.prompt_style", self.prompt_style, ("chat", "raw"))
        _str(f"{w}.store_root", self.store_root)
        _str(f"{w}.results_root", self.results_root)
        if self.run is not None:
            check_run_name(f"{w}.run", self.run)
        if not isinstance(self.engine, Mapping):
            raise _fail(f"{w}.engine", f"must be a dict, got {type(self.engine).__name__}")
        _check_engine_options(f"{w}.engine", self.engine)
        object.__setattr__(self, "engine", types.MappingProxyType(dict(self.engine)))
        if "deb_r" in methods or "deb_t" in methods or "contrastive_deb_t" in methods:
            if not self.lambdas:
                raise _fail(f"{w}.lambdas", "must not be empty")

    # -- lookups ----------------------------------------------------------------------------

    @property
    def judge_names(self) -> tuple[str, ...]:
        """The main judges: ``judges`` if given, else every model that is not only an assistant."""
        if self.judges is not None:
            return tuple(self.judges)
        assistants_only = {a for _, a in self.pairs} - {m for m, _ in self.pairs}
        return tuple(m.name for m in self.models if m.name not in assistants_only)

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise ConfigError(f"config {self.name!r}: no model named {name!r} (models: {[m.name for m in self.models]})")

    def assistant_of(self, judge: str) -> str | None:
        for main, asst in self.pairs:
            if main == judge:
                return asst
        return None

    def task(self, name: str) -> TaskSpec:
        for t in self.tasks:
            if t.task == name:
                return t
        raise ConfigError(f"config {self.name!r}: no task {name!r}")


# -- the judges the experiments use ----------------------------------------------------------

# Files as fetched by ../shared/models/get_models.sh (sha256 from that script).
SMOLLM2 = ModelSpec("smollm2-135m", "default", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")
QWEN_05B = ModelSpec(
    "qwen2.5-coder-0.5b", "gguf:qwen2.5-coder-0.5b-instruct-awq.gguf",
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
QWEN_15B = ModelSpec(
    "qwen2.5-coder-1.5b", "gguf:qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
# A base (not instruction-tuned) model: run it with ``prompt_style="raw"``, a completion-style
# prompt, not a chat template.
GEMMA3_270M = ModelSpec(
    "gemma-3-270m", "gguf:gemma-3-270m-q4_k_m.gguf",
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
)
KNOWN_MODELS = {m.name: m for m in (SMOLLM2, QWEN_05B, QWEN_15B, GEMMA3_270M)}


# -- the documented CPU subsets of the committed Qwen runs -----------------------------------
#
# A 0.5B judge reads about 100 prompt tokens a second on a 2-core CPU (1.5B: about a third of
# that), so the full protocols (100 SummEval documents x 4 ranges, 1,379 STS-B test pairs x 4
# ranges) take days there. The committed runs use these cuts instead; every run records the
# reason in its notes. The experiments' default configs are the full protocols.

CPU_SUMMEVAL_DEV_DOCS = (  # the first 3 of dev_doc_ids.txt in sorted order
    "dm-test-03e271b4305517e02c9ead82d57327d32b99102e",
    "dm-test-26e4e19d945cedcb489f28808c730658139c9415",
    "dm-test-4a593dc4c7e0b4d09bfdc66bb315c47b54eb15df",
)
CPU_SUMMEVAL_TEST_DOCS = (  # the first 3 other documents in sorted order
    "cnn-test-404f859482d47c127868964a9a39d1a7645dd2e9",
    "cnn-test-4761dc6d8bdf56b9ada97104113dd1bcf4aed3f1",
    "cnn-test-5139ccfabee55ddb83e7937f5802c0a67aee8975",
)
CPU_SUMMEVAL_SUBSET = SubsetSpec(
    reason="CPU budget: 6 of the 100 SummEval documents (x 16 summaries = 96), the first 3 of "
    "the 10 dev_doc_ids.txt documents and the first 3 others, both in sorted id order; no "
    "document was chosen by its scores",
    doc_ids=CPU_SUMMEVAL_DEV_DOCS + CPU_SUMMEVAL_TEST_DOCS,
)
CPU_STSB_SUBSET = SubsetSpec(
    reason="CPU budget: a seeded random sample (seed 0) of 40 STS-B dev pairs (selection) and "
    "120 STS-B test pairs (report) out of 1,500 and 1,379",
    max_per_split={"dev": 40, "test": 120},
    seed=0,
)

# What changed in every committed CPU subset run since its previous version (each experiment
# adds its own lines; printed in the runs' notes).
CPU_RUN_CHANGES = (
    "intervals resample the reported (test) groups only, with the expanded percentile bootstrap "
    "(before: every group, dev included, plain percentile); with fewer than 10 reported groups (the "
    "3 SummEval test documents) no interval is given",
    "undefined bootstrap resamples are counted and shown, and above 5% of them no interval is given "
    "(before: dropped silently); per-document means say how many documents were defined",
    "SDD is computed from log-probabilities with no 1e-6 floor (before: capped near 13.8 nats per example)",
    "stores re-extracted (the earlier ones were not committed) and committed under results/stores/cpu_qwen",
)
STSB_SELECTION = SubsetSpec(
    reason="selection on a seeded random sample (seed 0) of 300 of the 1,500 STS-B dev pairs, "
    "to bound extraction cost; the report covers the whole test split (1,379 pairs)",
    max_per_split={"dev": 300},
    seed=0,
)

SEMREL_SELECTION = SubsetSpec(
    reason="SemRel2024 has no distributed test labels: lambda is chosen on a seeded sample of "
    "whole groups of the train split (at most 1,000 of its 5,500 pairs, to bound extraction "
    "cost) and reported on the official dev split (all 250 pairs)",
    max_per_split={"train": 1000},
    seed=0,
)


# -- dict round trip, overrides, loading ----------------------------------------------------

_NESTED = {"models": ModelSpec, "tasks": TaskSpec}


def _spec_from(cls, value: Any, where: str):
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a {cls.__name__} or a dict, got {value!r}")
    known = [f.name for f in dataclasses.fields(cls)]
    _unknown_fields(where, value, known)
    kwargs = dict(value)
    if cls is TaskSpec and isinstance(kwargs.get("subset"), Mapping):
        sub = kwargs["subset"]
        _unknown_fields(f"{where}.subset", sub, [f.name for f in dataclasses.fields(SubsetSpec)])
        kwargs["subset"] = SubsetSpec(**sub)
    return cls(**kwargs)


def config_from_dict(d: Mapping[str, Any]) -> ExperimentConfig:
    """Build a config from a plain dict; an unknown field raises `ConfigError` naming it."""
    if not isinstance(d, Mapping):
        raise ConfigError(f"config must be a dict, got {type(d).__name__}")
    known = [f.name for f in dataclasses.fields(ExperimentConfig)]
    _unknown_fields("ExperimentConfig", d, known)
    kwargs = dict(d)
    for name, cls in _NESTED.items():
        if name in kwargs and not isinstance(kwargs[name], (str, bytes)):
            kwargs[name] = tuple(_spec_from(cls, v, f"{name}[{i}]") for i, v in enumerate(kwargs[name]))
    return ExperimentConfig(**kwargs)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    """JSON-able dict of the config (tuples as lists); `config_from_dict` inverts it."""
    return _plain(cfg)


def _parse_value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    # Bare comma lists ("1-5,2-6") and bare words ("spearman") are strings.
    if "," in text:
        return tuple(_parse_value(t.strip()) for t in text.split(",") if t.strip())
    return text


def with_overrides(cfg: ExperimentConfig, overrides: Sequence[str] | Mapping[str, Any]) -> ExperimentConfig:
    """A copy of ``cfg`` with top-level fields replaced (e.g. from the command line).

    Args:
      cfg: the config.
      overrides: ``["n_boot=200", "scales=1-5,2-6", "judges=('qwen05',)"]`` (values parsed as
        Python literals where possible, bare comma lists as tuples, else strings), or a dict.

    Raises:
      ConfigError: an unknown field (named, with the closest known one) or a bad value.
    """
    if isinstance(overrides, Mapping):
        changes = dict(overrides)
    else:
        changes = {}
        for item in overrides:
            if "=" not in item:
                raise ConfigError(f"override {item!r} must look like field=value")
            k, v = item.split("=", 1)
            changes[k.strip()] = _parse_value(v.strip())
    d = config_to_dict(cfg)
    _unknown_fields("ExperimentConfig", changes, list(d))
    # A derived field follows its source: ci_metrics defaults to metrics, so overriding metrics
    # alone moves ci_metrics with it unless the config chose a proper subset of its own.
    if "metrics" in changes and "ci_metrics" not in changes and tuple(cfg.ci_metrics) == tuple(cfg.metrics):
        d["ci_metrics"] = None
    for k, v in changes.items():
        if k in ("scales", "methods", "judges", "metrics", "ci_metrics", "temperatures", "deb_tp") and isinstance(
            v, (str, int, float)
        ):
            v = (v,)
        d[k] = v
    return config_from_dict(d)


def load_config(spec: str | os.PathLike, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Import an experiment file and call its ``get_config``.

    Args:
      spec: ``"experiments/score_range_bias.py"`` or ``"experiments/score_range_bias.py:quick"``
        (the part after ``:`` is passed to ``get_config(arg)``).
      overrides: field overrides, as `with_overrides`.

    Returns:
      The validated `ExperimentConfig` (files are not checked here: call `validate_config`).
    """
    text = os.fspath(spec)
    path_text, _, arg = text.partition(":") if not Path(text).is_file() else (text, "", "")
    path = Path(path_text)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    name = f"jaxjudge_experiment_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
    mod_spec = importlib.util.spec_from_file_location(name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ConfigError(f"cannot import config file {path}")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = module
    try:
        mod_spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    get = getattr(module, "get_config", None)
    if not callable(get):
        raise ConfigError(f"{path}: defines no get_config() function")
    cfg = get(arg) if arg else get()
    if isinstance(cfg, Mapping):
        cfg = config_from_dict(cfg)
    if not isinstance(cfg, ExperimentConfig):
        raise ConfigError(f"{path}: get_config() returned {type(cfg).__name__}, expected ExperimentConfig")
    return with_overrides(cfg, overrides) if overrides else cfg


# -- path resolution ------------------------------------------------------------------------


def resolve_model_path(model: ModelSpec) -> Path:
    """Where a model's file (or folder) is expected; does not check that it exists."""
    if model.path == "default":
        from jaxjudge.models.gguf import default_model_path  # noqa: PLC0415

        try:
            return default_model_path()
        except FileNotFoundError as e:
            raise ConfigError(f"model {model.name!r} (path 'default'): {e}") from None
    if model.path.startswith("gguf:"):
        from jaxjudge.models.gguf import gguf_dir  # noqa: PLC0415

        return gguf_dir() / model.path[len("gguf:"):]
    return Path(model.path).expanduser()


def _shared_data_candidates() -> list[Path]:
    env = os.environ.get("JAXJUDGE_DATA_DIR")
    if env:
        return [Path(env).expanduser()]
    repo = Path(__file__).resolve().parents[2]
    return [Path.cwd() / ".." / "shared" / "data", repo / ".." / "shared" / "data"]


def resolve_data_dir(task: TaskSpec) -> Path | None:
    """The folder holding a task's files; None for the embedded SummEval subset."""
    if task.data == "embedded":
        return None
    if task.data == "shared":
        candidates = [c / _SHARED_SUBDIR[task.task] for c in _shared_data_candidates()]
        for c in candidates:
            if c.is_dir():
                return c.resolve()
        return candidates[0]
    return Path(task.data).expanduser()


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 (hex) of a file, cached per (path, size, mtime) within the process."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


# -- validation -----------------------------------------------------------------------------


def _model_problems(model: ModelSpec, check_sha: bool) -> list[str]:
    try:
        path = resolve_model_path(model)
    except ConfigError as e:
        return [str(e)]
    if not path.exists():
        hint = ""
        if model.path.startswith("gguf:"):
            hint = " (fetch the Qwen judges with ../shared/models/get_models.sh, or set $JAXJUDGE_GGUF_DIR)"
        return [f"model {model.name!r}: file not found: {path}{hint}"]
    if check_sha and model.sha256 is not None and path.is_file():
        actual = file_sha256(path)
        if actual != model.sha256:
            return [f"model {model.name!r}: {path} has sha256 {actual}, config expects {model.sha256}"]
    return []


def _task_problems(task: TaskSpec) -> list[str]:
    from jaxjudge.prompts import get_template  # noqa: PLC0415

    out = []
    for aspect in task.aspects:
        try:
            get_template(task.task, aspect)
        except KeyError as e:
            out.append(f"task {task.task!r}: {e.args[0]}")
    if task.data == "embedded":
        if task.split == "fixed_docs" and task.dev_docs is None:
            out.append(
                f"task {task.task!r}: the embedded subset does not hold the 10 SummEval dev documents; "
                "set TaskSpec.dev_docs (e.g. one of jaxjudge.data.SUMMEVAL_SUBSET_DOC_IDS)"
            )
        return out
    folder = resolve_data_dir(task)
    if not folder.is_dir():
        where = "set $JAXJUDGE_DATA_DIR or TaskSpec.data" if task.data == "shared" else "TaskSpec.data"
        return out + [f"task {task.task!r}: data folder not found: {folder} ({where})"]
    for name in TASKS[task.task]["files"]:
        if not (folder / name).is_file():
            out.append(f"task {task.task!r}: data file not found: {folder / name}")
    if task.split == "fixed_docs" and task.dev_docs is None and not (folder / "dev_doc_ids.txt").is_file():
        out.append(f"task {task.task!r}: split 'fixed_docs' needs {folder / 'dev_doc_ids.txt'} (file not found)")
    return out


def validate_config(cfg: ExperimentConfig, *, check_files: bool = True, check_sha: bool = False) -> None:
    """Check that a config can run, before any model is loaded.

    Args:
      cfg: the config (already type-checked by construction).
      check_files: check that model files and data files exist.
      check_sha: also hash model files against ``ModelSpec.sha256`` where given.

    Raises:
      ConfigError: listing every problem found, each naming the model, task, field or file.
    """
    problems: list[str] = []
    if check_files:
        for m in cfg.models:
            problems += _model_problems(m, check_sha)
        for t in cfg.tasks:
            problems += _task_problems(t)
    from jaxjudge.prompts import ScoreScale  # noqa: PLC0415

    for s in cfg.scales:
        scale = ScoreScale.parse(s)
        if "sdd" in cfg.metrics and scale.step != 1:
            problems.append(f"scale {s!r}: the SDD metric needs integer scores (step 1)")
    for t in cfg.tasks:
        if t.split == "kfold" and t.subset is not None and t.subset.doc_ids is not None:
            if len(t.subset.doc_ids) < t.n_folds:
                problems.append(
                    f"task {t.task!r}: subset keeps {len(t.subset.doc_ids)} documents, fewer than n_folds={t.n_folds}"
                )
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"config {cfg.name!r}: {len(problems)} problem(s):\n{lines}")


def _template_context(task: str, aspect: str, scale) -> tuple[str, str]:
    """The last line of a template's rendered suffix (where the score follows) and its separator."""
    from jaxjudge.prompts import get_template  # noqa: PLC0415

    template = get_template(task, aspect)
    fields = {name: "x" for name in template.placeholders("all")}
    _, suffix = template.render_parts(fields, scale)
    lines = [line for line in suffix.splitlines() if line.strip()]
    return (lines[-1] if lines else suffix), template.answer_separator


def check_tokenizer(
    cfg: ExperimentConfig, model: str, tokenizer: Any, *, separator: str | None = None
) -> None:
    """Check that a model's tokenizer can express every scale of the config.

    Call it after loading only the tokenizer, before any forward pass. For every task, aspect
    and scale, the K candidates must each start at a clean token boundary after the template's
    final line and tokenise differently (see `jaxjudge.prompts.score_candidates`).

    Args:
      cfg: the config.
      model: the model's name in ``cfg.models``.
      tokenizer: its `tokenizers.Tokenizer` (or a fast transformers tokenizer).
      separator: text between the prompt and the score (None: the template's
        ``answer_separator``; a chat template's assistant header usually needs ``""``).

    Raises:
      ConfigError: naming the model, scale, task and aspect, with the tokenizer's reason.
    """
    from jaxjudge.prompts import CandidateTokenizationError, ScoreScale, score_candidates  # noqa: PLC0415

    cfg.model(model)
    for t in cfg.tasks:
        for aspect in t.aspects:
            for s in cfg.scales:
                scale = ScoreScale.parse(s)
                context, sep = _template_context(t.task, aspect, scale)
                try:
                    score_candidates(tokenizer, scale, context=context, separator=sep if separator is None else separator)
                except CandidateTokenizationError as e:
                    raise ConfigError(
                        f"model {model!r} cannot express scale {s!r} (task {t.task!r}, aspect {aspect!r}): {e}"
                    ) from None


# -- the grid -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One (judge, task, aspect, scale) of an experiment's grid."""

    judge: str
    task: str
    aspect: str
    scale: str

    def label(self) -> str:
        return f"{self.judge}/{self.task}/{self.aspect}/{self.scale}"


def cells(cfg: ExperimentConfig) -> list[Cell]:
    """Every cell of the grid, judges slowest, scales fastest."""
    return [
        Cell(j, t.task, a, s) for j in cfg.judge_names for t in cfg.tasks for a in t.aspects for s in cfg.scales
    ]


@dataclass(frozen=True)
class ExtractionJob:
    """One extraction the engine must run (and the store holds) for an experiment.

    Attributes:
      role: ``"score"`` (candidate log-probs of the task's examples), ``"generate"`` (greedy
        generation parsed into scores), ``"contrastive_generate"`` (greedy contrastive
        generation of the model against its assistant in ``pairs``, parsed into scores),
        ``"random_r"`` / ``"random_t"`` (random-number prompts, raw / prefixed with the task
        instruction), ``"content_free"`` (the template filled with content-free text).
      model: model name.
      task, aspect: None for ``"random_r"`` (it does not depend on the task).
      scale: scale name.
    """

    role: str
    model: str
    task: str | None
    aspect: str | None
    scale: str


def extraction_plan(cfg: ExperimentConfig) -> list[ExtractionJob]:
    """The extractions `report` needs, deduplicated, in a stable order.

    Judges need ``score`` arrays, plus ``random_r`` / ``random_t`` / ``content_free`` /
    ``generate`` as their methods require, and ``contrastive_generate`` (for
    ``contrastive_generate``, judges with an assistant; the job runs both models and belongs
    to the judge). An assistant of a judge needs ``score`` arrays (contrastive decoding) and,
    for ``contrastive_deb_t``, its own ``random_t`` arrays (the prior of the combined judge).
    """
    methods = set(cfg.methods)
    contrastive = bool(methods & {"contrastive", "contrastive_deb_t"})  # the assistant's own arrays
    needs_t = bool(methods & {"deb_t", "contrastive_deb_t"})
    assistants = [a for m, a in cfg.pairs if m in cfg.judge_names] if contrastive else []
    jobs: list[ExtractionJob] = []
    for model in dict.fromkeys(list(cfg.judge_names) + assistants):
        is_judge = model in cfg.judge_names
        for s in cfg.scales:
            if is_judge and "deb_r" in methods:
                jobs.append(ExtractionJob("random_r", model, None, None, s))
            for t in cfg.tasks:
                for a in t.aspects:
                    jobs.append(ExtractionJob("score", model, t.task, a, s))
                    if is_judge and "generate" in methods:
                        jobs.append(ExtractionJob("generate", model, t.task, a, s))
                    if is_judge and "contrastive_generate" in methods and cfg.assistant_of(model) is not None:
                        jobs.append(ExtractionJob("contrastive_generate", model, t.task, a, s))
                    if is_judge and "contextual" in methods:
                        jobs.append(ExtractionJob("content_free", model, t.task, a, s))
                    if (is_judge and needs_t) or (not is_judge and "contrastive_deb_t" in methods):
                        jobs.append(ExtractionJob("random_t", model, t.task, a, s))
    return list(dict.fromkeys(jobs))


def method_variants(cfg: ExperimentConfig) -> list[str]:
    """Names of the method variants a config reports, in table order.

    ``deb_r`` / ``deb_t`` expand to ``deb_r_tp10``, ``deb_r_tp10_ext`` (the extended lambda
    grid), ...; ``contrastive`` adds ``contrastive_fine`` when the fine grid is on;
    ``contrastive_deb_t`` expands over Tp like Deb-T.
    """
    out: list[str] = []
    for m in cfg.methods:
        if m in ("deb_r", "deb_t"):
            for tp in cfg.deb_tp:
                out.append(f"{m}_tp{tp}")
                if cfg.lambdas_extended is not None:
                    out.append(f"{m}_tp{tp}_ext")
        elif m == "contrastive":
            out.append("contrastive")
            if cfg.contrastive_fine:
                out.append("contrastive_fine")
        elif m == "contrastive_deb_t":
            out += [f"contrastive_deb_t_tp{tp}" for tp in cfg.deb_tp]
        else:
            out.append(m)
    return out
