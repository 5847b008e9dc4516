"""How many human labels does a judge save? Prediction-powered intervals from committed stores.

The judge's predictions come from the report's own code path, with no forward pass: the
stores a report config names are read by `jaxjudge.report.stores.load_cells`, and every
configured method (vanilla, Deb-R, Deb-T, the calibration baselines) is run on each cell by
`jaxjudge.report.cell.evaluate_cell`, hyper-parameters chosen on the dev side as in the
report; its predictions of the configured reading (the expected score at T = 0.2 by default)
are kept for every reported (test-side) item. Under k-fold, an item's prediction is the mean
over the folds that test it, so it never comes from a lambda chosen on its own label. The
prediction is then mapped linearly from the prompt's range onto the human range (so that the
plain PPI estimate with lam = 1 is on the human scale; the tuned estimate is unchanged by it).

Then, for each estimand and each number n of human labels in ``n_labels``: ``repeats`` seeded
draws of n labelled items (uniform without replacement among the estimand's items, the same
draws for every method), each giving a 95% interval (`jaxjudge.metrics.ppi_core`) by

* ``human only``: the classical interval from the n labels;
* ``<method> + labels``: PPI++ (power-tuned lam) with that method's judge scores on all items;
* ``vanilla + labels (PPI, lam=1)``: the original prediction-powered interval, for reference.

Reported: the mean width over draws, the effective number of labels
``n * mean(w_human^2) / mean(w_method^2)`` (human labels alone giving the same variance), and
how often the interval holds the mean human score of all the estimand's items (which the
target, the population mean, is here replaced by: a check on real data, conservative since
the items are a finite population). Estimands: the mean over all reported items; for a task
with systems (SummEval's ``model_id``), each system's mean (items: its summaries) and the
paired difference of one pair of systems (items: the documents both summarised), the pair
being the two systems with the highest mean vanilla judge score (chosen without human
labels) unless the config names one. An n at least the estimand's item count is skipped and
said so. The all-items mean of a task whose items share documents uses the cluster-robust
variance when there are at least ``min_clusters`` documents (else the i.i.d. one, noted).

System level (tasks with systems): Kendall tau-b between the systems' mean judge score and
mean human score, per range and method, with a bootstrap over documents
(`jaxjudge.metrics.system_kendall_ci`); with fewer than the config's ``min_ci_groups``
documents the estimate is given without an interval, and the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from scipy.stats import norm

from jaxjudge import metrics as M
from jaxjudge.data.tasks import load_task_data, task_dev_docs
from jaxjudge.report.stores import StoreIndex, cells, load_cells
from jaxjudge.report.cell import evaluate_cell
from jaxjudge.report.cell_inputs import MethodOptions, make_splits
from jaxjudge.report.items import cross_fitted
from jaxjudge.report.methods import REFERENCE

__all__ = [
    "FewLabelsError",
    "CellPredictions",
    "judge_predictions",
    "label_saving",
    "system_level",
    "run_few_labels",
    "HUMAN_ONLY",
    "PPI_PLAIN",
]

HUMAN_ONLY = "human only"
PPI_PLAIN = "vanilla + labels (PPI, lam=1)"


class FewLabelsError(ValueError):
    """A few-labels request the data cannot answer (e.g. a pair naming absent systems)."""


@dataclass
class CellPredictions:
    """One (judge, task, aspect, scale) cell's reported items with every method's predictions.

    Attributes:
      judge, task, aspect, scale: the cell.
      ids, groups: `[N]` example ids and groups (documents) of the reported items.
      systems: `[N]` system names (SummEval's ``model_id``), or None for a task without.
      human: `[N]` human scores on the task's own range.
      human_range: that range.
      preds: method variant -> `[N]` predictions mapped onto the human range.
      hparams: method variant -> the chosen hyper-parameters per fold.
    """

    judge: str
    task: str
    aspect: str
    scale: str
    ids: np.ndarray
    groups: np.ndarray
    systems: np.ndarray | None
    human: np.ndarray
    human_range: tuple[float, float]
    preds: dict[str, np.ndarray]
    hparams: dict[str, list] = field(default_factory=dict)

    def label(self) -> str:
        return f"{self.judge} / {self.task} {self.aspect} / {self.scale}"


def _systems_of(task: str, ids: np.ndarray) -> np.ndarray | None:
    if task != "summeval":
        return None
    return np.asarray([str(i).split("/", 1)[1] for i in ids.tolist()])


def judge_predictions(cfg: Any, store_root: str | os.PathLike | None = None, *,
                      check_model: bool = True) -> tuple[list[CellPredictions], list[str]]:
    """Every cell's test-side predictions of every method, from the stores (no forward pass).

    Args:
      cfg: the experiment.
      store_root: the folder of stores (default ``cfg.base.store_root``).
      check_model: check each store's model sha256 against the config's.

    Returns:
      ``(cells, notes)``: one `CellPredictions` per cell of the base config, and the data
      subsets' notes.
    """
    base = cfg.base
    index = StoreIndex(store_root or base.store_root)
    task_data = {t.task: load_task_data(t) for t in base.tasks}
    notes = [n for td in task_data.values() for n in td.notes]
    arrays = load_cells(base, index, task_data, check_model=check_model)
    out = []
    for cell in cells(base):
        task = base.task(cell.task)
        a = arrays[cell]
        # Only the predictions are used: the report's own statistics are reduced to one
        # cheap point metric (the predictions do not depend on them).
        options = dataclasses.replace(MethodOptions.from_config(base, task), metrics=("pearson",), ci_metrics=(),
                                      per_group=False, n_boot=2)
        splits = make_splits(task.split, a.groups, n_folds=task.n_folds, seed=task.fold_seed,
                             dev_groups=task_dev_docs(task), split_labels=a.split_labels,
                             original=task.original)
        preds: dict[tuple[str, str], np.ndarray] = {}
        rep = evaluate_cell(a, splits, options, {"judge": cell.judge, "task": cell.task, "aspect": cell.aspect},
                            predictions=preds)
        test = np.asarray(splits.test, bool)  # [F, N]
        rows = np.flatnonzero(test.any(0))
        lo, hi = a.scale.lo, a.scale.hi
        ha, hb = a.human_range
        kept, hparams = {}, {}
        for (method, kind), p in preds.items():
            if kind != cfg.score:
                continue
            p = np.asarray(p, np.float64)
            cross = cross_fitted(p, test)[rows]  # mean over testing folds
            kept[method] = ha + (cross - lo) / (hi - lo) * (hb - ha)
            hparams[method] = next((r["hparams"] for r in rep.rows if r["method"] == method and r["score"] == kind), [])
        ids = np.asarray(a.example_ids)[rows]
        out.append(CellPredictions(
            judge=cell.judge, task=cell.task, aspect=cell.aspect, scale=cell.scale, ids=ids,
            groups=np.asarray(a.groups)[rows], systems=_systems_of(cell.task, ids), human=a.human[rows],
            human_range=a.human_range, preds=kept, hparams=hparams,
        ))
    return out, notes


# -- label saving ----------------------------------------------------------------------------------


@dataclass
class _Estimand:
    kind: str  # "all items", "system", "difference"
    name: str
    human: np.ndarray  # [N]
    judge: dict[str, np.ndarray]  # method -> [N]
    groups: np.ndarray | None  # [N] int codes for the cluster-robust variance, or None
    num_groups: int | None
    note: str | None = None


def _estimands(cp: CellPredictions, cfg: Any) -> list[_Estimand]:
    out = []
    codes, k, _ = M.encode_groups(cp.groups)
    clustered = k < cp.human.size and k >= cfg.min_clusters
    note = None
    if k < cp.human.size and not clustered:
        note = (f"items share {k} documents, fewer than min_clusters={cfg.min_clusters}: i.i.d. variance, "
                "valid for the mean of these items only")
    out.append(_Estimand("all items", f"all {cp.human.size} items", cp.human, cp.preds,
                         codes if clustered else None, k if clustered else None, note))
    if cp.systems is None:
        return out
    names = sorted(set(cp.systems.tolist()))
    for s in names:
        sel = cp.systems == s
        out.append(_Estimand("system", s, cp.human[sel], {m: p[sel] for m, p in cp.preds.items()}, None, None))
    if REFERENCE in cp.preds:
        means = {s: cp.preds[REFERENCE][cp.systems == s].mean() for s in names}
    else:
        means = {s: 0.0 for s in names}
    pair = cfg.pair or tuple(sorted(names, key=lambda s: (-means[s], s))[:2])
    missing = [s for s in pair if s not in names]
    if missing:
        raise FewLabelsError(f"few_labels: pair names systems {missing} not among {names}")
    a, b = pair
    docs = sorted(set(cp.groups[cp.systems == a].tolist()) & set(cp.groups[cp.systems == b].tolist()))

    def by_doc(v, s):
        sel = cp.systems == s
        pos = {g: i for i, g in enumerate(cp.groups[sel].tolist())}
        return np.asarray([v[sel][pos[d]] for d in docs])

    out.append(_Estimand("difference", f"{a} - {b}", by_doc(cp.human, a) - by_doc(cp.human, b),
                         {m: by_doc(p, a) - by_doc(p, b) for m, p in cp.preds.items()}, None, None))
    return out


@functools.partial(jax.jit, static_argnames=("method", "num_groups", "clip"))
def _draws(judge, human, masks, groups, *, method: str, num_groups: int | None, clip: bool):
    """`ppi_core` for every draw of labelled items: masks `[R, N]` -> three `[R]` arrays."""
    return jax.vmap(lambda m: M.ppi_core(judge, human, m, groups, method=method, num_groups=num_groups,
                                         clip=clip))(masks)


def label_saving(cp: CellPredictions, cfg: Any) -> list[dict[str, Any]]:
    """Interval widths against the number of human labels for every estimand of one cell.

    Returns:
      One row per (estimand, n, method): ``estimand``, ``kind``, ``N``, ``n``, ``method``,
      ``width`` (mean over draws), ``width_sd``, ``lam`` (mean), ``effective_n``, ``covers``
      (share of draws whose interval holds the all-items human mean), ``repeats``; or, for an n
      that does not fit, ``skipped`` with the reason.
    """
    z = float(norm.ppf(1 - cfg.alpha / 2))
    rows = []
    labels = {"judge": cp.judge, "task": cp.task, "aspect": cp.aspect, "scale": cp.scale}
    for e_i, est in enumerate(_estimands(cp, cfg)):
        n_items = est.human.size
        truth = float(est.human.mean())
        specs = [(HUMAN_ONLY, "classical", next(iter(est.judge)))]
        specs += [(f"{m} + labels", "ppi++", m) for m in est.judge]
        if REFERENCE in est.judge:
            specs.append((PPI_PLAIN, "ppi", REFERENCE))
        for n in cfg.n_labels:
            base = {**labels, "estimand": est.name, "kind": est.kind, "N": n_items, "n": n,
                    "clustered": est.groups is not None, "note": est.note}
            if n >= n_items:
                rows.append({**base, "method": None, "skipped": f"n={n} >= the {n_items} items"})
                continue
            rng = np.random.default_rng([cfg.seed, e_i, n])
            masks = rng.random((cfg.repeats, n_items)).argsort(1) < n  # [R, N], the same for every method
            widths = {}
            for label, method, judge_name in specs:
                e, se, lam = (np.asarray(v, np.float64) for v in _draws(
                    est.judge[judge_name], est.human, masks, est.groups, method=method,
                    num_groups=est.num_groups, clip=cfg.clip))
                w = 2 * z * se
                widths[label] = w
                rows.append({**base, "method": label, "judge_method": None if method == "classical" else judge_name,
                             "ppi": method, "width": float(w.mean()), "width_sd": float(w.std(ddof=1)),
                             "lam": float(lam.mean()), "covers": float(np.mean(np.abs(e - truth) <= z * se)),
                             "repeats": cfg.repeats})
            ref = np.mean(widths[HUMAN_ONLY] ** 2)
            for r in rows[-len(specs):]:
                r["effective_n"] = float(n * ref / np.mean(widths[r["method"]] ** 2))
    return rows


def system_level(cp: CellPredictions, cfg: Any) -> list[dict[str, Any]]:
    """Kendall tau-b between the judge's and the humans' system rankings, per method.

    Returns:
      One row per method: ``tau``, ``low``, ``high`` (None, with ``reason``, below the base
      config's ``min_ci_groups`` documents), ``systems``, ``documents``, ``n_boot``.
    """
    if cp.systems is None:
        return []
    docs = np.unique(cp.groups).size
    names = sorted(set(cp.systems.tolist()))
    out = []
    for m, p in cp.preds.items():
        iv, reps = M.system_kendall_ci(p, cp.human, cp.systems, cp.groups, n_boot=cfg.kendall_n_boot,
                                       alpha=cfg.alpha, seed=cfg.seed, ci_method=cfg.base.ci_method
                                       if cfg.base.ci_method in ("expanded", "percentile") else "expanded")
        row = {"judge": cp.judge, "task": cp.task, "aspect": cp.aspect, "scale": cp.scale, "method": m,
               "tau": iv.estimate, "low": iv.low, "high": iv.high, "systems": len(names), "documents": docs,
               "n_boot": cfg.kendall_n_boot, "n_boot_nan": int(np.sum(~np.isfinite(reps)))}
        if docs < cfg.base.min_ci_groups:
            row.update(low=None, high=None, reason=f"too few documents ({docs} < {cfg.base.min_ci_groups})")
        out.append(row)
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def run_few_labels(cfg: Any, store_root: str | os.PathLike | None = None, *,
                   check_model: bool = True) -> dict[str, Any]:
    """The whole experiment: predictions, label saving, system level.

    Returns:
      A JSON-able dict: ``experiment``, ``notes``, ``cells`` (per cell: items, methods'
      Pearson with the human scores and chosen hyper-parameters), ``label_saving`` rows,
      ``system_level`` rows.
    """
    cells, notes = judge_predictions(cfg, store_root, check_model=check_model)
    out: dict[str, Any] = {"experiment": cfg.name, "notes": list(notes), "cells": [], "label_saving": [],
                           "system_level": []}
    for cp in cells:
        out["cells"].append({
            "judge": cp.judge, "task": cp.task, "aspect": cp.aspect, "scale": cp.scale, "items": int(cp.human.size),
            "documents": int(np.unique(cp.groups).size),
            "systems": None if cp.systems is None else len(set(cp.systems.tolist())),
            "pearson": {m: _pearson(p, cp.human) for m, p in cp.preds.items()},
            "hparams": cp.hparams,
        })
        out["label_saving"] += label_saving(cp, cfg)
        out["system_level"] += system_level(cp, cfg)
    for r in out["label_saving"]:
        note = f"{r['task']} {r['aspect']}, {r['estimand']}: {r['note']}" if r.get("note") else None
        if note and note not in out["notes"]:
            out["notes"].append(note)
    return out
