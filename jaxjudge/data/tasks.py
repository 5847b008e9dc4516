"""The judge tasks the experiments run: their facts, where their files are, and loading them.

`TASKS` holds, per task, the human-score range, the aspects, the split modes (the first is the
default), the data splits the ``"original"`` mode uses as (dev, test), the files a folder must
hold, and the task's folder name under the shared data directory.

`load_task_data(task)` reads a task's examples as a `TaskSpec` of an experiment config describes
them (any object with ``task``, ``data``, ``split``, ``dev_docs`` and ``subset`` attributes),
applies the documented subset and labels each example's data split.

Data folders: ``"embedded"`` is the SummEval subset shipped in the package (4 documents),
``"embedded_wide"`` the wide one (16 documents x 4 summaries, the demo's),
``"shared"`` the task's folder under the shared data directory (``$JAXJUDGE_DATA_DIR``, else
``../shared/data`` seen from the working directory or from the repository), anything else a
folder path; a folder (and ``$JAXJUDGE_DATA_DIR``) may be ``gs://bucket/prefix``
(`jaxjudge.store.location`), so that the hosts of a pod read one copy of the data. SummEval's
own files are read from local folders only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge.data.example import DataError, score_array
from jaxjudge.data.pairs import SEMREL_RANGE, STSB_RANGE, load_semrel, load_stsb
from jaxjudge.data.summeval import (
    SUMMEVAL_ASPECTS,
    SUMMEVAL_DEV_DOC_IDS,
    load_summeval,
    load_summeval_subset,
    summeval_dev_doc_ids,
    summeval_wide_dir,
)
from jaxjudge.store.location import is_bucket, location

__all__ = ["SUMMEVAL_RANGE", "TASKS", "TaskData", "resolve_data_dir", "task_dev_docs", "load_task_data"]

SUMMEVAL_RANGE = (1.0, 5.0)

TASKS: dict[str, dict[str, Any]] = {
    "summeval": {
        "human_range": SUMMEVAL_RANGE,
        "aspects": SUMMEVAL_ASPECTS,
        "splits": ("kfold", "fixed_docs"),
        "original": None,
        "files": ("summeval_docs.jsonl", "summeval_summaries.jsonl"),
        "shared": "summeval",
    },
    "stsb": {
        "human_range": STSB_RANGE,
        "aspects": ("similarity",),
        "splits": ("original", "kfold"),
        "original": ("dev", "test"),
        "files": ("stsb_dev.jsonl", "stsb_test.jsonl"),
        "shared": "stsb",
    },
    # The SemRel2024 English test labels are not distributed: hyper-parameters are chosen on
    # the train split (a documented sample of it, see the subset's max_per_split) and reported
    # on the official dev split.
    "semrel": {
        "human_range": SEMREL_RANGE,
        "aspects": ("relatedness",),
        "splits": ("original", "kfold"),
        "original": ("train", "dev"),
        "files": ("semrel_eng_train.jsonl", "semrel_eng_dev.jsonl"),
        "shared": "semrel2024",
    },
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
    if task.data == "shared":
        candidates = [c / TASKS[task.task]["shared"] for c in _shared_data_candidates()]
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
    folder = resolve_data_dir(task)
    if task.task == "summeval":
        examples = load_summeval_subset() if folder is None else load_summeval(folder)
        labels = np.full(len(examples), "all", dtype=object)
    else:
        original = TASKS[task.task]["original"]
        splits = original if task.split == "original" else original[1:]
        loader = load_stsb if task.task == "stsb" else load_semrel
        examples, labels = [], []
        for s in splits:
            part = loader(folder, s)
            examples += part
            labels += [s] * len(part)
        labels = np.asarray(labels, dtype=object)
    dev_docs = task_dev_docs(task)
    notes: list[str] = []
    sub = task.subset
    if sub is not None:
        groups = np.asarray([ex.group for ex in examples])
        keep = np.ones(len(examples), bool)
        if sub.doc_ids is not None:
            missing = sorted(set(sub.doc_ids) - set(groups.tolist()))
            if missing:
                raise DataError(folder or "embedded SummEval subset", None, "subset.doc_ids",
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
                    raise DataError(folder or "embedded SummEval subset", None, f"subset.{field}",
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
            report = TASKS[task.task]["original"][1]
            keep &= (labels != report) | held
            labels = np.where(held, report, labels).astype(object)
        examples = [ex for ex, k in zip(examples, keep) if k]
        labels = labels[keep]
        n_groups = len({ex.group for ex in examples})
        notes.append(f"{task.task}: subset of {len(examples)} examples in {n_groups} groups ({sub.reason})")
    return TaskData(task=task, examples=examples, split_labels=np.asarray(labels, dtype=str), dev_docs=dev_docs,
                    notes=notes)
