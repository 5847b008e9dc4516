"""From cached extraction arrays to `Results`, with no forward pass.

Two entry points:

* `report_from_arrays(arrays, cfg)`: a mapping `Cell -> CellArrays` (built by hand, in a
  notebook, or by `jaxjudge.report.stores.load_cells`) to `Results`;
* `report_from_store(store_root, cfg)`: finds each cell's stores under ``store_root`` (see
  `jaxjudge.report.stores` for the store contract), checks that they were written by the
  configured model files, loads the human scores and groups from the task's data, aligns
  everything on example ids and calls `report_from_arrays`.

``cfg`` is an `jaxjudge.experiment.ExperimentConfig` or the run's config resolved once
(`jaxjudge.jobs.RunSpec`, which ``jaxjudge report`` passes: `jaxjudge.experiment.report_run`),
read by its fields and lookups (``task``, ``model``, ``assistant_of``, ...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from jaxjudge.data.tasks import load_task_data, task_dev_docs
from jaxjudge.report.cell import evaluate_cell
from jaxjudge.report.cell_inputs import CellArrays, MethodOptions, make_splits
from jaxjudge.report.invariance import report_invariance
from jaxjudge.report.items import cell_items
from jaxjudge.report.methods import METHODS
from jaxjudge.report.ranges import endpoints, range_statistics
from jaxjudge.report.registered import registered_entries
from jaxjudge.report.results import Results
from jaxjudge.report.stores import Cell, ExtractionJob, StoreIndex, cells, load_cells, store_match
from jaxjudge.store.registration import registration_of_stores

__all__ = ["registered_specs", "report_from_arrays", "report_from_store"]


def _as_dict(spec: Any) -> dict[str, Any] | None:
    if spec is None:
        return None
    d = dict(spec) if isinstance(spec, Mapping) else dataclasses.asdict(spec)
    if d.get("margin") is None:  # no smallest effect declared: the spec as before the field existed
        d.pop("margin", None)
    return d


def registered_specs(cfg: Any) -> list[dict[str, Any]]:
    """The endpoints a confirmatory plan registers (``cfg.confirmation``), the primary first, as
    dicts of `jaxjudge.experiment.Endpoint`'s fields; empty for a config without one."""
    conf = getattr(cfg, "confirmation", None)
    return [] if conf is None else [_as_dict(e) for e in conf.endpoints(getattr(cfg, "primary", None))]


def _nested_options(cfg: Any, options: MethodOptions) -> MethodOptions:
    """A nested primary endpoint's interval redoes the dev-side choice in every resample, and so
    does each endpoint of a confirmatory plan, with the p-values at its registered margins."""
    spec = _as_dict(getattr(cfg, "primary", None))
    if not spec or spec.get("selection") != "nested":
        return options
    registered = registered_specs(cfg)
    rows = (spec["method"], spec.get("versus"), *getattr(cfg, "nested_rows", ()),
            *(r for e in registered for r in (e["method"], e.get("versus"))))
    return replace(options, nested=tuple(dict.fromkeys(r for r in rows if r)),
                   nested_scores=tuple(dict.fromkeys([spec["score"], *(e["score"] for e in registered)])),
                   margins=tuple(sorted({e["margin"] for e in registered if e.get("margin") is not None})))


def _splits_for(task: Any, arrays: CellArrays, dev_docs):
    return make_splits(
        task.split, arrays.groups, n_folds=task.n_folds, seed=task.fold_seed, dev_groups=dev_docs,
        split_labels=arrays.split_labels, original=task.original,
    )


