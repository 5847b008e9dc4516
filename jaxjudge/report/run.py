"""A run folder: ``results/<experiment>/<run>/`` with tables, figures and metadata.

Layout written by `write_run`::

    results.json     Results (rows, figure extras, notes), JSON
    results.csv      one line per row, every number (see jaxjudge.report.tables)
    items.parquet    one row per item, judge, task, aspect, range, reading and method: the scores
    items.csv        the metrics were computed from (see jaxjudge.report.items); written when the
                     results carry them (a report's do, results read back from JSON do not)
    results.md       the command, notes, headline pivot(s) and every number with intervals
    figures/*.png    score distributions, latent number priors, lambda curves
    metadata.json    command line, dates, config, seed, model files (sha256), data files
                     (sha256), package versions, platform, git commit

The metadata comes from `jaxjudge.experiment.collect_metadata`, the folder from
`jaxjudge.experiment.run_dir`. The folder may be in a bucket (``gs://bucket/results/...``): the
files are then written to a local temporary folder as above and uploaded, one object each,
``metadata.json`` last, so a run folder with its metadata is complete.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from jaxjudge.report.figures import write_figures
from jaxjudge.report.items import write_items
from jaxjudge.report.results import Results
from jaxjudge.report.tables import markdown_report, write_csv
from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.location import location

__all__ = ["rewrite_run", "write_run"]


def write_run(results: Results, out_dir: str | os.PathLike, metadata: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write a run folder (see the module docstring).

    Args:
      results: the report's results.
      out_dir: the run folder, e.g. `jaxjudge.experiment.run_dir(cfg)`; created if needed.
      metadata: from `jaxjudge.experiment.collect_metadata` (plus anything else JSON-able).

    Returns:
      name -> path of every file written (``json``, ``csv``, ``items`` and ``items_csv`` where
      the results carry per-item scores, ``markdown``, ``metadata``, and ``figure:<file name>``
      for each PNG).
    """
    out = location(out_dir, "results folder")
    if isinstance(out, BucketPath):
        with tempfile.TemporaryDirectory(prefix="jaxjudge-run-") as tmp:
            local = write_run(results, tmp, metadata)
            uploaded = {}
            for name in sorted(local, key=lambda n: n == "metadata"):  # metadata.json last
                target = out / local[name].relative_to(tmp).as_posix()
                target.write_bytes(local[name].read_bytes())
                uploaded[name] = target
        return uploaded
    out.mkdir(parents=True, exist_ok=True)
    metadata = dict(metadata or {})
    paths: dict[str, Path] = {
        "json": results.save_json(out / "results.json"),
        "csv": write_csv(results, out / "results.csv"),
    }
    if results.items:
        paths.update(write_items(results.items, out))
    md = out / "results.md"
    md.write_text(markdown_report(results, metadata), encoding="utf-8")
    paths["markdown"] = md
    for p in write_figures(results, out / "figures"):
        paths[f"figure:{p.name}"] = p
    metadata["finished_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    metadata["files"] = sorted(str(p.relative_to(out)) for p in paths.values())
    meta_path = out / "metadata.json"
    meta_path.write_text(json.dumps(metadata, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    paths["metadata"] = meta_path
    return paths


def rewrite_run(folder: Any, results: Results) -> None:
    """Rewrite a written run folder's ``results.json`` and ``results.md`` (with its own metadata),
    after `jaxjudge.report.registered.settle` gave it its registered verdicts; its other files
    are left as they are."""
    folder = location(folder, "results folder")
    meta_path = folder / "metadata.json"
    metadata = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.exists() else {}
    results.save_json(folder / "results.json")
    (folder / "results.md").write_text(markdown_report(results, metadata), encoding="utf-8")
