"""How many human labels does a judge save? Prediction-powered intervals from committed stores.

The judge's predictions come from the report's own code path, with no forward pass: the
stores a report config names are read by `jaxjudge.report.pipeline.load_cells`, and every
configured method (vanilla, Deb-R, Deb-T, the calibration baselines) is run on each cell by
`jaxjudge.report.methods.evaluate_cell`, hyper-parameters chosen on the dev side as in the
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
import datetime as _dt
import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
import typing
from typing import Any

import jax
import numpy as np

from jaxjudge import metrics as M
from jaxjudge.data.tasks import TASKS, load_task_data, task_dev_docs
from jaxjudge.experiment import schema as C  # upward (report -> experiment): FewLabelsConfig belongs in experiment
from jaxjudge.experiment.typed import parse_text
from jaxjudge.report.stores import StoreIndex, cells, load_cells
from jaxjudge.report.methods import MethodOptions, evaluate_cell, make_splits

__all__ = [
    "FewLabelsConfig",
    "CellPredictions",
    "judge_predictions",
    "label_saving",
    "system_level",
    "run_few_labels",
    "write_few_labels",
    "HUMAN_ONLY",
    "PPI_PLAIN",
]

HUMAN_ONLY = "human only"
PPI_PLAIN = "vanilla + labels (PPI, lam=1)"


@dataclass(frozen=True)
class FewLabelsConfig:
    """The few-labels experiment: a report config (whose stores give the judge's predictions)
    and the label-sampling protocol.

    Attributes:
      base: the `ExperimentConfig` whose tasks, scales, methods, splits and ``store_root`` make
        the predictions (its ``name``/``run`` name the results folder).
      score: the reading used, ``"expected@<T>"`` (a temperature of ``base``) or ``"greedy"``.
      n_labels: numbers of human labels drawn.
      repeats: draws per n (seeded).
      seed: seed of the draws.
      alpha: 1 - confidence level of every interval.
      clip: clip PPI++'s lam to [0, 1].
      min_clusters: fewest documents for the cluster-robust variance of the all-items mean.
      pair: two system names for the paired difference, or None (the two systems of highest
        mean vanilla judge score).
      kendall_n_boot: document-bootstrap resamples of the system-level tau.
      figure_scales: the ranges drawn in the width-against-n figure (None: every range).
    """

    base: C.ExperimentConfig
    score: str = "expected@0.2"
    n_labels: tuple[int, ...] = (25, 50, 100, 200)
    repeats: int = 200
    seed: int = 0
    alpha: float = 0.05
    clip: bool = False
    min_clusters: int = 20
    pair: tuple[str, str] | None = None
    kendall_n_boot: int = 1000
    figure_scales: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        w = "FewLabelsConfig"
        if not isinstance(self.base, C.ExperimentConfig):
            raise C.ConfigError(f"{w}.base must be an ExperimentConfig, got {type(self.base).__name__}")
        kinds = [f"expected@{t:g}" for t in self.base.temperatures] + (["greedy"] if self.base.greedy else [])
        if self.score not in kinds:
            raise C.ConfigError(f"{w}.score {self.score!r} is not a reading of the base config; use one of {kinds}")
        ns = tuple(int(n) for n in self.n_labels)
        if not ns or any(n < 2 for n in ns) or list(ns) != sorted(set(ns)):
            raise C.ConfigError(f"{w}.n_labels must be increasing integers >= 2, got {self.n_labels!r}")
        object.__setattr__(self, "n_labels", ns)
        for name in ("repeats", "kendall_n_boot", "min_clusters"):
            if int(getattr(self, name)) < 1:
                raise C.ConfigError(f"{w}.{name} must be >= 1, got {getattr(self, name)!r}")
        if not 0 < self.alpha < 1:
            raise C.ConfigError(f"{w}.alpha must be in (0, 1), got {self.alpha!r}")
        if self.pair is not None and (len(self.pair) != 2 or self.pair[0] == self.pair[1]):
            raise C.ConfigError(f"{w}.pair must name two different systems, got {self.pair!r}")
        if self.figure_scales is not None:
            bad = sorted(set(self.figure_scales) - set(self.base.scales))
            if bad:
                raise C.ConfigError(f"{w}.figure_scales {bad} are not scales of the base config {self.base.scales}")

    @property
    def name(self) -> str:
        return self.base.name

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "base"}
        return json.loads(json.dumps(d, default=list))

    def with_overrides(self, overrides: Sequence[str]) -> FewLabelsConfig:
        """A copy with fields replaced from ``field=value`` strings; ``base.<field>=value``
        overrides a field of the base config.

        Raises:
          ConfigError: an unknown field (named) or a bad value.
        """
        own, base = {}, []
        known = [f.name for f in dataclasses.fields(self) if f.name != "base"]
        for item in overrides:
            if "=" not in item:
                raise C.ConfigError(f"override {item!r} must look like field=value")
            k, v = (s.strip() for s in item.split("=", 1))
            if k.startswith("base."):
                base.append(f"{k[len('base.'):]}={v}")
            elif k in known:
                val = parse_text(f"FewLabelsConfig.{k}", v, typing.get_type_hints(FewLabelsConfig)[k])
                if k in ("n_labels", "figure_scales") and not isinstance(val, (tuple, list)):
                    val = (val,)
                own[k] = val
            else:
                raise C.ConfigError(f"FewLabelsConfig has no field {k!r} (fields: {known}; base.<field> for the report config)")
        new_base = C.with_overrides(self.base, base) if base else self.base
        return dataclasses.replace(self, base=new_base, **own)


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


def judge_predictions(cfg: FewLabelsConfig, store_root: str | os.PathLike | None = None, *,
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
                             original=TASKS[task.task]["original"])
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
            cross = np.sum(np.where(test, p, 0.0), 0)[rows] / test.sum(0)[rows]  # mean over testing folds
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


def _estimands(cp: CellPredictions, cfg: FewLabelsConfig) -> list[_Estimand]:
    out = []
    codes, k = np.unique(cp.groups, return_inverse=True)[1], np.unique(cp.groups).size
    clustered = k < cp.human.size and k >= cfg.min_clusters
    note = None
    if k < cp.human.size and not clustered:
        note = (f"items share {k} documents, fewer than min_clusters={cfg.min_clusters}: i.i.d. variance, "
                "valid for the mean of these items only")
    out.append(_Estimand("all items", f"all {cp.human.size} items", cp.human, cp.preds,
                         codes.astype(np.int32) if clustered else None, k if clustered else None, note))
    if cp.systems is None:
        return out
    names = sorted(set(cp.systems.tolist()))
    for s in names:
        sel = cp.systems == s
        out.append(_Estimand("system", s, cp.human[sel], {m: p[sel] for m, p in cp.preds.items()}, None, None))
    if "vanilla" in cp.preds:
        means = {s: cp.preds["vanilla"][cp.systems == s].mean() for s in names}
    else:
        means = {s: 0.0 for s in names}
    pair = cfg.pair or tuple(sorted(names, key=lambda s: (-means[s], s))[:2])
    missing = [s for s in pair if s not in names]
    if missing:
        raise C.ConfigError(f"few_labels: pair names systems {missing} not among {names}")
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


def label_saving(cp: CellPredictions, cfg: FewLabelsConfig) -> list[dict[str, Any]]:
    """Interval widths against the number of human labels for every estimand of one cell.

    Returns:
      One row per (estimand, n, method): ``estimand``, ``kind``, ``N``, ``n``, ``method``,
      ``width`` (mean over draws), ``width_sd``, ``lam`` (mean), ``effective_n``, ``covers``
      (share of draws whose interval holds the all-items human mean), ``repeats``; or, for an n
      that does not fit, ``skipped`` with the reason.
    """
    from scipy.stats import norm  # noqa: PLC0415

    z = float(norm.ppf(1 - cfg.alpha / 2))
    rows = []
    labels = {"judge": cp.judge, "task": cp.task, "aspect": cp.aspect, "scale": cp.scale}
    for e_i, est in enumerate(_estimands(cp, cfg)):
        n_items = est.human.size
        truth = float(est.human.mean())
        specs = [(HUMAN_ONLY, "classical", next(iter(est.judge)))]
        specs += [(f"{m} + labels", "ppi++", m) for m in est.judge]
        if "vanilla" in est.judge:
            specs.append((PPI_PLAIN, "ppi", "vanilla"))
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


def system_level(cp: CellPredictions, cfg: FewLabelsConfig) -> list[dict[str, Any]]:
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


def run_few_labels(cfg: FewLabelsConfig, store_root: str | os.PathLike | None = None, *,
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


# -- writing ---------------------------------------------------------------------------------------


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _summary_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, aspect, scale, kind, n, method): widths averaged over the kind's estimands
    (the 16 systems' means averaged into one line)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("method") is None:
            continue
        groups.setdefault((r["judge"], r["task"], r["aspect"], r["scale"], r["kind"], r["n"], r["method"]), []).append(r)
    out = []
    for (judge, task, aspect, scale, kind, n, method), rs in groups.items():
        out.append({"judge": judge, "task": task, "aspect": aspect, "scale": scale, "kind": kind, "n": n,
                    "method": method, "estimands": len(rs), "N": rs[0]["N"] if len(rs) == 1 else None,
                    "width": float(np.mean([r["width"] for r in rs])),
                    "effective_n": float(np.mean([r["effective_n"] for r in rs])),
                    "covers": float(np.mean([r["covers"] for r in rs])), "lam": float(np.mean([r["lam"] for r in rs]))})
    return out


def markdown(result: dict[str, Any], cfg: FewLabelsConfig, metadata: Mapping[str, Any]) -> str:
    """The run's results.md."""
    p = [f"# {cfg.name}", ""]
    if metadata.get("command"):
        p += ["Command:", "", f"    {metadata['command']}", ""]
    p += [
        f"Judge predictions: the report's methods on the stores (reading {cfg.score}), test side only, "
        "mapped linearly onto the human range. For each estimand and n, "
        f"{cfg.repeats} seeded draws of n labelled items (the same draws for every method); each gives a "
        f"{1 - cfg.alpha:.0%} interval: human labels alone (classical), PPI++ (power-tuned lam"
        f"{', clipped to [0, 1]' if cfg.clip else ''}) with each method's judge scores on all items, and plain PPI "
        "(lam = 1) with the vanilla judge. `width` is the mean width over draws, `eff. n` the number of human "
        "labels alone with the same mean squared width (n x w_human^2 / w^2), `covers` the share of draws whose "
        "interval holds the mean human score of all the estimand's items (a finite-population check: expect "
        "at least the nominal level). Per-system rows average the systems' figures.",
        "",
    ]
    if result["notes"]:
        p += ["Notes:", ""] + [f"- {n}" for n in result["notes"]] + [""]
    p += ["## Judges", "", "| judge | task | aspect | scale | items | groups | method | Pearson with humans | hparams (per fold) |",
          "|---|---|---|---|---|---|---|---|---|"]
    for c in result["cells"]:
        for m, r in c["pearson"].items():
            hp = c["hparams"].get(m) or []
            hp_s = "; ".join(", ".join(f"{k}={v}" for k, v in h.items() if k != "q") for h in hp if h) or "-"
            p.append(f"| {c['judge']} | {c['task']} | {c['aspect']} | {c['scale']} | {c['items']} | {c['documents']} | "
                     f"{m} | {_fmt(r)} | {hp_s} |")
    summ = _summary_rows(result["label_saving"])
    p += ["", "## Most labels saved", "",
          "Per range and estimand, the judge + labels method of largest effective n (PPI++), beside the vanilla "
          "judge's; effective n / n is the factor by which it multiplies the human labels.", "",
          "| judge | task | aspect | scale | estimand | n | best method | its eff. n | vanilla + labels eff. n |",
          "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted({(r["judge"], r["task"], r["aspect"], r["scale"], r["kind"], r["n"]) for r in summ},
                      key=lambda k: (k[0], k[1], k[2], k[3], ["all items", "system", "difference"].index(k[4]), k[5])):
        sel = [r for r in summ if (r["judge"], r["task"], r["aspect"], r["scale"], r["kind"], r["n"]) == key
               and r["method"] not in (HUMAN_ONLY, PPI_PLAIN)]
        if not sel:
            continue
        best = max(sel, key=lambda r: r["effective_n"])
        van = next((r for r in sel if r["method"] == "vanilla + labels"), None)
        p.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {key[5]} | {best['method']} | "
                 f"{best['effective_n']:.0f} | {_fmt(None if van is None else round(van['effective_n']))} |")
    p += ["", "## Interval width against the number of human labels", ""]
    keys = sorted({(r["judge"], r["task"], r["aspect"], r["scale"], r["kind"]) for r in summ},
                  key=lambda k: (k[0], k[1], k[2], k[3], ["all items", "system", "difference"].index(k[4])))
    for judge, task, aspect, scale, kind in keys:
        sel = [r for r in summ if (r["judge"], r["task"], r["aspect"], r["scale"], r["kind"]) == (judge, task, aspect, scale, kind)]
        ns = sorted({r["n"] for r in sel})
        methods = list(dict.fromkeys(r["method"] for r in sel))
        est = [r for r in result["label_saving"] if (r["task"], r["scale"], r["kind"]) == (task, scale, kind)]
        title = {"all items": "mean of all items", "system": f"each system's mean ({len({r['estimand'] for r in est})} systems, averaged)",
                 "difference": f"paired difference {est[0]['estimand']}" if est else "paired difference"}[kind]
        n_items = est[0]["N"] if est and kind != "system" else None
        p += [f"### {judge} / {task} {aspect} / range {scale}: {title}" + (f" (N = {n_items})" if n_items else ""), ""]
        p += ["| method | " + " | ".join(f"n={n}: width / eff. n / covers" for n in ns) + " |",
              "|---|" + "---|" * len(ns)]
        for m in methods:
            cells = []
            for n in ns:
                r = next((x for x in sel if x["method"] == m and x["n"] == n), None)
                cells.append("-" if r is None else f"{r['width']:.3f} / {r['effective_n']:.0f} / {r['covers']:.2f}")
            p.append(f"| {m} | " + " | ".join(cells) + " |")
        skipped = sorted({r["n"] for r in est if r.get("skipped")})
        if skipped:
            p += ["", f"Skipped: n = {', '.join(map(str, skipped))} (not fewer than the estimand's items)."]
        p.append("")
    if result["system_level"]:
        p += ["## System level: Kendall tau between the judge's and the humans' system rankings", "",
              "Bootstrap over documents (each resample redraws whole documents with all their systems' summaries).", "",
              "| judge | task | aspect | scale | method | tau | 95% interval | systems | documents |",
              "|---|---|---|---|---|---|---|---|---|"]
        for r in result["system_level"]:
            ci = f"[{_fmt(r['low'])}, {_fmt(r['high'])}]" if r["low"] is not None else f"none: {r.get('reason', '')}"
            p.append(f"| {r['judge']} | {r['task']} | {r['aspect']} | {r['scale']} | {r['method']} | {_fmt(r['tau'])} | {ci} | "
                     f"{r['systems']} | {r['documents']} |")
        p.append("")
    return "\n".join(p)


