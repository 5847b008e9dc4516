"""The extraction job: one store's worth of forward passes, typed by what it extracts.

A job kind is a frozen dataclass subclass of `ExtractionJob` that owns, in its own module,

* its store key (`ExtractionJob.store_match`, `ExtractionJob.key_extra`, `ExtractionJob.setup`),
* its store folder (`ExtractionJob.folder`),
* its array schema (``arrays``) and how the report reads a store of it (`ExtractionJob.read`),
* how it runs on a loaded judge (`ExtractionJob.run`, given a `RunContext`).

The writer (`jaxjudge.experiment.run_extractions`) and the reader
(`jaxjudge.report.stores.load_cells`) both go through these objects, so the two cannot drift.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from jaxjudge.engine import EngineOptions
from jaxjudge.multihost import spans_processes
from jaxjudge.prompts import ScoreScale, get_template
from jaxjudge.store import CLAIM_STALE_S, Store
from jaxjudge.store.location import location
from jaxjudge.store.work import claimed_chunks

__all__ = [
    "ExtractionJob",
    "GENERATE_CHUNK_ROWS",
    "KEYED_ENGINE_OPTIONS",
    "RunContext",
    "StoreLookupError",
]


class StoreLookupError(LookupError):
    """No store (or more than one) holds a job's arrays; the message says which and why."""


# Engine options that change what a store holds (`jaxjudge.engine.extraction_key` leaves out
# the ones that only change rounding or speed: batch size, buckets, the prefix cache).
KEYED_ENGINE_OPTIONS = ("chunk_size", "topk", "overflow", "context_length")

GENERATE_CHUNK_ROWS = 200
"""Prompts per chunk of a generation store (a few minutes of a 0.5B judge on two CPU cores):
what an interrupted generation job loses at most. A store's chunk count is fixed when it is
created (its manifest's ``n_chunks``); stores written as one chunk stay valid as they are."""


@dataclass
class RunContext:
    """What a job needs to run on one loaded judge (built by `jaxjudge.experiment.run_extractions`).

    Attributes:
      cfg: the run's config resolved (`jaxjudge.jobs.RunSpec`), read by its fields.
      root: the store root.
      data: task name -> `jaxjudge.data.tasks.TaskData`.
      judge: the loaded model the jobs belong to.
      chat: its chat format, or None for raw prompts.
      context: the context length prompts must fit.
      engine: the config's engine options (`jaxjudge.engine.EngineOptions`; score and prompt-set
        jobs run with all of them, generation jobs with its overflow policy alone).
      max_new_tokens: the generation budget of generation jobs.
      progress: progress bars from the engine.
      jobs: every job of this judge in this call, in plan order.
      load_assistant: name -> the loaded assistant model (loaded once, on first use).
      assistant_sha256: name -> the assistant file's sha256 (without loading it).
      replies: generation results decoded during a score pass, by the generation store's folder.
      claim_lease: seconds after which another worker's silent claim on a chunk is taken over.
    """

    cfg: Any
    root: Path
    data: Mapping[str, Any]
    judge: Any
    chat: Any
    context: int
    engine: EngineOptions
    max_new_tokens: int
    progress: bool
    jobs: Sequence[ExtractionJob]
    load_assistant: Callable[[str], Any]
    assistant_sha256: Callable[[str], str]
    replies: dict[Path, dict[str, np.ndarray]] = field(default_factory=dict)
    claim_lease: float = CLAIM_STALE_S

    @property
    def overflow(self) -> str:
        return self.engine.overflow

    @property
    def spmd(self) -> bool:
        """The judge's mesh spans several processes: they work on every chunk together."""
        return spans_processes(self.judge.mesh)

    def examples(self, job: ExtractionJob) -> Sequence[Any]:
        """The task examples a job reads (none for task-free jobs)."""
        return self.data[job.task].examples if job.task else ()

    def key(self, job: ExtractionJob) -> dict[str, Any]:
        """What the report recomputes from the config: the job's match entries and its setup."""
        return {**job.store_match(), **job.key_extra(self.cfg), "setup": job.setup(self.cfg, self.examples(job))}


