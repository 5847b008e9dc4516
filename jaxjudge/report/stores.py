"""Reading an experiment's extraction stores: which store holds a job, and each cell's arrays.

`load_cells(cfg, StoreIndex(root))` finds each cell's stores under ``root``, checks that they
were written by the configured model files and under the same setup, and aligns their arrays
with the task's examples (`jaxjudge.data.tasks.load_task_data`) as `CellArrays`. The writer
(`jaxjudge.experiment.run_extractions`) keys its stores with the same `store_match` and
`job_setup`. ``cfg`` is an `jaxjudge.experiment.ExperimentConfig` (read by its fields).

Store contract (what the report expects the engine to write). Each extraction job
(`jaxjudge.experiment.extraction_plan`) has its own store folder (anywhere under
``store_root``) whose key holds at least the entries of `store_match(job)`:

    {"role": ..., "model": <model name>, "task": ..., "aspect": ..., "scale": "1-5"}

(``task``/``aspect`` are None for ``random_r``), plus ``"model_sha256"``, the sha256 of the
model file, which is checked against the configured file. The random-number roles also hold
``"nll_span": "request"``: their ``sequence_nll`` is the mean NLL of the random-number request's
own tokens, conditioned on the chat and task text before it (older stores, whose NLL covered
the whole prompt, do not match). ``contrastive_generate`` stores also hold the entries of
`contrastive_generate_match` (assistant name and the fixed lambda, temperatures and alpha)
and ``"assistant_sha256"``, checked like ``model_sha256``. Arrays by role:

====================  =========================================================================
role                  arrays (leading axis: examples or prompts)
====================  =========================================================================
score                 ``example_ids`` [N] str, ``cand_logprobs`` [N, K], ``valid`` [N] bool
                      (optional)
generate              ``example_ids`` [N] str, ``parsed_scores`` [N] float (NaN = parse failure)
contrastive_generate  ``example_ids`` [N] str, ``parsed_scores`` [N] float (NaN = parse failure)
random_r/_t           ``cand_logprobs`` [P, K], ``sequence_nll`` [P] (mean NLL of the request)
content_free          ``cand_logprobs`` [M, K]
====================  =========================================================================
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge.data import Example
from jaxjudge.data.tasks import TaskData, load_task_data
from jaxjudge.prompts import ScoreScale, get_template, random_number_prompts, render_all
from jaxjudge.report.cell_inputs import CellArrays, RandomPrior
from jaxjudge.store import Store, file_sha256

__all__ = [
    "Cell",
    "ExtractionJob",
    "StoreLookupError",
    "StoreModelMismatch",
    "StoreIndex",
    "cells",
    "check_store_model",
    "store_match",
    "contrastive_generate_match",
    "CONTENT_FREE",
    "KEYED_ENGINE_OPTIONS",
    "content_free_examples",
    "job_prompts",
    "job_setup",
    "key_mismatches",
    "load_cells",
]


class StoreLookupError(LookupError):
    """No store (or more than one) holds a job's arrays; the message says which and why."""


class StoreModelMismatch(StoreLookupError):
    """A store was written by a different model file than the config names."""


# -- the grid and its jobs --------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One (judge, task, aspect, scale) of an experiment's grid."""

    judge: str
    task: str
    aspect: str
    scale: str

    def label(self) -> str:
        return f"{self.judge}/{self.task}/{self.aspect}/{self.scale}"


def cells(cfg: Any) -> list[Cell]:
    """Every cell of an experiment config's grid, judges slowest, scales fastest."""
    return [
        Cell(j, t.task, a, s) for j in cfg.judge_names for t in cfg.tasks for a in t.aspects for s in cfg.scales
    ]


@dataclass(frozen=True)
class ExtractionJob:
    """One extraction the engine runs and a store holds (`jaxjudge.experiment.extraction_plan`).

    Attributes:
      role: ``"score"`` (candidate log-probs of the task's examples), ``"generate"`` (greedy
        generation parsed into scores), ``"contrastive_generate"`` (greedy contrastive
        generation of the model against its assistant in ``pairs``, parsed into scores),
        ``"random_r"`` / ``"random_t"`` (random-number prompts, raw / prefixed with the task
        instruction), ``"content_free"`` (the template filled with content-free text).
      model: model name.
      task, aspect: None for ``"random_r"`` (it does not depend on the task).
      scale: scale name.
    """

    role: str
    model: str
    task: str | None
    aspect: str | None
    scale: str


# -- store keys -------------------------------------------------------------------------------

# What the NLL of a random-number store covers: the request's own tokens (`RenderedPrompt.nll_span`).
RANDOM_NLL_SPAN = "request"


