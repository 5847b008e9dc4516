"""PNG figures of a report: score distributions per range, latent number priors, lambda curves.

Figures are drawn on `matplotlib.figure.Figure` with the Agg canvas directly, so nothing here
touches pyplot's global state or needs a display.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from jaxjudge.report.methods import GENERATION, REFERENCE, Role, role_of
from jaxjudge.report.results import Results

__all__ = [
    "plot_score_distributions",
    "plot_latent_priors",
    "plot_lambda_curves",
    "write_figures",
]


def _slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "_".join(str(p) for p in parts if p)).strip("_")


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _by_panel(results: Results) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for a in results.aux:
        panels[(a.get("judge", ""), a.get("task", ""), a.get("aspect", ""))].append(a)
    return panels


def plot_score_distributions(results: Results, out_dir: str | os.PathLike, methods: tuple[str, ...] = (REFERENCE, GENERATION)) -> list[Path]:
    """Score-range bias: how often each score is predicted, per range, against the humans.

    One PNG per (judge, task, aspect), one panel per scale: the fraction of examples whose most
    probable candidate is each score (``methods``, plus the first tuned method present), and the
    human scores mapped onto the range and rounded (outline).
    """
    out_dir = Path(out_dir)
    paths = []
    for (judge, task, aspect), cells in _by_panel(results).items():
        fig = Figure(figsize=(3.2 * len(cells), 3.0), layout="constrained")
        axes = fig.subplots(1, len(cells), squeeze=False)[0]
        for ax, a in zip(axes, cells):
            values = np.asarray(a["values"])
            human = np.asarray(a["human_counts"], float)
            dists = a.get("distributions", {})
            shown = [m for m in methods if m in dists]
            extra = [m for m in dists if m not in methods and role_of(m) is not Role.CALIBRATION]
            shown += extra[:1]
            width = 0.8 / max(1, len(shown))
            for i, m in enumerate(shown):
                frac = np.asarray(dists[m]["argmax_fraction"], float)
                ax.bar(values + (i - (len(shown) - 1) / 2) * width, frac, width=width, label=m)
            ax.step(values, human / max(1.0, human.sum()), where="mid", color="black", lw=1.5, label="human")
            ax.set_title(f"range {a['scale']}")
            ax.set_xticks(values)
            ax.set_xlabel("score")
            ax.set_ylim(0, 1)
        axes[0].set_ylabel("fraction of examples")
        axes[-1].legend(fontsize=7, loc="upper right")
        fig.suptitle(f"{judge}: predicted scores, {task} {aspect}")
        paths.append(_save(fig, out_dir / f"score_distribution_{_slug(judge, task, aspect)}.png"))
    return paths


def plot_latent_priors(results: Results, out_dir: str | os.PathLike) -> list[Path]:
    """Latent number bias: P_random over the candidates, per judge, prompt variant and range.

    One PNG per judge; rows are prompt variants (Deb-R's raw prompts; Deb-T's per task/aspect),
    columns are scales; each panel shows the prior at every configured Tp. The dashed line is
    the uniform distribution a bias-free judge would give.
    """
    out_dir = Path(out_dir)
    per_judge: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for a in results.aux:
        for variant, by_tp in (a.get("priors") or {}).items():
            row = "Deb-R (random-number prompts)" if variant == "R" else f"Deb-T ({a['task']}/{a['aspect']})"
            per_judge[a["judge"]][row][a["scale"]] = {"values": a["values"], "by_tp": by_tp}
    paths = []
    for judge, rows in per_judge.items():
        scales = list(dict.fromkeys(s for r in rows.values() for s in r))
        fig = Figure(figsize=(2.8 * len(scales), 2.3 * len(rows)), layout="constrained")
        axes = fig.subplots(len(rows), len(scales), squeeze=False)
        for i, (row, by_scale) in enumerate(rows.items()):
            for j, s in enumerate(scales):
                ax = axes[i, j]
                if s not in by_scale:
                    ax.axis("off")
                    continue
                values = np.asarray(by_scale[s]["values"])
                tps = list(by_scale[s]["by_tp"].items())
                width = 0.8 / len(tps)
                for t, (tp, prior) in enumerate(tps):
                    ax.bar(values + (t - (len(tps) - 1) / 2) * width, prior, width=width, label=tp)
                ax.axhline(1.0 / len(values), ls="--", color="grey", lw=1)
                ax.set_xticks(values)
                ax.set_ylim(0, 1)
                if i == 0:
                    ax.set_title(f"range {s}")
                if j == 0:
                    ax.set_ylabel(row, fontsize=7)
        axes[0, -1].legend(fontsize=7)
        fig.suptitle(f"{judge}: latent number prior P_random")
        paths.append(_save(fig, out_dir / f"latent_prior_{_slug(judge)}.png"))
    return paths


def plot_lambda_curves(results: Results, out_dir: str | os.PathLike, score: str | None = None) -> list[Path]:
    """Selection metric against lambda for every one-parameter tuned method, per range.

    One PNG per (judge, task, aspect), one panel per scale; solid: mean test metric over folds,
    dashed: mean dev metric (what selection saw). ``score``: the reading drawn (default: the
    first one found).
    """
    out_dir = Path(out_dir)
    paths = []
    for (judge, task, aspect), cells in _by_panel(results).items():
        curves = [
            (a, key, g) for a in cells for key, g in (a.get("grids") or {}).items() if list(g["params"]) == ["lam"]
        ]
        if not curves:
            continue
        reading = score or curves[0][1].split("|", 1)[1]
        fig = Figure(figsize=(3.4 * len(cells), 3.0), layout="constrained")
        axes = fig.subplots(1, len(cells), squeeze=False)[0]
        for ax, a in zip(axes, cells):
            for key, g in (a.get("grids") or {}).items():
                method, kind = key.split("|", 1)
                if kind != reading or list(g["params"]) != ["lam"]:
                    continue
                lam = np.asarray(g["params"]["lam"], float)
                test = np.asarray([np.nan if v is None else v for v in g["test"]], float)
                dev = np.asarray([np.nan if v is None else v for v in g["dev"]], float)
                line = ax.plot(lam, test, label=method)[0]
                ax.plot(lam, dev, ls="--", color=line.get_color(), alpha=0.6)
            if ax.lines and np.nanmax([ln.get_xdata().max() for ln in ax.lines]) > 2:
                ax.set_xscale("log")
            ax.set_title(f"range {a['scale']}")
            ax.set_xlabel("lambda")
        axes[0].set_ylabel(f"selection metric ({reading})")
        axes[-1].legend(fontsize=6)
        fig.suptitle(f"{judge}: {task} {aspect}, test (solid) and dev (dashed)")
        paths.append(_save(fig, out_dir / f"lambda_curve_{_slug(judge, task, aspect)}.png"))
    return paths


def write_figures(results: Results, out_dir: str | os.PathLike) -> list[Path]:
    """All figures of a report into ``out_dir`` (created)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return plot_score_distributions(results, out_dir) + plot_latent_priors(results, out_dir) + plot_lambda_curves(results, out_dir)
