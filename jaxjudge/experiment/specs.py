"""The parts of an experiment config: its models (`ModelSpec`), tasks (`TaskSpec`) and
documented data cuts (`SubsetSpec`), the model-path resolution and the engine options a config
may set.

`jaxjudge.experiment.schema` builds `ExperimentConfig` from these and re-exports every public
name here, so ``from jaxjudge.experiment.schema import ModelSpec`` keeps working.

Symbolic paths keep configs portable (no machine-specific paths in committed files):

* model ``path``: ``"default"`` is the embedded SmolLM2 judge (`jaxjudge.models.gguf.
  default_model_path`), ``"gguf:<file>"`` a file in ``$JAXJUDGE_GGUF_DIR`` (default
  ``~/.cache/jaxjudge/gguf``, filled by ``../shared/models/get_models.sh``), anything else a
  path (``~`` expanded).
* task ``data``: ``"embedded"``, ``"shared"`` or a folder (`jaxjudge.data.tasks`).
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from jaxjudge.data.tasks import TASKS
from jaxjudge.engine import EngineOptions
from jaxjudge.experiment.typed import ConfigError, Typed, choose, coerce, opt
from jaxjudge.models.gguf import default_model_path, gguf_dir
from jaxjudge.store.location import LocationError, check_location, is_bucket

__all__ = ["ModelSpec", "SubsetSpec", "TaskSpec", "engine_options", "resolve_model_path"]

TaskName = Literal[tuple(TASKS)]


def _check_name(where: str, name: str) -> None:
    if not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(f"{where}: {name!r} may only hold letters, digits, '-', '_', '.'")


def engine_options() -> dict[str, Any]:
    """The options a config's ``engine`` mapping may set (name -> default): the fields of
    `jaxjudge.engine.EngineOptions` but ``mesh`` (a config sets ``ExperimentConfig.mesh``)."""
    return {name: f.default for name, f in EngineOptions.config_fields().items()}


def _check_engine_options(where: str, engine: Mapping[str, Any]) -> None:
    """Each option is checked against the type and bounds of its `EngineOptions` field."""
    if not engine:
        return
    fields = EngineOptions.config_fields()
    hints = typing.get_type_hints(EngineOptions)
    for k, v in engine.items():
        if k not in fields:
            close = difflib.get_close_matches(str(k), list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            extra = "; the mesh is ExperimentConfig.mesh" if k == "mesh" else ""
            raise ConfigError(f"{where}: unknown engine option {k!r}{hint}; allowed: {', '.join(sorted(fields))}"
                              + extra)
        coerce(f"{where}.{k}", v, hints[k], dict(fields[k].metadata))


def resolve_model_path(model: ModelSpec) -> Path:
    """Where a model's file (or folder) is expected; does not check that it exists."""
    if model.path.startswith("gguf:"):
        return gguf_dir() / model.path[len("gguf:"):]
    if model.path == "default":
        try:
            return default_model_path()
        except FileNotFoundError as e:
            raise ConfigError(f"model {model.name!r} (path 'default'): {e}") from None
    return Path(model.path).expanduser()


@dataclass(frozen=True)
class ModelSpec(Typed):
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

    def where(self) -> str:
        return f"ModelSpec[{self.name}]" if isinstance(self.name, str) else "ModelSpec"

    def resolved_path(self) -> Path:
        """Where the model's file (or folder) is expected; does not check that it exists."""
        return resolve_model_path(self)

    def check(self) -> None:
        _check_name("ModelSpec.name", self.name)
        s = self.sha256
        if s is not None and (len(s) != 64 or any(c not in "0123456789abcdef" for c in s)):
            raise ConfigError(f"{self.where()}.sha256: must be 64 lower-case hex digits, got {s!r}")


