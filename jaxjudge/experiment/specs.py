"""The parts of an experiment config: its models (`ModelSpec`), tasks (`TaskSpec`) and
documented data cuts (`SubsetSpec`), the model-path resolution and the engine options a config
may set.

`jaxjudge.experiment.schema` builds `ExperimentConfig` from these and re-exports every public
name here, so ``from jaxjudge.experiment.schema import ModelSpec`` keeps working.

Symbolic paths keep configs portable (no machine-specific paths in committed files):

* model ``path``: ``"default"`` is the embedded SmolLM2 judge (`jaxjudge.models.gguf.
  default_model_path`), ``"gguf:<file>"`` a file in ``$JAXJUDGE_GGUF_DIR`` (default
  ``~/.cache/jaxjudge/gguf``, filled by ``../shared/models/get_models.sh``), ``"org/name"`` a
  Hugging Face Hub repo id (fetched with ``huggingface_hub.snapshot_download`` into the Hub
  cache; offline, the snapshot already there; online, only when its converted entry, keyed by
  the commit, is not cached), ``gs://bucket/...`` a GGUF object or a prefix
  holding a Hugging Face folder (`jaxjudge.models.source`: known by its objects' generations,
  fetched only when its converted entry is not cached), anything else a path (``~`` expanded):
  a GGUF file or a Hugging Face model folder.
* task ``data``: ``"embedded"``, ``"shared"`` or a folder (`jaxjudge.data.tasks`); a user's task
  names its table with ``file`` instead.
"""

from __future__ import annotations

import difflib
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxjudge.data.table import FieldMap
from jaxjudge.data.tasks import TASKS, TaskSource
from jaxjudge.engine import EngineOptions
from jaxjudge.experiment.typed import ConfigError, Typed, choose, coerce, opt
from jaxjudge.models.gguf import default_model_path, gguf_dir
from jaxjudge.models.hf import is_repo_id, resolve_source
from jaxjudge.models.source import hub_identity
from jaxjudge.prompts import Template, TemplateError, get_template
from jaxjudge.prompts.library import template_from_config
from jaxjudge.store.location import LocationError, check_location, is_bucket, location

__all__ = ["ModelSpec", "SubsetSpec", "TaskSpec", "engine_options", "resolve_model_path"]

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


def is_hub_id(path: str) -> bool:
    """Whether a model path is a Hugging Face Hub repo id (``org/name``, `jaxjudge.models.hf.is_repo_id`):
    not a local path that exists, no ``.gguf`` suffix."""
    return is_repo_id(path) and not path.endswith(".gguf") and not Path(path).exists()


@functools.lru_cache(maxsize=None)
def _hub_snapshot(repo_id: str) -> Path:
    # One fetch per id and process: every check and job asks for the same folder.
    return resolve_source(repo_id)


class HubRepo(str):
    """A Hub repo id as a resolved model path, where the Hub answers for it: the model is known
    by its commit and file hashes (`jaxjudge.models.source.hub_identity`) and fetched only when
    its converted entry is not cached. Answers the few questions the checks ask of a path."""

    @property
    def name(self) -> str:
        return self.partition("@")[0].rpartition("/")[2]

    suffix = ""

    def exists(self) -> bool:
        return True  # the Hub named its commit

    def is_file(self) -> bool:
        return False

    def is_dir(self) -> bool:
        return False


@functools.lru_cache(maxsize=None)
def _hub_answers(repo_id: str) -> bool:
    # One question per id and process: every check and job resolves the same path.
    return hub_identity(repo_id) is not None


def resolve_model_path(model: ModelSpec) -> Any:
    """Where a model's file (or folder) is expected, a `pathlib.Path`, or a ``gs://`` source's
    `jaxjudge.store.bucket.BucketPath` (nothing of it read); does not check that it exists. A
    Hub id the Hub answers for is a `HubRepo` (its metadata asked, nothing fetched: a converted
    entry keyed by its commit serves the run); offline or unanswered, its snapshot in the Hub
    cache (`jaxjudge.models.hf.resolve_source`, fetched where it can be), since its folder is
    only known then.

    Raises:
      ConfigError: no embedded judge for ``"default"``; a Hub id that cannot be fetched (one line
        naming the id); a ``gs://`` URL no installed library serves.
    """
    if model.path.startswith("gguf:"):
        return gguf_dir() / model.path[len("gguf:"):]
    if model.path == "default":
        try:
            return default_model_path()
        except FileNotFoundError as e:
            raise ConfigError(f"model {model.name!r} (path 'default'): {e}") from None
    if is_bucket(model.path):
        try:
            return location(model.path, f"{model.where()}.path")
        except LocationError as e:
            raise ConfigError(str(e)) from None
    if is_hub_id(model.path):
        if _hub_answers(model.path):
            return HubRepo(model.path)
        try:
            return _hub_snapshot(model.path)
        except (FileNotFoundError, ValueError) as e:
            why = (str(e.__cause__ or e).strip().splitlines() or [type(e).__name__])[0]
            raise ConfigError(f"model {model.name!r}: Hugging Face Hub id {model.path!r} cannot be fetched "
                              f"(offline or unknown repo: {why})") from None
    return Path(model.path).expanduser()


