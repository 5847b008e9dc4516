"""Writing the few-labels experiment (`jaxjudge.report.few_labels`): JSON, CSV, Markdown, figures."""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from jaxjudge.report.few_labels import HUMAN_ONLY, PPI_PLAIN

__all__ = ["markdown", "plot_widths", "write_few_labels"]


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


def markdown(result: dict[str, Any], cfg: Any, metadata: Mapping[str, Any]) -> str:
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


def plot_widths(result: dict[str, Any], cfg: Any, out_dir: str | os.PathLike) -> list[Path]:
    """One PNG per (judge, task, aspect, range): interval width against n, one line per method,
    one panel per estimand kind (per-system widths averaged over systems)."""

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


def write_few_labels(result: dict[str, Any], cfg: Any, out_dir: str | os.PathLike,
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
