"""A run's metadata and folder: what is needed to reproduce it, and where it is written.

`collect_metadata(cfg)` records the command line, dates, config, seed, model files (sha256),
data files (sha256), package versions, platform and git commit; `run_dir(cfg)` is
``results/<experiment>/<run>/``, which `jaxjudge.report.write_run` fills.

Paths in the metadata are kept portable (relative to the working directory, ``~`` for the home
folder; models by their config spec and file name) so that committed runs carry no machine's
absolute paths.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax

from jaxjudge.data.tasks import resolve_data_dir
from jaxjudge.experiment.schema import (
    ConfigError,
    ExperimentConfig,
    ModelSpec,
    check_run_name,
    config_to_dict,
    resolve_model_path,
)
from jaxjudge.models.source import content_sha256, is_remote
from jaxjudge.store import file_sha256
from jaxjudge.store.location import is_bucket, location

__all__ = ["PACKAGES", "portable_path", "command_line", "package_versions", "git_commit", "collect_metadata",
           "run_dir"]

PACKAGES = (
    "jaxjudge", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "matplotlib",
    "tokenizers", "transformers", "safetensors", "gguf",
)


def portable_path(path: str | os.PathLike) -> str:
    """A path as it can be committed: relative to the working directory if inside it or at most
    two folders up from it (``../shared/data/stsb`` next to a checkout), else with the home
    folder written ``~``, else as given (a bucket's ``gs://`` URL too)."""
    if is_bucket(path):
        return str(path)
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


def _model_entry(model: ModelSpec, hash_files: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {"spec": model.path, "sha256": model.sha256}
    try:
        path = resolve_model_path(model)
    except ConfigError as e:
        entry["error"] = str(e)
        return entry
    entry["file"] = path.name
    if is_remote(path) or path.is_file():
        if not is_remote(path):
            entry["bytes"] = path.stat().st_size
        if hash_files:  # a remote source's from its converted entry when cached (no byte read)
            entry["sha256"] = content_sha256(path)
            if model.sha256 is not None and model.sha256 != entry["sha256"]:
                entry["sha256_expected"] = model.sha256
    elif path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".safetensors", ".json", ".model"))
        entry["files"] = {p.name: file_sha256(p) if hash_files else None for p in files}
    else:
        entry["missing"] = True
    return entry


def _data_entries(cfg: ExperimentConfig, hash_files: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in cfg.tasks:
        folder = resolve_data_dir(t)
        entry: dict[str, Any] = {"data": t.data, "split": t.split}
        if t.file is not None:  # a user's table: the file itself
            path = location(t.file, "data file").expanduser()
            entry = {"file": portable_path(path), "split": t.split,
                     "sha256": file_sha256(path) if hash_files and path.is_file() else None}
        elif folder is None:
            entry["source"] = "embedded SummEval subset (jaxjudge/resources/summeval_subset)"
        else:
            entry["folder"] = portable_path(folder)
            entry["files"] = {
                name: (file_sha256(folder / name) if hash_files and (folder / name).is_file() else None)
                for name in t.source().files
            }
        if t.subset is not None:
            entry["subset"] = config_to_dict(cfg)["tasks"][cfg.tasks.index(t)]["subset"]
        out[t.task] = entry
    return out


def collect_metadata(
    cfg: ExperimentConfig,
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
        "config": config_to_dict(cfg),
        "models": {m.name: _model_entry(m, hash_files) for m in cfg.models},
        "data": _data_entries(cfg, hash_files),
        "packages": package_versions(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git": git_commit(),
    }
    try:
        meta["jax_backend"] = jax.default_backend()
        meta["devices"] = [str(d.device_kind) for d in jax.devices()]
    except Exception:  # noqa: BLE001 -- metadata must never fail a run
        pass
    if extra:
        meta.update(extra)
    return meta


def run_dir(cfg: ExperimentConfig, run: str | None = None, *, root: str | os.PathLike | None = None) -> Path:
    """``<results_root>/<experiment>/<run>``; the run defaults to ``cfg.run`` or the UTC time."""
    if run is not None:
        check_run_name("run", run)
    name = run or cfg.run or _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return location(root if root is not None else cfg.results_root, "results root") / cfg.name / name