@dataclass(frozen=True)
class SubsetSpec(Typed):
    """A documented cut of a task's data (never a silent one).

    Attributes:
      reason: why the cut is made (recorded in every table and run's metadata).
      doc_ids: keep only these groups (SummEval documents).
      n_docs: keep the first ``n_docs`` groups in sorted order of their ids (for the
        ``fixed_docs`` split, the dev documents are always kept and counted apart).
      max_per_split: data split -> largest number of examples kept, by a seeded sample of whole
        groups (e.g. ``{"train": 500}`` for SemRel's selection side).
      seed: seed of that sample.
      exclude: data split -> size of a seeded sample (``seed``, drawn as ``max_per_split``
        draws it) whose groups are left out: the rows an earlier run sampled, so that a
        confirmatory run reads only rows no earlier run scored (``{"test": 500}``: the test
        groups outside the 500-example sample).
      held_out: data split -> largest number of examples of a seeded sample (seed ``seed + 1``)
        of the groups of that split left outside its ``max_per_split`` sample, relabelled as the
        report split (the task's second original split, whose own rows are then dropped): a
        confirmation on held-out rows of the selection split (SemRel's train groups outside the
        selection sample, its test labels not being distributed).
    """

    reason: str
    doc_ids: tuple[str, ...] | None = None
    n_docs: int | None = opt(None, min=1)
    max_per_split: Mapping[str, int] | None = opt(None, min=1, empty=False)
    seed: int = opt(0, min=0)
    exclude: Mapping[str, int] | None = opt(None, min=1, empty=False)
    held_out: Mapping[str, int] | None = opt(None, min=1, empty=False)

    def check(self) -> None:
        if self.doc_ids is None and self.n_docs is None and self.max_per_split is None and self.exclude is None:
            raise ConfigError("SubsetSpec: set at least one of doc_ids, n_docs, max_per_split, exclude")
        for s in self.held_out or {}:
            if s not in (self.max_per_split or {}):
                raise ConfigError(f"SubsetSpec.held_out: split {s!r} has no max_per_split sample to hold rows out of")


@dataclass(frozen=True)
class TaskSpec(Typed):
    """One data set, its aspects, and how it is split into dev (selection) and test.

    Attributes:
      task: ``"summeval"``, ``"stsb"`` or ``"semrel"`` (`jaxjudge.data.tasks.TASKS`).
      aspects: human-score aspects judged (each needs a template).
      data: ``"shared"``, ``"embedded"`` (SummEval only: 4 documents x 16 summaries),
        ``"embedded_wide"`` (SummEval only: 16 documents x 4 summaries) or a folder (STS-B
        and SemRel: also ``gs://bucket/prefix``).
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

    task: TaskName
    aspects: tuple[str, ...]
    data: str = "shared"
    split: str = "kfold"
    n_folds: int = opt(5, min=2)
    fold_seed: int = opt(0, min=0)
    dev_docs: tuple[str, ...] | None = None
    subset: SubsetSpec | None = None
    per_group: bool | None = None

    def where(self) -> str:
        return f"TaskSpec[{self.task}]" if self.task in TASKS else "TaskSpec"

    def check(self) -> None:
        w, facts = self.where(), TASKS[self.task]
        for i, a in enumerate(self.aspects):
            choose(f"{w}.aspects[{i}]", a, facts["aspects"])
        if self.data in ("embedded", "embedded_wide") and self.task != "summeval":
            raise ConfigError(f"{w}.data: {self.data!r} data exists for summeval only")
        if self.data not in ("embedded", "embedded_wide", "shared"):
            try:
                check_location(f"{w}.data", self.data)
            except LocationError as e:
                raise ConfigError(str(e)) from None
            if self.task == "summeval" and is_bucket(self.data):
                raise ConfigError(f"{w}.data: {self.data!r}: SummEval's files are read from a local folder "
                                  "(a bucket serves STS-B and SemRel)")
        choose(f"{w}.split", self.split, facts["splits"])
        if self.dev_docs is not None and self.split != "fixed_docs":
            raise ConfigError(f"{w}.dev_docs: only used with split='fixed_docs'")
        if self.per_group is None:  # a derived default, recorded as resolved
            object.__setattr__(self, "per_group", self.task == "summeval")

    @property
    def human_range(self) -> tuple[float, float]:
        return TASKS[self.task]["human_range"]