@dataclass(frozen=True)
class ModelSpec(Typed):
    """A judge model.

    Attributes:
      name: short label used in tables, store keys and figure titles (e.g. ``"qwen05"``).
      path: ``"default"``, ``"gguf:<file>"``, a GGUF file, a Hugging Face model folder, or a Hub
        repo id ``org/name`` (see the module docstring).
      sha256: expected sha256 of the model file; checked by `validate_config(check_sha=True)`
        and recorded in run metadata. None: computed when needed.
    """

    name: str
    path: str
    sha256: str | None = None

    def where(self) -> str:
        return f"ModelSpec[{self.name}]" if isinstance(self.name, str) else "ModelSpec"

    def resolved_path(self) -> Any:
        """Where the model's file (or folder) is expected (`resolve_model_path`); does not check
        that it exists."""
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

    A task is a built-in one (`jaxjudge.data.tasks.TASKS`: ``"summeval"``, ``"stsb"``,
    ``"semrel"``) or a user's table named by ``file``; both are read through the same
    description (`TaskSpec.source`, a `jaxjudge.data.tasks.TaskSource`).

    Attributes:
      task: a built-in task's name, or any name for a user's ``file`` (store keys, tables).
      aspects: human-score aspects judged (each needs a template).
      data: built-in tasks: ``"shared"``, ``"embedded"`` (SummEval only: 4 documents x 16
        summaries), ``"embedded_wide"`` (SummEval only: 16 documents x 4 summaries) or a folder
        (STS-B and SemRel: also ``gs://bucket/prefix``). Not used with ``file``.
      split: ``"kfold"``: grouped k-fold, each fold's dev is one fold and its test the other
        folds (dev:test = 1:4 with 5 folds, as in the random-number paper); ``"fixed_docs"``:
        SummEval's 10-document dev split (``dev_doc_ids.txt``) and the other documents as
        test, as in the contrastive-decoding paper; ``"original"``: the data set's own splits
        (STS-B dev/test; SemRel train/dev; a user's ``split_field``).
      n_folds: folds of ``"kfold"``.
      fold_seed: seed of the group shuffle of ``"kfold"``.
      dev_docs: explicit dev documents for ``"fixed_docs"`` (None: the data's
        ``dev_doc_ids.txt``, or the package's copy of it).
      subset: a documented cut of the data, or None for all of it.
      per_group: also report per-document (summary-level) metrics; default True for SummEval.
      file: a user's table (JSON Lines, CSV or Parquet; a path or ``gs://bucket/object``);
        None for a built-in task.
      text_fields: the columns the templates fill (None: the templates' placeholders).
      human_field: the column of human scores: one name for every aspect, or aspect -> column
        (None: the column named like the aspect).
      human_range: ``(lo, hi)`` the human scores lie in (required with ``file``).
      id_field: the column of unique item ids (None: the row number).
      group_field: the column whose equal values form a group, resampled and split together (None:
        each item its own group).
      split_field: the column holding ``"dev"`` or ``"test"`` per row (with ``split="original"``);
        None: the seeded grouped k-fold.
      templates: aspect -> a template file path or the template text itself (a text holding a
        ``{{`` placeholder or a line break is text, anything else a path), in
        `jaxjudge.prompts.Template` syntax. A built-in task's aspects default to its built-in
        templates (`jaxjudge.prompts.get_template`).
    """

    task: str
    aspects: tuple[str, ...]
    data: str = "shared"
    split: str = "kfold"
    n_folds: int = opt(5, min=2)
    fold_seed: int = opt(0, min=0)
    dev_docs: tuple[str, ...] | None = None
    subset: SubsetSpec | None = None
    per_group: bool | None = None
    file: str | None = None
    text_fields: tuple[str, ...] | None = None
    human_field: str | Mapping[str, str] | None = None
    human_range: tuple[float, float] | None = None
    id_field: str | None = None
    group_field: str | None = None
    split_field: str | None = None
    templates: Mapping[str, str] | None = None

    def where(self) -> str:
        return f"TaskSpec[{self.task}]" if isinstance(self.task, str) else "TaskSpec"

    def check(self) -> None:
        w = self.where()
        _check_name(f"{w}.task", self.task)
        if self.file is None:
            _check_builtin(self)
        else:
            _check_file_task(self)
        for a in self.templates or {}:
            choose(f"{w}.templates key", a, self.aspects)
        facts = self.source()
        for i, a in enumerate(self.aspects):
            choose(f"{w}.aspects[{i}]", a, facts.aspects)
        choose(f"{w}.split", self.split, facts.splits)
        if self.dev_docs is not None and self.split != "fixed_docs":
            raise ConfigError(f"{w}.dev_docs: only used with split='fixed_docs'")
        if self.per_group is None:  # a derived default, recorded as resolved
            object.__setattr__(self, "per_group", self.task == "summeval" and self.file is None)

    def source(self) -> TaskSource:
        """The task's description: the built-in one, or this spec's file and field map."""
        if self.file is None:
            return TASKS[self.task]
        return TaskSource.from_file(self.task, self.file, self.field_map())

    def field_map(self) -> FieldMap:
        """How a user file's columns become examples (see the attributes)."""
        human = self.human_field if self.human_field is not None else {a: a for a in self.aspects}
        if isinstance(human, str):
            human = {a: human for a in self.aspects}
        text = self.text_fields
        if text is None:
            text = tuple(dict.fromkeys(p for a in self.aspects for p in self.template(a).placeholders()))
        return FieldMap(text=tuple(text), human=dict(human), human_range=tuple(self.human_range),
                        id=self.id_field, group=self.group_field, split=self.split_field)

    def template(self, aspect: str) -> Template:
        """The template of one aspect: the config's (``templates``), else the built-in one.

        Raises:
          ConfigError: no template for the aspect, a template file missing, or a malformed one.
        """
        given = (self.templates or {}).get(aspect)
        try:
            if given is not None:
                return template_from_config(given, name=f"{self.task}/{aspect}")
            if self.file is not None:
                raise ConfigError(f"{self.where()}.templates: no template for aspect {aspect!r} "
                                  "(give a file path or the template text)")
            return get_template(self.task, aspect)
        except (KeyError, TemplateError, OSError) as e:
            raise ConfigError(f"{self.where()}: {e.args[0] if isinstance(e, KeyError) else e}") from None

    @property
    def original(self) -> tuple[str, str] | None:
        """The data splits the ``"original"`` mode uses as (dev, test)."""
        return self.source().original


def _check_builtin(task: TaskSpec) -> None:
    w = task.where()
    if task.task not in TASKS:
        close = difflib.get_close_matches(task.task, list(TASKS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{w}.task: unknown task {task.task!r}{hint}; built-in tasks: {list(TASKS)}, "
                          "or name your data with TaskSpec.file")
    for name in ("text_fields", "human_field", "human_range", "id_field", "group_field", "split_field"):
        if getattr(task, name) is not None:
            raise ConfigError(f"{w}.{name}: only used with TaskSpec.file (a user's table)")
    if task.data in ("embedded", "embedded_wide") and task.task != "summeval":
        raise ConfigError(f"{w}.data: {task.data!r} data exists for summeval only")
    if task.data not in ("embedded", "embedded_wide", "shared"):
        try:
            check_location(f"{w}.data", task.data)
        except LocationError as e:
            raise ConfigError(str(e)) from None
        if task.task == "summeval" and is_bucket(task.data):
            raise ConfigError(f"{w}.data: {task.data!r}: SummEval's files are read from a local folder "
                              "(a bucket serves STS-B and SemRel)")


def _check_file_task(task: TaskSpec) -> None:
    w = task.where()
    if task.task in TASKS:
        raise ConfigError(f"{w}.task: {task.task!r} is a built-in task; give your file's task another name")
    if task.data != "shared":
        raise ConfigError(f"{w}.data: not used with TaskSpec.file (the file is the data)")
    try:
        check_location(f"{w}.file", task.file)
    except LocationError as e:
        raise ConfigError(str(e)) from None
    if task.human_range is None:
        raise ConfigError(f"{w}.human_range: required with TaskSpec.file: (lo, hi) of the human scores")
    lo, hi = task.human_range
    if not lo < hi:
        raise ConfigError(f"{w}.human_range: need lo < hi, got {tuple(task.human_range)}")
    if isinstance(task.human_field, Mapping):
        for a in task.aspects:
            if a not in task.human_field:
                raise ConfigError(f"{w}.human_field: no column for aspect {a!r}")
    if task.split_field is not None and task.split != "original":
        raise ConfigError(f"{w}.split_field: set split='original' to use the file's own dev/test column")
    if task.split == "original" and task.split_field is None:
        raise ConfigError(f"{w}.split: 'original' needs split_field (the column holding 'dev' or 'test')")
