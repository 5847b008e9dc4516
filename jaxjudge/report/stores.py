"""Reading an experiment's extraction stores: which store holds a job, and each cell's arrays.

`load_cells(cfg, StoreIndex(root))` finds each cell's stores under ``root``, checks that they
were written by the configured model files and under the same setup, and aligns their arrays
with the task's examples (`jaxjudge.data.tasks.load_task_data`) as `CellArrays`. ``cfg`` is an
`jaxjudge.experiment.ExperimentConfig` (read by its fields).

Store contract. Each extraction job (a `jaxjudge.jobs` kind; the plan is
`jaxjudge.experiment.extraction_plan`) has its own store folder (anywhere under ``store_root``)
whose key holds at least the job's `ExtractionJob.store_match` entries:

    {"role": ..., "model": <model name>, "task": ..., "aspect": ..., "scale": "1-5"}

(``task``/``aspect`` are None for ``random_r``), its `ExtractionJob.key_extra` entries (the
assistant and fixed settings of contrastive generation), its ``setup``, and ``"model_sha256"``,
the sha256 of the model file, checked against the configured file (``"assistant_sha256"``
likewise). The writer (`jaxjudge.experiment.run_extractions`) keys stores through the same job
objects; each kind's module lists its arrays (``arrays``) and reads them (`ExtractionJob.read`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge.data.tasks import TaskData, load_task_data
from jaxjudge.jobs import (
    CONTENT_FREE,
    KEYED_ENGINE_OPTIONS,
    ExtractionJob,
    StoreLookupError,
    content_free_examples,
    contrastive_generate_match,
)
from jaxjudge.models.source import content_sha256, is_remote
from jaxjudge.prompts import ScoreScale
from jaxjudge.report.cell_inputs import CellArrays
from jaxjudge.report.methods import cell_needs
from jaxjudge.store import Store
from jaxjudge.store.location import location

__all__ = [
    "Cell",
    "ExtractionJob",
    "StoreLookupError",
    "StoreModelMismatch",
    "StoreIndex",
    "cells",
    "check_store_model",
    "store_match",
    "contrastive_generate_match",
    "CONTENT_FREE",
    "KEYED_ENGINE_OPTIONS",
    "content_free_examples",
    "job_setup",
    "key_mismatches",
    "load_cells",
]


class StoreModelMismatch(StoreLookupError):
    """A store was written by a different model file than the config names."""


# -- the grid ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One (judge, task, aspect, scale) of an experiment's grid."""

    judge: str
    task: str
    aspect: str
    scale: str

    def label(self) -> str:
        return f"{self.judge}/{self.task}/{self.aspect}/{self.scale}"


def cells(cfg: Any) -> list[Cell]:
    """Every cell of an experiment config's grid, judges slowest, scales fastest."""
    return [
        Cell(j, t.task, a, s) for j in cfg.judge_names for t in cfg.tasks for a in t.aspects for s in cfg.scales
    ]


def store_match(job: ExtractionJob) -> dict[str, Any]:
    """The key entries a job's store must hold (`jaxjudge.jobs.ExtractionJob.store_match`)."""
    return job.store_match()


def job_setup(cfg: Any, job: ExtractionJob, examples: Any) -> dict[str, Any]:
    """A job's setup entry (`jaxjudge.jobs.ExtractionJob.setup`)."""
    return job.setup(cfg, examples)


