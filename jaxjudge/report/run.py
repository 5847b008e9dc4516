"""A run folder: ``results/<experiment>/<run>/`` with tables, figures and metadata.

Layout written by `write_run`::

    results.json     Results (rows, figure extras, notes), JSON
    results.csv      one line per row, every number (see jaxjudge.report.tables)
    results.md       the command, notes, headline pivot(s) and every number with intervals
    figures/*.png    score distributions, latent number priors, lambda curves
    metadata.json    command line, dates, config, seed, model files (sha256), data files
                     (sha256), package versions, platform, git commit

Paths in the metadata are kept portable (relative to the working directory, ``~`` for the home
folder; models by their config spec and file name) so that committed runs carry no machine's
absolute paths.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxjudge.report import config as C
from jaxjudge.report.figures import write_figures
from jaxjudge.report.results import Results
from jaxjudge.report.tables import markdown_report, write_csv

__all__ = ["PACKAGES", "portable_path", "command_line", "collect_metadata", "run_dir", "write_run"]

PACKAGES = (
    "jaxjudge", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "matplotlib",
    "tokenizers", "transformers", "safetensors", "gguf",
)


def portable_path(path: str | os.PathLike) -> str:
    """A path as it can be committed: relative to the working directory if inside it or at most
    two folders up from it (``../shared/data/stsb`` next to a checkout), else with the home
    folder written ``~``, else as given."""
    p = Path(path)
    if not p.is_absolute():
        return str(p)
    try:
        rel = Path(os.path.relpath(p.resolve(), Path.cwd().resolve()))
    except ValueError:  # another drive
        rel = None
    if rel is not None and rel.parts[:3] != ("..", "..", ".."):
        return str(rel)
    try:
        return str(Path("~") / p.resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return str(p)


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that ran this process, program by name and absolute arguments made portable."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return ""
    prog = Path(argv[0]).name
    if prog == "__main__.py":  # python -m jaxjudge
        prog = "python -m jaxjudge"
    elif prog == "cli.py" and Path(argv[0]).resolve() == Path(__file__).resolve().parents[1] / "cli.py":
        prog = "python -m jaxjudge.cli"
    args = [portable_path(a) if os.path.isabs(a) else a for a in argv[1:]]
    return " ".join([prog if prog.startswith("python -m ") else shlex.quote(prog), *map(shlex.quote, args)])


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit() -> dict[str, Any] | None:
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _model_entry(model: C.ModelSpec, hash_files: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"spec": model.path, "sha256": model.sha256}
    try:
        path = C.resolve_model_path(model)
    except C.ConfigError as e:
        entry["error"] = str(e)
        return entry
    entry["file"] = path.name
    if path.is_file():
        entry["bytes"] = path.stat().st_size
        if hash_files:
            entry["sha256"] = C.file_sha256(path)
            if model.sha256 is not None and model.sha256 != entry["sha256"]:
                entry["sha256_expected"] = model.sha256
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".safetensors", ".json", ".model"))
        entry["files"] = {p.name: C.file_sha256(p) if hash_files else None for p in files}
    else:
        entry["missing"] = True
    return entry


def _data_entries(cfg: C.ExperimentConfig, hash_files: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in cfg.tasks:
        folder = C.resolve_data_dir(t)
        entry: dict[str, Any] = {"data": t.data, "split": t.split}
        if folder is None:
            entry["source"] = "embedded SummEval subset (jaxjudge/resources/summeval_subset)"
        else:
            entry["folder"] = portable_path(folder)
            entry["files"] = {
                name: (C.file_sha256(folder / name) if hash_files and (folder / name).is_file() else None)
                for name in C.TASKS[t.task]["files"]
            }
        if t.subset is not None:
            entry["subset"] = C.config_to_dict(cfg)["tasks"][cfg.tasks.index(t)]["subset"]
        out[t.task] = entry
    return out


def collect_metadata(
    cfg: C.ExperimentConfig,
    *,
    command: str | None = None,
    config_file: str | os.PathLike | None = None,
    started_utc: str | None = None,
    hash_files: bool = True,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything needed to reproduce a run.

    Args:
      cfg: the experiment config.
      command: the exact command line (default: this process's, see `command_line`).
      config_file: the experiment file the config came from.
      started_utc: when the run started (ISO 8601); default now.
      hash_files: sha256 the model and data files (model files can take seconds).
      extra: more fields (e.g. store root, engine settings actually used, device).

    Returns:
      A JSON-able dict.
    """
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    meta: dict[str, Any] = {
        "experiment": cfg.name,
        "run": cfg.run,
        "command": command if command is not None else command_line(),
        "config_file": None if config_file is None else portable_path(config_file),
        "created_utc": now,
        "started_utc": started_utc or now,
        "seed": cfg.seed,
        "config": C.config_to_dict(cfg),
        "models": {m.name: _model_entry(m, hash_files) for m in cfg.models},
        "data": _data_entries(cfg, hash_files),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git": git_commit(),
    }
    try:
        import jax  # noqa: PLC0415

        meta["jax_backend"] = jax.default_backend()
        meta["devices"] = [str(d.device_kind) for d in jax.devices()]
    except Exception:  # noqa: BLE001 -- metadata must never fail a run
        pass
    if extra:
        meta.update(extra)
    return meta


def run_dir(cfg: C.ExperimentConfig, run: str | None = None, *, root: str | os.PathLike | None = None) -> Path:
    """``<results_root>/<experiment>/<run>``; the run defaults to ``cfg.run`` or the UTC time."""
    if run is not None:
        C.check_run_name("run", run)
    name = run or cfg.run or _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(root if root is not None else cfg.results_root) / cfg.name / name


def write_run(results: Results, out_dir: str | os.PathLike, metadata: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write a run folder (see the module docstring).

    Args:
      results: the report's results.
      out_dir: the run folder, e.g. `run_dir(cfg)`; created if needed.
      metadata: from `collect_metadata` (plus anything else JSON-able).

    Returns:
      name -> path of every file written (``json``, ``csv``, ``markdown``, ``metadata``, and
      ``figure:<file name>`` for each PNG).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metadata = dict(metadata or {})
    paths: dict[str, Path] = {
        "json": results.save_json(out / "results.json"),
        "csv": write_csv(results, out / "results.csv"),
    }
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