def report_from_arrays(
    arrays: Mapping[Cell, CellArrays],
    cfg: Any,
    *,
    notes: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Results:
    """Evaluate every cell's methods from in-memory arrays: no model, no forward pass.

    Args:
      arrays: `Cell` -> `CellArrays` for every cell of `jaxjudge.report.stores.cells(cfg)`
        (extra cells are ignored; a missing one raises).
      cfg: the experiment config (methods, grids, splits, metrics, bootstrap).
      notes: documented cuts to carry into the results (e.g. `TaskData.notes`).
      progress: called with each cell's label before it is evaluated.

    Returns:
      `Results` with rows in grid order (judges, tasks, aspects, scales; methods in config
      order), the predictions they were computed from per item (``items``, see
      `jaxjudge.report.items`) and the range invariance measured on them (``invariance``,
      `jaxjudge.report.invariance`). The same arrays and config always give identical numbers.
    """
    results = Results(experiment=cfg.name, notes=list(notes or []))
    dev_docs = {t.task: task_dev_docs(t) for t in cfg.tasks}
    by_task: dict[str, list] = {t.task: [] for t in cfg.tasks}
    task_options: dict[str, MethodOptions] = {}
    for cell in cells(cfg):
        if cell not in arrays:
            raise KeyError(f"no arrays for cell {cell.label()}")
        task = cfg.task(cell.task)
        options = MethodOptions.from_config(cfg, task)
        control_of = getattr(cfg, "control_of", lambda judge: None)  # a config without control_pairs
        for partner, needs, note in (
                (cfg.assistant_of, "needs_assistant", f"{cell.judge}: no assistant in pairs, contrastive methods skipped"),
                (control_of, "needs_control",
                 f"{cell.judge}: no other-family assistant in control_pairs, contrastive_other skipped")):
            if partner(cell.judge) is None and any(getattr(METHODS[m], needs) for m in options.methods):
                options = replace(options, methods=tuple(m for m in options.methods if not getattr(METHODS[m], needs)))
                if note not in results.notes:
                    results.notes.append(note)
        options = _nested_options(cfg, options)
        if progress is not None:
            progress(cell.label())
        a = arrays[cell]
        labels = {"experiment": cfg.name, "judge": cell.judge, "task": cell.task, "aspect": cell.aspect}
        splits, preds = _splits_for(task, a, dev_docs[cell.task]), {}
        rep = evaluate_cell(a, splits, options, labels, predictions=preds)
        order = [key for key in ((r["method"], r["score"]) for r in rep.rows) if key in preds]
        results.items.append(cell_items(preds, order, a, splits, {**labels, "scale": cell.scale}))
        results.rows += rep.rows
        results.aux.append(rep.aux)
        by_task[cell.task].append(({**labels, "scale": cell.scale}, rep))
        task_options[cell.task] = options
    for name, reps in by_task.items():
        if reps:
            results.ranges += range_statistics(reps, task_options[name], getattr(cfg, "comparisons", ()))
    primary = getattr(cfg, "primary", None)
    results.endpoints = endpoints(results.rows, results.ranges, _as_dict(primary), cfg.alpha)
    specs = registered_specs(cfg)
    if specs:  # a confirmatory plan's endpoints; their verdicts come with the family's runs
        results.endpoints["registered"] = registered_entries(results.rows, results.ranges, specs, cfg.confirmation)
    results.invariance = report_invariance(results, cfg)
    return results


def report_from_store(
    store_root: str | Path,
    cfg: Any,
    *,
    match: Callable[[ExtractionJob], dict[str, Any]] = store_match,
    check_model: bool = True,
    progress: Callable[[str], None] | None = None,
    stores_read: dict[str, Any] | None = None,
) -> Results:
    """Recompute every table of an experiment from an existing store, without a forward pass.

    Each store must hold its job's `store_match` entries and the setup `job_setup` computes
    from ``cfg`` (prompt style, keyed engine options, inputs digest): a store extracted under
    another config is refused, naming the fields that differ.

    Args:
      store_root: folder holding the experiment's stores (see the module docstring).
      cfg: the experiment config.
      match: job -> key entries of its store (default `store_match`).
      check_model: verify each store's ``model_sha256`` against the configured model.
      progress: called with each cell's label.
      stores_read: if given, filled with store folder -> ``{key_hash, key}`` of every store
        read (for the run's metadata).

    Returns:
      `Results`.

    Raises:
      StoreLookupError: a needed store or array is missing (named).
      StoreModelMismatch: a store was written by another model file.
    """
    index = StoreIndex(store_root, match)
    task_data = {t.task: load_task_data(t) for t in cfg.tasks}
    notes = [n for td in task_data.values() for n in td.notes]
    notes += [f"changed since the previous version: {c}" for c in cfg.changes]
    arrays = load_cells(cfg, index, task_data, check_model=check_model)
    if stores_read is not None:
        stores_read.update(index.read)
    results = report_from_arrays(arrays, cfg, notes=notes, progress=progress)
    results.registration = registration_of_stores(cfg, store_root, sorted(index.read))
    return results