def key_mismatches(stored: Mapping[str, Any], wanted: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``"field: stored X, wanted Y"`` for each entry of ``wanted`` the stored key differs on
    (nested mappings compared field by field, named with dots)."""
    out = []
    for k, v in wanted.items():
        got = stored.get(k) if isinstance(stored, Mapping) else None
        if isinstance(v, Mapping) and isinstance(got, Mapping):
            # Within a nested mapping an entry on either side counts (an option set at
            # extraction and unset now differs too).
            out += key_mismatches(got, {**{e: None for e in got}, **v}, f"{prefix}{k}.")
        elif got != v:
            out.append(f"{prefix}{k}: stored {got!r}, wanted {v!r}")
    return out


class StoreIndex:
    """All stores under a folder, looked up by key entries.

    Args:
      root: folder searched (recursively) for store manifests.
      match: job -> key entries (default `store_match`); override it if the engine names
        its key fields differently.
    """

    def __init__(self, root: str | Path, match: Callable[[ExtractionJob], dict[str, Any]] = store_match):
        self.root = location(root, "store root")
        if not self.root.is_dir():
            raise StoreLookupError(f"store root {self.root} does not exist (run `jaxjudge extract` first)")
        self.match = match
        self.read: dict[str, dict[str, Any]] = {}  # store folder -> its key and key hash, as loaded
        self.stores = []
        for manifest in sorted(self.root.rglob("manifest.json")):
            try:
                self.stores.append(Store.open(manifest.parent))
            except Exception:  # noqa: BLE001 -- a foreign manifest.json is not a store; skip it
                continue

    def find(self, job: ExtractionJob, extra: Mapping[str, Any] | None = None):
        """The unique store holding ``job`` (and the ``extra`` key entries, if given).

        Raises:
          StoreLookupError: none (naming the closest store and how its key differs) or several.
        """
        want = json.loads(json.dumps({**self.match(job), **(extra or {})}))
        hits = [s for s in self.stores if all(s.key.get(k) == v for k, v in want.items())]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise StoreLookupError(
                f"{len(hits)} stores under {self.root} match {want}: {[str(s.root) for s in hits[:5]]}; "
                "remove the stale ones or use separate store roots"
            )
        shown = {k: v for k, v in want.items() if k != "setup"}
        msg = f"no store under {self.root} holds {shown}"
        if not self.stores:
            raise StoreLookupError(msg + " (run `jaxjudge extract` for this config)")
        best = max(self.stores, key=lambda s: (sum(s.key.get(k) == v for k, v in want.items() if k != "setup"),
                                               s.key.get("setup") == want.get("setup")))
        diff = key_mismatches(best.key, want)
        if "setup" in want and "setup" not in best.key and len(diff) == 1:
            raise StoreLookupError(
                f"store {best.root} was written before stores recorded their setup (prompt style, keyed engine "
                "options, inputs digest): run `jaxjudge store upgrade CONFIG` once with the config that wrote it, "
                "or delete it and run `jaxjudge extract`")
        if all(d.startswith("setup.") for d in diff):
            raise StoreLookupError(
                f"store {best.root} was extracted under another config ({'; '.join(diff)}): extract again "
                "with this config (into another store root), or report with the config that wrote it")
        raise StoreLookupError(msg + f" (run `jaxjudge extract` for this config); closest is {best.root} "
                               f"({'; '.join(diff)})")

    def load(self, job: ExtractionJob, cfg: Any, *, check_model: bool = True,
             extra: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Arrays of a job's store, after checking the model that wrote it.

        ``extra``: more key entries the store must hold (see `find`). A store naming an
        ``assistant`` with an ``assistant_sha256`` has that model checked too.
        """
        store = self.find(job, extra)
        self.read[str(store.root)] = {"key_hash": store.key_hash, "key": store.key}
        dtype = getattr(cfg, "dtype", None)
        if dtype is not None and store.key.get("dtype", dtype) != dtype:
            raise StoreLookupError(f"store {store.root} was extracted in {store.key['dtype']}, the config asks for "
                                   f"{dtype} (ExperimentConfig.dtype): extract again into another store root")
        if check_model:
            check_store_model(store.key, cfg.model(job.model), store.root)
            asst = store.key.get("assistant")
            if asst is not None and "assistant_sha256" in store.key:
                check_store_model({"model_sha256": store.key["assistant_sha256"]}, cfg.model(asst), store.root)
        return store.load()


def check_store_model(key: Mapping[str, Any], model: Any, where: Any = "store") -> None:
    """Raise `StoreModelMismatch` if a store's ``model_sha256`` is not the configured model's.

    The configured sha256 is ``ModelSpec.sha256`` or, if absent, the hash of the model file
    when it is present (a remote source's from its converted entry when cached: no byte read,
    `jaxjudge.models.source.content_sha256`); with neither there is nothing to compare and the
    check passes.
    """
    stored = key.get("model_sha256")
    if stored is None:
        return
    expected = model.sha256
    if expected is None:
        try:
            path = model.resolved_path()
        except ValueError:  # the configured model cannot be located (a `ConfigError`): nothing to compare
            return
        if not (is_remote(path) or path.is_file()):
            return
        expected = content_sha256(path)
    if stored != expected:
        raise StoreModelMismatch(
            f"{where} was written by a model with sha256 {stored}, but model {model.name!r} "
            f"({model.path}) has sha256 {expected}: the store comes from another model file"
        )


def load_cells(
    cfg: Any,
    index: StoreIndex,
    task_data: Mapping[str, TaskData] | None = None,
    *,
    check_model: bool = True,
) -> dict[Cell, CellArrays]:
    """Read every cell's arrays from the stores and align them with the task data.

    A cell reads the jobs its configured methods need (`jaxjudge.report.methods.cell_needs`),
    each through its job object: looked up by its key and setup, read and aligned by the job
    kind, placed in the cell's arrays by the method's need.
    """
    task_data = dict(task_data or {t.task: load_task_data(t) for t in cfg.tasks})
    needs = cell_needs(cfg.methods)
    out: dict[Cell, CellArrays] = {}
    setups: dict[tuple, dict[str, Any]] = {}  # a job's setup does not depend on its model
    for cell in cells(cfg):
        td = task_data[cell.task]
        ids = td.ids()
        kwargs: dict[str, Any] = {"random": {}}
        for need in needs:
            job = need.job(cfg, cell.judge, cell.task, cell.aspect, cell.scale)
            if job is None:  # a need of the judge's assistant, and the judge has none
                continue
            where = (type(job), job.task, job.aspect, job.scale)
            if where not in setups:
                setups[where] = job.setup(cfg, td.examples)
            arrays = index.load(job, cfg, check_model=check_model,
                                extra={**job.key_extra(cfg), "setup": setups[where]})
            for name, value in need.into(job.read(arrays, ids)).items():
                if isinstance(value, dict):
                    kwargs.setdefault(name, {}).update(value)
                else:
                    kwargs[name] = value
        out[cell] = CellArrays(
            scale=ScoreScale.parse(cell.scale), human=td.human(cell.aspect), human_range=td.human_range,
            groups=td.groups(), example_ids=ids, split_labels=td.split_labels, **kwargs,
        )
    return out
