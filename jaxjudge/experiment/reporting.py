"""A run's report written to its run folder (``jaxjudge report|sweep``): the config resolved once
(`jaxjudge.experiment.plan.resolve_spec`), the report read from the stores with that resolved
spec (`jaxjudge.report.report_from_store`), and the results, with the run's metadata, written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jaxjudge.experiment.metadata import collect_metadata, portable_path, run_dir
from jaxjudge.experiment.plan import resolve_spec
from jaxjudge.experiment.schema import ExperimentConfig
from jaxjudge.report import Results, report_from_store, write_run
from jaxjudge.report.registered import settle
from jaxjudge.report.run import rewrite_run

__all__ = ["report_run"]


def report_run(cfg: ExperimentConfig, *, store_root: str | os.PathLike | None = None, run: str | None = None,
               results_root: str | os.PathLike | None = None, config_file: str | None = None) -> tuple[Results, Path]:
    """Report the stores under ``store_root`` (default ``cfg.store_root``) into the run folder
    (`run_dir` of ``run`` under ``results_root``), with the run's metadata (`collect_metadata`:
    ``config_file`` and every store read). Returns ``(results, run folder)``."""
    root: Any = store_root or cfg.store_root
    read: dict = {}
    results = report_from_store(root, resolve_spec(cfg), stores_read=read)
    out = run_dir(cfg, run, root=results_root)
    stores = [{"store": portable_path(k), **v} for k, v in sorted(read.items())]
    meta = collect_metadata(cfg, config_file=config_file, extra={"store_root": str(root), "stores": stores})
    others = settle(results, out, cfg.confirmation.runs if cfg.confirmation is not None else ())
    write_run(results, out, meta)
    for folder, res in others:  # the runs of its registered family reported before it: their verdicts settled
        rewrite_run(folder, res)
    return results, out