def plot_widths(result: dict[str, Any], cfg: FewLabelsConfig, out_dir: str | os.PathLike) -> list[Path]:
    """One PNG per (judge, task, aspect, range): interval width against n, one line per method,
    one panel per estimand kind (per-system widths averaged over systems)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summ = _summary_rows(result["label_saving"])
    paths = []
    cells = sorted({(r["judge"], r["task"], r["aspect"], r["scale"]) for r in summ})
    for judge, task, aspect, scale in cells:
        if cfg.figure_scales is not None and scale not in cfg.figure_scales:
            continue
        sel = [r for r in summ if (r["judge"], r["task"], r["aspect"], r["scale"]) == (judge, task, aspect, scale)]
        kinds = [k for k in ("all items", "system", "difference") if any(r["kind"] == k for r in sel)]
        fig = Figure(figsize=(4.2 * len(kinds), 3.4), layout="constrained")
        axes = fig.subplots(1, len(kinds), squeeze=False)[0]
        for ax, kind in zip(axes, kinds):
            rk = [r for r in sel if r["kind"] == kind]
            for m in dict.fromkeys(r["method"] for r in rk):
                pts = sorted((r["n"], r["width"]) for r in rk if r["method"] == m)
                style = dict(color="black", lw=2.2) if m == HUMAN_ONLY else dict(ls="--") if m == PPI_PLAIN else {}
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", ms=3, label=m, **style)
            ax.set_xscale("log")
            ax.minorticks_off()  # only the drawn n are labelled
            ax.set_xticks(sorted({r["n"] for r in rk}), labels=[str(n) for n in sorted({r["n"] for r in rk})])
            ax.set_xlabel("human labels n")
            ax.set_ylabel(f"mean {1 - cfg.alpha:.0%} interval width")
            ax.set_title({"all items": "mean of all items", "system": "a system's mean (avg)",
                          "difference": "paired system difference"}[kind], fontsize=9)
            ax.grid(alpha=0.3)
        axes[-1].legend(fontsize=7)
        fig.suptitle(f"{judge}: {task} {aspect}, range {scale}", fontsize=10)
        path = out_dir / f"widths_{task}_{aspect}_{scale}.png"
        FigureCanvasAgg(fig)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        paths.append(path)
    return paths


def _csv(result: dict[str, Any], path: Path) -> Path:
    import csv  # noqa: PLC0415

    cols = ["table", "judge", "task", "aspect", "scale", "estimand", "kind", "N", "n", "method", "judge_method", "ppi",
            "width", "width_sd", "effective_n", "covers", "lam", "repeats", "clustered", "skipped",
            "tau", "low", "high", "systems", "documents", "reason"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for table in ("label_saving", "system_level"):
            for r in result[table]:
                w.writerow([table if c == "table" else _fmt(r.get(c), 6) if isinstance(r.get(c), float) else
                            ("" if r.get(c) is None else r.get(c)) for c in cols])
    return path


def write_few_labels(result: dict[str, Any], cfg: FewLabelsConfig, out_dir: str | os.PathLike,
                     metadata: dict[str, Any]) -> dict[str, Path]:
    """results.json, results.csv, results.md, figures/*.png and metadata.json in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "csv": _csv(result, out / "results.csv"), "markdown": out / "results.md"}
    paths["json"].write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(result, cfg, metadata), encoding="utf-8")
    for p in plot_widths(result, cfg, out / "figures"):
        paths[f"figure:{p.name}"] = p
    metadata = dict(metadata)
    metadata["finished_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    metadata["files"] = sorted(str(p.relative_to(out)) for p in paths.values()) + ["metadata.json"]
    (out / "metadata.json").write_text(json.dumps(metadata, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    paths["metadata"] = out / "metadata.json"
    return paths
