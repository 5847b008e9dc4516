"""The judge tasks: one description type (`TaskSource`) for the built-in tasks and a user's file.

A `TaskSource` holds what a task is: its human-score range, its aspects, the split modes it
allows (the first is the default), the data splits the ``"original"`` mode uses as (dev, test),
the files a data folder must hold, and how its rows are read. `TASKS` holds the built-in ones
(SummEval, STS-B, SemRel2024, each read by its own file reader); `TaskSource.from_file` makes one
of a user's table (JSON Lines, CSV or Parquet, local or ``gs://``) and a `FieldMap`
(`jaxjudge.data.table`).

`load_task_data(task)` reads a task's examples as a `TaskSpec` of an experiment config describes
them (any object with ``task``, ``data``, ``split``, ``dev_docs``, ``subset`` attributes and a
``source()`` method giving its `TaskSource`), applies the documented subset and labels each
example's data split.

Data folders of the built-in tasks: ``"embedded"`` is the SummEval subset shipped in the package
(4 documents), ``"embedded_wide"`` the wide one (16 documents x 4 summaries, the demo's),
``"shared"`` the task's folder under the shared data directory (``$JAXJUDGE_DATA_DIR``, else
``../shared/data`` seen from the working directory or from the repository), anything else a
folder path; a folder (and ``$JAXJUDGE_DATA_DIR``) may be ``gs://bucket/prefix``
(`jaxjudge.store.location`), so that the hosts of a pod read one copy of the data. SummEval's
own files are read from local folders only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge.data.example import DataError, Example, score_array
from jaxjudge.data.pairs import SEMREL_RANGE, STSB_RANGE, load_semrel, load_stsb
from jaxjudge.data.summeval import (
    SUMMEVAL_ASPECTS,
    SUMMEVAL_DEV_DOC_IDS,
    load_summeval,
    load_summeval_subset,
    summeval_dev_doc_ids,
    summeval_wide_dir,
)
from jaxjudge.data.table import FILE_SPLITS, FieldMap, read_file_task
from jaxjudge.store.location import is_bucket, location

__all__ = ["SUMMEVAL_RANGE", "TASKS", "TaskData", "TaskSource", "resolve_data_dir", "task_dev_docs",
           "load_task_data"]

SUMMEVAL_RANGE = (1.0, 5.0)

# (folder or None, data splits to read) -> (examples, split label per example)
Reader = Callable[[Any, tuple[str, ...]], tuple[list[Example], list[str]]]


@dataclass(frozen=True)
class TaskSource:
    """What a judge task is: the one description the built-in tasks and a user's file share.

    Attributes:
      name: the task's name (store keys, tables).
      aspects: the human-score aspects it holds.
      human_range: ``(lo, hi)`` of its human scores.
      splits: the split modes it allows (``"kfold"``, ``"fixed_docs"``, ``"original"``); the
        first is the default.
      original: the data splits the ``"original"`` mode uses as (dev, test); None: no such mode.
      files: the files it reads: names inside a data folder (built-in tasks), or the one table
        path (a user's file).
      shared: its folder name under the shared data directory (built-in tasks), else None.
      fields: a user's file: how its columns become examples (None for the built-in tasks).
      reader: reads its rows (`Reader`); built-in tasks have their own readers.
    """

    name: str
    aspects: tuple[str, ...]
    human_range: tuple[float, float]
    splits: tuple[str, ...]
    original: tuple[str, str] | None
    files: tuple[str, ...]
    shared: str | None = None
    fields: FieldMap | None = None
    reader: Reader | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_file(cls, name: str, path: str, fields: FieldMap) -> TaskSource:
        """A user's table as a task: split modes ``"original"`` (its split column) or ``"kfold"``."""
        modes = ("original", "kfold") if fields.split else ("kfold",)
        return cls(name=name, aspects=tuple(fields.human), human_range=fields.human_range, splits=modes,
                   original=FILE_SPLITS if fields.split else None, files=(path,), fields=fields,
                   reader=lambda folder, splits: read_file_task(fields, path))

    @property
    def is_file(self) -> bool:
        """A user's table (not a built-in task's folder)."""
        return self.fields is not None

    def read(self, folder: Any, mode: str) -> tuple[list[Example], np.ndarray]:
        """Its examples and each one's data split label, for a split mode."""
        splits = () if self.original is None else self.original if mode == "original" else self.original[1:]
        examples, labels = self.reader(folder, splits)
        return examples, np.asarray(labels, dtype=object)


def _read_summeval(folder: Any, splits: tuple[str, ...]) -> tuple[list[Example], list[str]]:
    examples = load_summeval_subset() if folder is None else load_summeval(folder)
    return examples, ["all"] * len(examples)


def _split_reader(load: Callable[[Any, str], list[Example]]) -> Reader:
    def read(folder: Any, splits: tuple[str, ...]) -> tuple[list[Example], list[str]]:
        examples, labels = [], []
        for s in splits:
            part = load(folder, s)
            examples += part
            labels += [s] * len(part)
        return examples, labels

    return read


TASKS: dict[str, TaskSource] = {
    "summeval": TaskSource("summeval", SUMMEVAL_ASPECTS, SUMMEVAL_RANGE, ("kfold", "fixed_docs"), None,
                           ("summeval_docs.jsonl", "summeval_summaries.jsonl"), "summeval", reader=_read_summeval),
    "stsb": TaskSource("stsb", ("similarity",), STSB_RANGE, ("original", "kfold"), ("dev", "test"),
                       ("stsb_dev.jsonl", "stsb_test.jsonl"), "stsb", reader=_split_reader(load_stsb)),
    # The SemRel2024 English test labels are not distributed: hyper-parameters are chosen on
    # the train split (a documented sample of it, see the subset's max_per_split) and reported
    # on the official dev split.
    "semrel": TaskSource("semrel", ("relatedness",), SEMREL_RANGE, ("original", "kfold"), ("train", "dev"),
                         ("semrel_eng_train.jsonl", "semrel_eng_dev.jsonl"), "semrel2024",
                         reader=_split_reader(load_semrel)),
}


def _shared_data_candidates() -> list[Any]:
    env = os.environ.get("JAXJUDGE_DATA_DIR")
    if env:
        return [location(env, "$JAXJUDGE_DATA_DIR").expanduser()]
    repo = Path(__file__).resolve().parents[2]
    return [Path.cwd() / ".." / "shared" / "data", repo / ".." / "shared" / "data"]


def resolve_data_dir(task: Any) -> Any:
    """The folder holding a task's files (a `pathlib.Path`, or a `jaxjudge.store.bucket.BucketPath`
    for ``gs://bucket/prefix``); None for the embedded SummEval subset."""
    if task.data == "embedded":
        return None
    if task.data == "embedded_wide":
        return summeval_wide_dir()
    if task.source().is_file:
        return None
    if task.data == "shared":
        candidates = [c / TASKS[task.task].shared for c in _shared_data_candidates()]
        for c in candidates:
            if is_bucket(c):  # asked for by $JAXJUDGE_DATA_DIR: no request to the bucket here
                return c
            if c.is_dir():
                return c.resolve()
        return candidates[0]
    return location(task.data, f"task {task.task!r} data").expanduser()


@dataclass
class TaskData:
    """A task's examples after the configured subset, with each example's data split.

    Attributes:
      task: the spec.
      examples: `jaxjudge.data.Example` records in file order.
      split_labels: `[N]` data split of each example (``"all"`` for SummEval).
      dev_docs: the dev documents of a ``fixed_docs`` split, else None.
      notes: the documented cuts applied.
    """

    task: Any
    examples: list
    split_labels: np.ndarray
    dev_docs: tuple[str, ...] | None
    notes: list[str]

    def ids(self) -> np.ndarray:
        return np.asarray([ex.id for ex in self.examples])

    def groups(self) -> np.ndarray:
        return np.asarray([ex.group for ex in self.examples])

    @property
    def human_range(self) -> tuple[float, float]:
        """``(lo, hi)`` of the task's human scores."""
        return self.task.source().human_range

    def human(self, aspect: str) -> np.ndarray:
        return score_array(self.examples, aspect)


def task_dev_docs(task: Any) -> tuple[str, ...] | None:
    """The dev documents of a ``fixed_docs`` split (explicit, the data's file, or the package's)."""
    if task.split != "fixed_docs":
        return None
    if task.dev_docs is not None:
        return tuple(task.dev_docs)
    folder = resolve_data_dir(task)
    if folder is not None and (folder / "dev_doc_ids.txt").is_file():
        return tuple(summeval_dev_doc_ids(folder))
    return tuple(SUMMEVAL_DEV_DOC_IDS)


def _sample_groups(examples, labels, split: str, limit: int, seed: int) -> np.ndarray:
    """Keep mask: a seeded sample of whole groups of one split holding at most ``limit`` examples."""
    in_split = labels == split
    groups = np.asarray([ex.group for ex in examples])
    names, counts = np.unique(groups[in_split], return_counts=True)
    order = np.random.default_rng(seed).permutation(len(names))
    kept, total = set(), 0
    for i in order:
        if total + counts[i] <= limit:
            kept.add(names[i])
            total += counts[i]
    return ~in_split | np.isin(groups, list(kept))


def load_task_data(task: Any) -> TaskData:
    """Load a task's examples, apply its documented subset, label each example's split.

    Raises:
      DataError: a subset naming documents or splits that are not in the data.
    """
    source = task.source()
    folder = resolve_data_dir(task)
    examples, labels = source.read(folder, task.split)
    where = source.files[0] if source.is_file else folder or "embedded SummEval subset"
    dev_docs = task_dev_docs(task)
    notes: list[str] = []
    sub = task.subset
    if sub is not None:
        groups = np.asarray([ex.group for ex in examples])
        keep = np.ones(len(examples), bool)
        if sub.doc_ids is not None:
            missing = sorted(set(sub.doc_ids) - set(groups.tolist()))
            if missing:
                raise DataError(where, None, "subset.doc_ids",
                                f"task {task.task!r}: documents not in the data: {missing[:5]}")
            keep &= np.isin(groups, list(sub.doc_ids))
        if sub.n_docs is not None:
            protected = set(dev_docs or ())
            others = sorted(set(groups[keep].tolist()) - protected)
            keep &= np.isin(groups, sorted(protected) + others[: sub.n_docs])
        for field, named in (("exclude", sub.exclude), ("max_per_split", sub.max_per_split),
                             ("held_out", sub.held_out)):
            for s in named or {}:
                if s not in set(labels.tolist()):
                    raise DataError(where, None, f"subset.{field}",
                                    f"task {task.task!r}: names split {s!r}, not loaded")
        for s, limit in (sub.exclude or {}).items():
            keep &= ~(_sample_groups(examples, labels, s, limit, sub.seed) & (labels == s))
        held = np.zeros(len(examples), bool)
        for s, limit in (sub.held_out or {}).items():
            # the groups of split s outside its selection sample, sampled with the next seed
            in_sample = _sample_groups(examples, labels, s, sub.max_per_split[s], sub.seed) & (labels == s)
            rest = labels == s
            rest &= ~in_sample
            pool = np.where(rest, labels, "")  # only the rest is eligible
            held |= _sample_groups(examples, pool, s, limit, sub.seed + 1) & rest
        for s, limit in (sub.max_per_split or {}).items():
            keep &= _sample_groups(examples, labels, s, limit, sub.seed) | held
        if held.any():
            report = source.original[1]
            keep &= (labels != report) | held
            labels = np.where(held, report, labels).astype(object)
        examples = [ex for ex, k in zip(examples, keep) if k]
        labels = labels[keep]
        n_groups = len({ex.group for ex in examples})
        notes.append(f"{task.task}: subset of {len(examples)} examples in {n_groups} groups ({sub.reason})")
    return TaskData(task=task, examples=examples, split_labels=np.asarray(labels, dtype=str), dev_docs=dev_docs,
                    notes=notes)