def store_match(job: ExtractionJob) -> dict[str, Any]:
    """The key entries a job's store must hold (see the module docstring)."""
    out = {"role": job.role, "model": job.model, "task": job.task, "aspect": job.aspect, "scale": job.scale}
    if job.role in ("random_r", "random_t"):
        out["nll_span"] = RANDOM_NLL_SPAN
    return out


# Content-free fillers for contextual calibration (Zhao et al. use "N/A", "[MASK]" and "").
# An empty text is refused by the data layer, so a lone space stands in for it.
CONTENT_FREE = ("N/A", "[MASK]", " ")

# Engine options that change what a store holds (`jaxjudge.engine.extraction_key` leaves out
# the ones that only change rounding or speed: batch size, buckets, the prefix cache).
KEYED_ENGINE_OPTIONS = ("chunk_size", "topk", "overflow", "context_length")


def content_free_examples(template: Any) -> list:
    """One example per `CONTENT_FREE` filler, every placeholder of ``template`` filled with it."""
    names = template.placeholders("all")
    return [Example(id=f"content_free/{i}", group=f"content_free/{i}", fields={n: text for n in names}, scores={})
            for i, text in enumerate(CONTENT_FREE)]


def job_prompts(cfg: Any, job: ExtractionJob, examples: Any, *, chat: Any = None) -> list:
    """The prompts a job renders (before any truncation), with ``chat`` or raw.

    ``examples``: the task's examples (ignored by the random-number and content-free roles).
    """
    scale = ScoreScale.parse(job.scale)
    template = get_template(job.task, job.aspect) if job.task else None
    if job.role in ("random_r", "random_t"):
        return random_number_prompts(scale, chat=chat, task_template=template if job.role == "random_t" else None)
    if job.role == "content_free":
        return list(render_all(template, content_free_examples(template), scale, chat=chat).prompts)
    return list(render_all(template, examples, scale, chat=chat).prompts)


def job_setup(cfg: Any, job: ExtractionJob, examples: Any) -> dict[str, Any]:
    """What a job's store depends on beyond `store_match` and the model file, from the config alone.

    Every store key carries it as ``"setup"``; the report recomputes it and refuses a store
    whose setup differs. The prompts the engine reads are a function of this setup (template,
    data, scale, prompt style, context and overflow policy) and of the model file (its chat
    template and tokenizer), which ``model_sha256`` pins, so matching both matches the prompts.

    Returns:
      ``{"prompt_style", "engine", "inputs_sha256"}`` (JSON-able); ``engine`` holds the config's
      `KEYED_ENGINE_OPTIONS` (unset ones left out: the engine's defaults), ``inputs_sha256`` a
      digest of the job's prompts rendered without a chat template.
    """
    h = hashlib.sha256()
    for p in job_prompts(cfg, job, examples):
        h.update(json.dumps([p.example_id, p.prefix, p.suffix, p.answer_separator], ensure_ascii=False).encode())
        h.update(b"\n")
    return {
        "prompt_style": cfg.prompt_style,
        "engine": {k: cfg.engine[k] for k in KEYED_ENGINE_OPTIONS if cfg.engine.get(k) is not None},
        "inputs_sha256": h.hexdigest(),
    }


