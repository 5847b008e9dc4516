"""The position-bias run's report files: written from a run, or rescored from its pairs file.

`write_position_bias` writes ``results.json``, ``results.md``, ``pairs.jsonl`` and
``metadata.json``; `rescore_position_bias_run` recomputes the verdicts and intervals of a
written run from its ``pairs.jsonl`` with the current code, no model.
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge.diagnostics.pairwise import position_bias
from jaxjudge.diagnostics.run import PositionBiasRun, position_bias_table

__all__ = ["rescore_position_bias_run", "write_position_bias"]


_TABLE_ROWS = (
    ("consistency", "Consistency (same verdict in both orders)"),
    ("first_slot_rate", "First-slot rate (judgements choosing A; 0.5 = neutral)"),
    ("accuracy", "Accuracy vs humans, combined verdict (inconsistent = tie = 1/2)"),
    ("accuracy_forward", "Accuracy vs humans, forward order only"),
    ("accuracy_swapped", "Accuracy vs humans, swapped order only"),
    ("accuracy_soft", "Accuracy vs humans, order-averaged probability"),
)


def _markdown(run: PositionBiasRun, summary: Mapping[str, Any], alpha: float) -> str:
    b = run.bias
    level = round(100 * (1 - alpha))
    lines = [
        f"# Position bias: {summary['n_pairs']} SummEval pairs ({run.aspect}), "
        f"{summary['n_documents']} documents",
        "",
        f"| figure | estimate | SE | {level}% interval |",
        "|---|---|---|---|",
    ]
    for name, label in _TABLE_ROWS:
        r = run.table[name]
        lines.append(f"| {label} | {r['estimate']:.3f} | {r['se']:.3f} | [{r['low']:.3f}, {r['high']:.3f}] |")
    lines += [
        "",
        "Standard errors are clustered by source document; intervals are Wilson score intervals "
        "at the effective sample size those standard errors imply, with the t quantile of "
        f"{summary['n_documents'] - 1} degrees of freedom (they stay inside [0, 1]).",
        "",
        "| other figure | value |",
        "|---|---|",
        f"| tie rate of the combined verdict | {b.tie_rate:.3f} |",
        f"| accuracy among decisive combined verdicts | "
        f"{'n/a' if b.accuracy_decisive is None else f'{b.accuracy_decisive:.3f}'} |",
        f"| inconsistent pairs: A won in both orders / B won in both orders | "
        f"{b.n_inconsistent_first} / {b.n_inconsistent_second} |",
        f"| mean probability mass on the two answer tokens | {b.answer_mass:.3f} |",
        f"| greedy token is A or B (validity) | {summary['validity_rate']:.3f} |",
        "| most frequent greedy tokens (count of " + str(2 * summary["n_pairs"]) + ") | "
        + ", ".join(f"{text!r}: {count}" for _, text, count in summary["greedy_tokens"]) + " |",
        f"| prompt tokens (mean, min-max) | {summary['prompt_tokens']['mean']:.0f} "
        f"({summary['prompt_tokens']['min']}-{summary['prompt_tokens']['max']}) |",
        f"| human score gap (mean, min-max) | {summary['human_gap']['mean']:.2f} "
        f"({summary['human_gap']['min']:.2f}-{summary['human_gap']['max']:.2f}) |",
        f"| scoring time ({2 * summary['n_pairs']} prompts, compilation included) | "
        f"{summary['seconds_scoring']:.0f} s |",
    ]
    if "length_bias" in summary:
        lb = summary["length_bias"]

        def fmt(x: Any) -> str:
            return "n/a" if x is None else f"{x:.3f}"

        lines += [
            "",
            "Length (pairs; length = tokens of first minus second, judge score = order-averaged "
            "P(first wins), human = +1/-1):",
            "",
            "| figure | value |",
            "|---|---|",
            f"| Pearson(length difference, judge) | {fmt(lb['pearson_length'])} |",
            f"| Pearson(length difference, human) | {fmt(lb['human_pearson_length'])} |",
            f"| Pearson(judge, human): raw / length-residual | {fmt(lb['raw_pearson'])} / "
            f"{fmt(lb['residual_pearson'])} |",
            f"| judge prefers the longer summary / humans do | {fmt(lb['judge_prefers_longer'])} / "
            f"{fmt(lb['human_prefers_longer'])} |",
        ]
    return "\n".join(lines) + "\n"


def write_position_bias(run: PositionBiasRun, out_dir: str | os.PathLike,
                        metadata: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Writes ``results.json``, ``results.md``, ``pairs.jsonl`` and ``metadata.json``.

    Args:
      run: from `run_position_bias`.
      out_dir: folder (created).
      metadata: provenance (command, model hash, versions, date); the run's settings are
        added under ``"settings"``.

    Returns:
      {"results_json", "results_md", "pairs", "metadata"}: the paths written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = run.summary()
    paths = {"results_json": out / "results.json", "results_md": out / "results.md",
             "pairs": out / "pairs.jsonl", "metadata": out / "metadata.json"}
    paths["results_json"].write_text(json.dumps(summary, indent=2) + "\n")
    paths["results_md"].write_text(_markdown(run, summary, run.settings.get("alpha", 0.05)))
    paths["pairs"].write_text("".join(json.dumps(r) + "\n" for r in run.pair_rows()))
    meta = {**(metadata or {}), "settings": run.settings}
    paths["metadata"].write_text(json.dumps(meta, indent=2) + "\n")
    return paths


def rescore_position_bias_run(out_dir: str | os.PathLike, changes: Sequence[str] = ()) -> dict[str, Any]:
    """Recompute a written run's verdicts and intervals from its ``pairs.jsonl``, no model.

    The answer log-probabilities of both orders are in ``pairs.jsonl``, so the verdicts,
    consistency, accuracies and their intervals are recomputed with the current code; the
    figures that need the forward pass (greedy tokens, prompt lengths, timing, length bias)
    are kept from the run's ``results.json``. ``results.json`` and ``results.md`` are
    rewritten; ``pairs.jsonl`` and ``metadata.json`` are left as they are.

    Args:
      out_dir: a folder written by `write_position_bias`.
      changes: what changed since the run's previous version, listed at the end of results.md.

    Returns:
      The new summary (the content of ``results.json``).

    Raises:
      ValueError: the recomputed verdicts differ from the ones the run recorded.
    """
    out = Path(out_dir)
    rows = [json.loads(line) for line in (out / "pairs.jsonl").read_text().splitlines() if line.strip()]
    settings = json.loads((out / "metadata.json").read_text())["settings"]
    forward = np.asarray([[r["logp_forward_A"], r["logp_forward_B"]] for r in rows])
    swapped = np.asarray([[r["logp_swapped_A"], r["logp_swapped_B"]] for r in rows])
    human = np.asarray([r["human_pref"] for r in rows])
    groups = [r["document"] for r in rows]
    bias = position_bias(forward, swapped, human, groups=groups, margin=settings["margin"])
    summary = json.loads((out / "results.json").read_text())
    recorded = summary.get("position_bias", {})
    changed = [k for k, v in bias.summary().items() if k in recorded and recorded[k] != v]
    if changed:
        raise ValueError(f"{out}: recomputed figures {changed} differ from results.json; the pairs file "
                         "does not belong to this run")
    table = position_bias_table(bias, human, groups, alpha=settings["alpha"])
    summary["intervals"] = table
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    view = types.SimpleNamespace(bias=bias, table=table, aspect=summary["aspect"])
    md = _markdown(view, summary, settings["alpha"])
    if changes:
        md += "\nChanged since the previous version (recomputed from pairs.jsonl, no forward pass):\n\n"
        md += "".join(f"- {c}\n" for c in changes)
    (out / "results.md").write_text(md)
    return summary