@dataclass(frozen=True)
class ExtractionJob:
    """One extraction the engine runs and a store holds; subclasses are the job kinds.

    Attributes:
      model: model name.
      task, aspect: None for task-free kinds (``per_task`` False).
      scale: scale name (``"1-5"``).
      given_template: the task's template as the config gives it (`TaskSpec.template`); None:
        the built-in one of (task, aspect). Not part of the job's identity: its text reaches the
        store key through the prompts' digest (`setup`), so a changed template never reuses a store.

    Class attributes of a kind: ``role`` (its name in store keys and folders), ``per_task``,
    ``order`` (its place among a cell's jobs in a plan), ``arrays`` (the schema: array name ->
    what it holds), ``what`` (a phrase for error messages), ``uses_assistant`` (the job loads
    the judge's assistant beside it).
    """

    model: str
    task: str | None
    aspect: str | None
    scale: str
    given_template: Any = field(default=None, compare=False, repr=False)

    role: ClassVar[str] = ""
    per_task: ClassVar[bool] = True
    order: ClassVar[int] = 0
    arrays: ClassVar[Mapping[str, str]] = {}
    what: ClassVar[str] = ""
    uses_assistant: ClassVar[bool] = False  # runs the judge against its assistant in ``pairs``
    prompt_set: ClassVar[bool] = False  # its prompts are a fixed set of its own, not the task's rows
    decodes: ClassVar[bool] = False  # it decodes tokens (a KV cache per row): the mesh planner's bytes

    def __post_init__(self) -> None:
        if self.per_task and not (self.task and self.aspect):
            raise ValueError(f"{type(self).__name__}: task and aspect are required, got {self.task!r}, {self.aspect!r}")
        if not self.per_task and (self.task is not None or self.aspect is not None):
            raise ValueError(f"{type(self).__name__} does not depend on the task: task and aspect must be None")

    # -- the store key -------------------------------------------------------------------------

    def store_match(self) -> dict[str, Any]:
        """The key entries the job's store must hold (the report looks stores up by them)."""
        return {"role": self.role, "model": self.model, "task": self.task, "aspect": self.aspect,
                "scale": self.scale}

    def key_extra(self, cfg: Any) -> dict[str, Any]:
        """Key entries beyond `store_match` that come from the config (none by default)."""
        return {}

    def template(self) -> Any:
        """The task's prompt template, or None for a task-free job."""
        if not self.task:
            return None
        return self.given_template if self.given_template is not None else get_template(self.task, self.aspect)

    def prompts(self, examples: Sequence[Any], *, chat: Any = None) -> list:
        """The prompts the job renders (before any truncation), with ``chat`` or raw."""
        raise NotImplementedError

    def setup(self, cfg: Any, examples: Sequence[Any]) -> dict[str, Any]:
        """What the job's store depends on beyond `store_match` and the model file, from the config.

        Every store key carries it as ``"setup"``; the report recomputes it and refuses a store
        whose setup differs. The prompts the engine reads are a function of this setup (template,
        data, scale, prompt style, context and overflow policy) and of the model file (its chat
        template and tokenizer), which ``model_sha256`` pins, so matching both matches the prompts.

        Returns:
          ``{"prompt_style", "engine", "inputs_sha256"}`` (JSON-able); ``engine`` holds the
          config's `KEYED_ENGINE_OPTIONS` (unset ones left out: the engine's defaults),
          ``inputs_sha256`` a digest of the job's prompts rendered without a chat template.
        """
        h = hashlib.sha256()
        for p in self.prompts(examples):
            h.update(json.dumps([p.example_id, p.prefix, p.suffix, p.answer_separator], ensure_ascii=False).encode())
            h.update(b"\n")
        return {
            "prompt_style": cfg.prompt_style,
            "engine": {k: cfg.engine[k] for k in KEYED_ENGINE_OPTIONS if cfg.engine.get(k) is not None},
            "inputs_sha256": h.hexdigest(),
        }

    def folder(self, root: str | Path) -> Path:
        """``<root>/<model>/<role>[-<task>-<aspect>]-<scale>``: one folder per job."""
        parts = [self.role] + ([self.task, self.aspect] if self.task else []) + [self.scale]
        return location(root, "store root") / self.model / "-".join(parts)

    def parsed_scale(self) -> ScoreScale:
        return ScoreScale.parse(self.scale)

    # -- reading and running ------------------------------------------------------------------

    def read(self, arrays: Mapping[str, np.ndarray], ids: np.ndarray) -> dict[str, Any]:
        """The store's arrays as the report uses them, rows aligned with the data's ``ids``."""
        raise NotImplementedError

    def run(self, rc: RunContext) -> tuple[bool, int]:
        """Compute (or resume) the job's store; returns (whether anything was computed, rows)."""
        raise NotImplementedError

    def applies(self, cfg: Any) -> bool:
        """Whether a config can run this job at all (contrastive generation needs an assistant)."""
        return True

    def companions(self, cfg: Any) -> tuple[str, ...]:
        """Other models the job loads beside its own (checked before any weights are read)."""
        return ()

    # -- helpers for `read` --------------------------------------------------------------------

    def need(self, arrays: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        """The array ``name`` of a store of this job; raises naming the store and what it has."""
        if name not in arrays:
            raise StoreLookupError(f"store of {self.store_match()} has no array {name!r} (has {sorted(arrays)})")
        return arrays[name]

    def align(self, arrays: Mapping[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
        """Row of the store for each data example; raises naming missing examples."""
        pos = {str(i): r for r, i in enumerate(np.asarray(self.need(arrays, "example_ids")).tolist())}
        missing = [i for i in ids.tolist() if i not in pos]
        if missing:
            raise StoreLookupError(
                f"store of {self.store_match()} lacks {len(missing)} of the {len(ids)} examples "
                f"(first: {missing[:3]}); extract with the same data and subset"
            )
        return np.asarray([pos[i] for i in ids.tolist()], dtype=np.int64)


# -- writing stores ----------------------------------------------------------------------------


def _todo(store: Store, spmd: bool) -> list[int]:
    # The processes of one SPMD worker walk the same list; process 0 skips the written chunks.
    return list(range(store.n_chunks)) if spmd else store.missing_chunks()


def one_chunk(root: Path, key: dict[str, Any], n_rows: int, make: Callable[[], dict[str, np.ndarray]],
              lease: float = CLAIM_STALE_S, *, spmd: bool = False) -> tuple[bool, int]:
    """A job of ``n_rows`` rows small enough to be one chunk: compute it unless the store already
    has it (or another worker does: see `jaxjudge.store.work.claimed_chunks`, also for
    ``spmd``). The chunk is not read back: the report reads it."""
    store = Store.open(root, key, n_chunks=1)
    done = claimed_chunks(store, _todo(store, spmd), lambda i: make(), lease, spmd=spmd)
    return bool(done), n_rows


def row_chunks(root: Path, key: dict[str, Any], n_rows: int,
               make: Callable[[int, int], dict[str, np.ndarray]], lease: float = CLAIM_STALE_S, *,
               spmd: bool = False) -> tuple[bool, int]:
    """A generation job, chunk by chunk: `make(lo, hi)` gives rows lo..hi-1; each chunk is
    written as soon as it is computed (under a claim, shared with other workers: see
    `jaxjudge.store.work.claimed_chunks`, also for ``spmd``), and chunks already written are
    kept. A new store gets ceil(n_rows / `GENERATE_CHUNK_ROWS`) chunks; an existing one keeps its
    own count. No chunk is read back (its key holds the prompts' digest, so its rows are these
    ``n_rows``): the report reads them."""
    try:
        store = Store.open(root, key, create=False)
    except FileNotFoundError:
        store = Store.open(root, key, n_chunks=max(1, -(-n_rows // GENERATE_CHUNK_ROWS)))
    size = -(-n_rows // store.n_chunks)
    done = claimed_chunks(store, _todo(store, spmd),
                          lambda i: make(i * size, min(n_rows, (i + 1) * size)), lease, spmd=spmd)
    return bool(done), n_rows


def complete(root: Path, key: dict[str, Any]) -> bool:
    """Whether a chunked store exists for `key` with every chunk written."""
    try:
        return not Store.open(root, key, create=False).missing_chunks()
    except FileNotFoundError:
        return False