def key_mismatches(stored: Mapping[str, Any], wanted: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``"field: stored X, wanted Y"`` for each entry of ``wanted`` the stored key differs on
    (nested mappings compared field by field, named with dots)."""
    out = []
    for k, v in wanted.items():
        got = stored.get(k) if isinstance(stored, Mapping) else None
        if isinstance(v, Mapping) and isinstance(got, Mapping):
            # Within a nested mapping an entry on either side counts (an option set at
            # extraction and unset now differs too).
            out += key_mismatches(got, {**{e: None for e in got}, **v}, f"{prefix}{k}.")
        elif got != v:
            out.append(f"{prefix}{k}: stored {got!r}, wanted {v!r}")
    return out


def contrastive_generate_match(cfg: Any, judge: str) -> dict[str, Any]:
    """The key entries, beyond `store_match`, of a judge's ``contrastive_generate`` store: the
    assistant's name and the config's fixed lambda, temperatures and plausibility alpha."""
    return {
        "assistant": cfg.assistant_of(judge),
        "lam": float(cfg.contrastive_generate_lam),
        "t_main": float(cfg.contrastive_generate_t_main),
        "t_asst": float(cfg.contrastive_generate_t_asst),
        "alpha": float(cfg.contrastive_generate_alpha),
    }


class StoreIndex:
    """All stores under a folder, looked up by key entries.

    Args:
      root: folder searched (recursively) for store manifests.
      match: job -> key entries (default `store_match`); override it if the engine names
        its key fields differently.
    """

    def __init__(self, root: str | Path, match: Callable[[ExtractionJob], dict[str, Any]] = store_match):
        self.root = Path(root)
        if not self.root.is_dir():
            raise StoreLookupError(f"store root {self.root} does not exist (run `jaxjudge extract` first)")
        self.match = match
        self.read: dict[str, dict[str, Any]] = {}  # store folder -> its key and key hash, as loaded
        self.stores = []
        for manifest in sorted(self.root.rglob("manifest.json")):
            try:
                self.stores.append(Store.open(manifest.parent))
            except Exception:  # noqa: BLE001 -- a foreign manifest.json is not a store; skip it
                continue

    def find(self, job: ExtractionJob, extra: Mapping[str, Any] | None = None):
        """The unique store holding ``job`` (and the ``extra`` key entries, if given).

        Raises:
          StoreLookupError: none (naming the closest store and how its key differs) or several.
        """
        want = json.loads(json.dumps({**self.match(job), **(extra or {})}))
        hits = [s for s in self.stores if all(s.key.get(k) == v for k, v in want.items())]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise StoreLookupError(
                f"{len(hits)} stores under {self.root} match {want}: {[str(s.root) for s in hits[:5]]}; "
                "remove the stale ones or use separate store roots"
            )
        shown = {k: v for k, v in want.items() if k != "setup"}
        msg = f"no store under {self.root} holds {shown}"
        if not self.stores:
            raise StoreLookupError(msg + " (run `jaxjudge extract` for this config)")
        best = max(self.stores, key=lambda s: (sum(s.key.get(k) == v for k, v in want.items() if k != "setup"),
                                               s.key.get("setup") == want.get("setup")))
        diff = key_mismatches(best.key, want)
        if "setup" in want and "setup" not in best.key and len(diff) == 1:
            raise StoreLookupError(
                f"store {best.root} was written before stores recorded their setup (prompt style, keyed engine "
                "options, inputs digest): run `jaxjudge store upgrade CONFIG` once with the config that wrote it, "
                "or delete it and run `jaxjudge extract`")
        if all(d.startswith("setup.") for d in diff):
            raise StoreLookupError(
                f"store {best.root} was extracted under another config ({'; '.join(diff)}): extract again "
                "with this config (into another store root), or report with the config that wrote it")
        raise StoreLookupError(msg + f" (run `jaxjudge extract` for this config); closest is {best.root} "
                               f"({'; '.join(diff)})")

    def load(self, job: ExtractionJob, cfg: Any, *, check_model: bool = True,
             extra: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Arrays of a job's store, after checking the model that wrote it.

        ``extra``: more key entries the store must hold (see `find`). A store naming an
        ``assistant`` with an ``assistant_sha256`` has that model checked too.
        """
        store = self.find(job, extra)
        self.read[str(store.root)] = {"key_hash": store.key_hash, "key": store.key}
        dtype = getattr(cfg, "dtype", None)
        if dtype is not None and store.key.get("dtype", dtype) != dtype:
            raise StoreLookupError(f"store {store.root} was extracted in {store.key['dtype']}, the config asks for "
                                   f"{dtype} (ExperimentConfig.dtype): extract again into another store root")
        if check_model:
            check_store_model(store.key, cfg.model(job.model), store.root)
            asst = store.key.get("assistant")
            if asst is not None and "assistant_sha256" in store.key:
                check_store_model({"model_sha256": store.key["assistant_sha256"]}, cfg.model(asst), store.root)
        return store.load()


def check_store_model(key: Mapping[str, Any], model: Any, where: Any = "store") -> None:
    """Raise `StoreModelMismatch` if a store's ``model_sha256`` is not the configured model's.

    The configured sha256 is ``ModelSpec.sha256`` or, if absent, the hash of the model file
    when it is present; with neither there is nothing to compare and the check passes.
    """
    stored = key.get("model_sha256")
    if stored is None:
        return
    expected = model.sha256
    if expected is None:
        try:
            path = model.resolved_path()
        except ValueError:  # the configured model cannot be located (a `ConfigError`): nothing to compare
            return
        if not path.is_file():
            return
        expected = file_sha256(path)
    if stored != expected:
        raise StoreModelMismatch(
            f"{where} was written by a model with sha256 {stored}, but model {model.name!r} "
            f"({model.path}) has sha256 {expected}: the store comes from another model file"
        )


def _need(arrays: Mapping[str, np.ndarray], name: str, job: ExtractionJob) -> np.ndarray:
    if name not in arrays:
        raise StoreLookupError(f"store of {store_match(job)} has no array {name!r} (has {sorted(arrays)})")
    return arrays[name]


def _align(ids_store: np.ndarray, ids_data: np.ndarray, job: ExtractionJob) -> np.ndarray:
    """Row of the store for each data example; raises naming missing examples."""
    pos = {str(i): r for r, i in enumerate(np.asarray(ids_store).tolist())}
    missing = [i for i in ids_data.tolist() if i not in pos]
    if missing:
        raise StoreLookupError(
            f"store of {store_match(job)} lacks {len(missing)} of the {len(ids_data)} examples "
            f"(first: {missing[:3]}); extract with the same data and subset"
        )
    return np.asarray([pos[i] for i in ids_data.tolist()], dtype=np.int64)


def load_cells(
    cfg: Any,
    index: StoreIndex,
    task_data: Mapping[str, TaskData] | None = None,
    *,
    check_model: bool = True,
) -> dict[Cell, CellArrays]:
    """Read every cell's arrays from the stores and align them with the task data."""
    task_data = dict(task_data or {t.task: load_task_data(t) for t in cfg.tasks})
    methods = set(cfg.methods)
    out: dict[Cell, CellArrays] = {}
    setups: dict[tuple, dict[str, Any]] = {}  # a job's setup does not depend on its model
    for cell in cells(cfg):
        td = task_data[cell.task]
        ids = td.ids()
        scale = ScoreScale.parse(cell.scale)

        def get(role: str, model: str, task=cell.task, aspect=cell.aspect, extra=None, td=td):
            job = ExtractionJob(role, model, task, aspect, cell.scale)
            where = (role, task, aspect, cell.scale)
            if where not in setups:
                setups[where] = job_setup(cfg, job, td.examples)
            return index.load(job, cfg, check_model=check_model, extra={**(extra or {}), "setup": setups[where]})

        job = ExtractionJob("score", cell.judge, cell.task, cell.aspect, cell.scale)
        score = get("score", cell.judge)
        rows = _align(_need(score, "example_ids", job), ids, job)
        kwargs: dict[str, Any] = {
            "logprobs": _need(score, "cand_logprobs", job)[rows],
            "valid": score["valid"][rows] if "valid" in score else None,
            "truncated": score["truncated"][rows] if "truncated" in score else None,
            "truncated_tokens": score["truncated_tokens"][rows] if "truncated_tokens" in score else None,
        }
        if "generate" in methods:
            gjob = replace(job, role="generate")
            gen = get("generate", cell.judge)
            kwargs["generated"] = _need(gen, "parsed_scores", gjob)[_align(_need(gen, "example_ids", gjob), ids, gjob)]
        if "contrastive_generate" in methods and cfg.assistant_of(cell.judge) is not None:
            cjob = replace(job, role="contrastive_generate")
            cg = get("contrastive_generate", cell.judge, extra=contrastive_generate_match(cfg, cell.judge))
            kwargs["contrastive_generated"] = np.asarray(_need(cg, "parsed_scores", cjob), np.float64)[
                _align(_need(cg, "example_ids", cjob), ids, cjob)]
        random = {}
        for variant, role, task, aspect in (("R", "random_r", None, None), ("T", "random_t", cell.task, cell.aspect)):
            family = f"deb_{variant.lower()}"
            if family in methods or (variant == "T" and "contrastive_deb_t" in methods):
                rjob = ExtractionJob(role, cell.judge, task, aspect, cell.scale)
                r = get(role, cell.judge, task, aspect)
                random[variant] = RandomPrior(_need(r, "cand_logprobs", rjob), _need(r, "sequence_nll", rjob))
        kwargs["random"] = random
        if "contextual" in methods:
            cf = get("content_free", cell.judge)
            kwargs["content_free"] = _need(cf, "cand_logprobs", replace(job, role="content_free"))
        asst = cfg.assistant_of(cell.judge)
        if asst is not None and methods & {"contrastive", "contrastive_deb_t"}:
            ajob = replace(job, model=asst)
            a = get("score", asst)
            kwargs["assistant"] = _need(a, "cand_logprobs", ajob)[_align(_need(a, "example_ids", ajob), ids, ajob)]
            if "contrastive_deb_t" in methods:
                rjob = replace(ajob, role="random_t")
                r = get("random_t", asst)
                kwargs["assistant_random"] = {"T": RandomPrior(_need(r, "cand_logprobs", rjob), _need(r, "sequence_nll", rjob))}
        out[cell] = CellArrays(
            scale=scale, human=td.human(cell.aspect), human_range=td.task.human_range, groups=td.groups(),
            example_ids=ids, split_labels=td.split_labels, **kwargs,
        )
    return out
