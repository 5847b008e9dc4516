"""The one-command run: an `ExperimentConfig` built from a data file, a template and a judge.

``jaxjudge sweep --data FILE --template FILE --judge MODEL --human FIELD --human-range LO-HI
--results DIR --stores DIR`` builds its config here (`sweep_config`), in memory, so that the
whole pipeline runs on it (ranges, methods, stores, intervals, selection on dev, tables) and
writes the run folder a config file writes; `jaxjudge.caches.keep_caches_in` puts the caches it
writes into the stores folder first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from jaxjudge.data.tasks import TASKS
from jaxjudge.experiment.specs import ModelSpec, TaskSpec, is_hub_id
from jaxjudge.experiment.typed import ConfigError

__all__ = ["model_name", "parse_range", "sweep_config"]

def parse_range(flag: str, text: str) -> tuple[float, float]:
    """``"0-10"`` or ``"-1-1"`` or ``"0.5-4.5"`` -> ``(lo, hi)`` with lo < hi."""
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*", text)
    if not m or not float(m.group(1)) < float(m.group(2)):
        raise ConfigError(f"{flag}: {text!r} is not a range LO-HI with LO < HI (e.g. 0-10)")
    return float(m.group(1)), float(m.group(2))


def _clean_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.") or "model"
    return name


def model_name(path: str) -> str:
    """A table label for a model path: ``default``, a file's stem, a Hub id's repo name."""
    if path == "default":
        return "default"
    if path.startswith("gguf:"):
        path = path[len("gguf:"):]
    if is_hub_id(path):
        return _clean_name(path.split("/")[1])
    return _clean_name(Path(path).stem if path.lower().endswith(".gguf") else Path(path).name)


def _task_name(data: str) -> str:
    name = _clean_name(Path(data.rstrip("/")).name.split(".")[0]) or "data"
    return f"{name}_file" if name in TASKS else name


def _list(flag: str, text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise ConfigError(f"{flag}: empty list")
    return items


def _models(judge: str, assistant: str | None, methods: Sequence[str]) -> dict:
    main = ModelSpec(model_name(judge), judge)
    if assistant is None:
        return {"models": (main,)}
    helper = ModelSpec(model_name(assistant), assistant)
    if helper.name == main.name:
        helper = ModelSpec(f"{helper.name}_assistant", assistant)
    from jaxjudge.report.methods import METHODS  # the registry imports every method module (jax)

    if not any(n.assistant for m in methods if m in METHODS for n in METHODS[m].needs):
        users = sorted(m for m, fam in METHODS.items() if any(n.assistant for n in fam.needs))
        raise ConfigError(f"--assistant: no method of --methods uses it (those that do: {', '.join(users)})")
    return {"models": (main, helper), "judges": (main.name,), "pairs": ((main.name, helper.name),)}


def sweep_config(
    *,
    data: str,
    template: str,
    judge: str,
    human: str,
    human_range: str,
    id_field: str | None = None,
    group: str | None = None,
    split: str | None = None,
    aspect: str | None = None,
    ranges: str | None = None,
    methods: str | None = None,
    assistant: str | None = None,
    stores: str = "stores",
    results: str = "results",
):
    """The `ExperimentConfig` of the one-command run (the flags of ``jaxjudge sweep --data``).

    Args:
      data: the table (JSON Lines, CSV or Parquet; a path or ``gs://``).
      template: the template file (or text) for the aspect.
      judge, assistant: model paths (`ModelSpec.path`: ``default``, ``gguf:<file>``, a GGUF file,
        a model folder, a Hub id).
      human, human_range: the human score column and its range ``"LO-HI"``.
      id_field, group, split: the optional id, group and split (``dev``/``test``) columns.
      aspect: the aspect's name (default: the human score column's).
      ranges, methods: comma-separated score ranges and methods (default: the config defaults).
      stores, results: the store and results roots.

    Raises:
      ConfigError: a malformed flag or a field the config refuses, naming it.
    """
    from jaxjudge.experiment.schema import ExperimentConfig  # schema imports the report's method registry

    aspect = aspect or human
    task = TaskSpec(_task_name(data), (aspect,), file=data, human_field=human,
                    human_range=parse_range("--human-range", human_range), id_field=id_field, group_field=group,
                    split_field=split, split="original" if split else "kfold", templates={aspect: template})
    fields = {"scales": _list("--ranges", ranges), "methods": _list("--methods", methods)}
    fields = {k: v for k, v in fields.items() if v is not None}
    chosen = fields.get("methods", ())
    return ExperimentConfig(name=task.task, tasks=(task,), store_root=stores, results_root=results,
                            description=f"{judge} on {data}", **_models(judge, assistant, chosen), **fields)
