"""Run an experiment's extractions: the expensive half, into resumable stores.

`run_extractions(cfg)` carries out the run's plan (`jaxjudge.experiment.plan_run`, the same
walk ``--dry-run`` prints) model by model. Before any weights load it checks every model's
hash and tokenizer (every scale can be expressed: `check_tokenizer`), the mesh and that the
parameters fit it, so a bad config fails before any weights are read or any forward pass runs;
then it loads each judge once and runs every job of that model. What a job runs, how its
store is keyed and chunked, is the job kind's own (`jaxjudge.jobs`: score, generation,
contrastive generation, random-number R and T, content-free).

Each job has its own store folder under ``<store_root>/<model>/`` (`ExtractionJob.folder`);
its key holds the entries `ExtractionJob.store_match` looks up, plus everything the arrays
depend on (model file hash, prompts, candidates). A finished job is skipped when the command
is repeated.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from jaxjudge import models as M
from jaxjudge.data.tasks import load_task_data
from jaxjudge.experiment.checks import check_tokenizer, validate_config
from jaxjudge.experiment.distributed import is_leader, plan_line
from jaxjudge.experiment.hardware import check_fits, exchanged_lengths, mesh_and_plan
from jaxjudge.experiment.plan import RunPlan, extraction_plan, plan_run, resolve_spec
from jaxjudge.experiment.schema import ConfigError, ExperimentConfig, engine_options, resolve_model_path
from jaxjudge.engine import EngineOptions
from jaxjudge.jobs import CONTENT_FREE, GENERATE_CHUNK_ROWS, ExtractionJob, RunContext
from jaxjudge.models.weights_cache import cache_root
from jaxjudge.models.gguf import gguf_metadata
from jaxjudge.models.hf import read_config, resolve_source
from jaxjudge.models.source import (content_sha256, is_remote, keeping_copies, local_tokenizer, source_header,
                                    source_outline)
from jaxjudge.models.splash import require_tpu
from jaxjudge.prompts import as_tokenizer, chat_format
from jaxjudge.report.stores import check_store_model, key_mismatches
from jaxjudge.store import Store
from jaxjudge.store.location import location
from jaxjudge.store.registration import register

__all__ = ["CONTENT_FREE", "GENERATE_CHUNK_ROWS", "JobResult", "load_tokenizer", "job_store_path",
           "run_extractions", "upgrade_stores"]


@dataclass(frozen=True)
class JobResult:
    """One extraction job's outcome: its store folder and whether this call computed it."""
    job: ExtractionJob
    store: Path
    computed: bool
    n_rows: int


def load_tokenizer(path: str | os.PathLike) -> tuple[Any, str | None]:
    """Load only a model's tokenizer and chat template (no weights): GGUF file or HF folder; a
    remote source's from its converted entry when cached (`jaxjudge.models.source.source_header`)."""
    if is_remote(path):
        header = source_header(path)
        return header.tokenizer, header.chat_template
    path = Path(path)
    return local_tokenizer(path if path.suffix == ".gguf" else resolve_source(path))


def job_store_path(root: str | os.PathLike, job: ExtractionJob) -> Path:
    """``<root>/<model>/<role>[-<task>-<aspect>]-<scale>``: one folder per job."""
    return job.folder(root)


def run_extractions(
    cfg: ExperimentConfig,
    *,
    store_root: str | os.PathLike | None = None,
    models: Sequence[str] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    verify: bool = False,
) -> list[JobResult]:
    """Run (or resume) every extraction an experiment needs.

    Args:
      cfg: a validated experiment config.
      store_root: where stores go (default ``cfg.store_root``).
      models: only these model names (default all).
      progress: progress bars from the engine.
      log: where one line per job goes.
      verify: hash every model file now; otherwise a digest memoised by the file's (path,
        size, mtime, inode, ctime) is reused. Either way each model's sha256 is compared with
        its `ModelSpec.sha256` before its weights are read.

    Returns:
      One `JobResult` per job, in plan order.

    Raises:
      ConfigError: missing files, a model file whose sha256 is not the config's, a scale a
        tokenizer cannot express, a chat template missing, the splash kernel off a TPU; all
        before the first forward pass (and before any weights are read).
    """
    with keeping_copies():  # a cold remote model fetched once, for the checks and the load
        rp = plan_run(cfg, store_root=store_root, models=models)
        mesh, planned = _configured_mesh(cfg, log)
        root, paths = rp.root, rp.paths
        tokenizers = _check_models(cfg, paths, rp.companions, verify)
        data = {t.task: load_task_data(t) for t in cfg.tasks}
        if planned:
            mesh = _planned_mesh(cfg, rp, tokenizers, data, log)
        for n, path in paths.items():  # parameters that fit the mesh's devices, before any weights load
            check_fits(n, path, cfg.dtype, mesh)
        _register(cfg, root, log)

        engine = EngineOptions(**cfg.engine, mesh=None)
        results: list[JobResult] = []
        for n in rp.judges:
            judge, chat = _load_judge(cfg, n, paths[n], mesh)
            loaded: dict[str, Any] = {}  # assistants, loaded at the first job that runs one

            def load_assistant(name: str) -> Any:
                if name not in loaded:
                    loaded[name] = M.load(paths[name], dtype=cfg.dtype, mesh=mesh).use_attention(cfg.attention)
                return loaded[name]

            rc = RunContext(
                cfg=rp.spec, root=root, data=data, judge=judge, chat=chat,
                context=int(engine.context_length or judge.config.max_position_embeddings), engine=engine,
                max_new_tokens=cfg.generation_max_new_tokens, progress=progress,
                jobs=rp.jobs_of(n), load_assistant=load_assistant,
                # The hash `models.load` gives a model, without loading it for a finished job.
                assistant_sha256=lambda name: content_sha256(paths[name], memo_dir=cache_root()),
                claim_lease=cfg.claim_lease,
            )
            for job in rc.jobs:
                computed, n_rows = job.run(rc)
                where = job.folder(root)
                log(f"{'computed' if computed else 'cached  '} {where.relative_to(root)} ({n_rows} rows)")
                results.append(JobResult(job, where, computed, n_rows))
            loaded.clear()  # the models go before the next judge loads
            del judge, rc
        return results


def _configured_mesh(cfg: ExperimentConfig, log: Callable[[str], None]) -> tuple[Any, bool]:
    """The config's mesh, checked before anything else (sizes that do not fit the devices fail
    here) and its plan line logged; ``(None, True)`` for ``"auto"`` on an accelerator, planned
    once the tokenizers are read (`_planned_mesh`)."""
    if cfg.mesh == "auto" and jax.devices()[0].platform != "cpu":
        return None, True
    mesh, _ = mesh_and_plan(cfg)
    _check_attention(cfg, mesh)
    log(plan_line(mesh))
    return mesh, False


def _planned_mesh(cfg: ExperimentConfig, rp: RunPlan, tokenizers: dict[str, Any], data: dict[str, Any],
                  log: Callable[[str], None]) -> Any:
    """The planner's mesh (``mesh="auto"`` on an accelerator) for the judges each process holds
    together, its calls sized by their prompts (each process tokenising its own rows, the
    processes exchanging their longest: `exchanged_lengths`); its plan line logged."""
    lengths = exchanged_lengths(cfg, {n: rp.jobs_of(n) for n in rp.judges}, tokenizers, data)
    mesh, mesh_plan = mesh_and_plan(cfg, resident=[[(m, rp.paths[m]) for m in (n, *cs)]
                                                   for n, cs in rp.companions.items()],
                                    lengths=lengths, generates=rp.decodes)
    _check_attention(cfg, mesh)
    log(plan_line(mesh) + f"; {mesh_plan.line()}")
    return mesh


def _register(cfg: ExperimentConfig, root: Path, log: Callable[[str], None]) -> None:
    """The analysis plan on record (``<root>/registrations/<sha256>.json``, kept if already there)
    before the first forward pass, written by one process."""
    if is_leader():
        _, record = register(cfg, root)
        log(f"analysis plan {record['plan_sha256'][:12]} registered {record['registered_utc']}")


def _check_attention(cfg: ExperimentConfig, mesh: Any) -> None:
    """The splash kernel runs on a TPU only: refused by field before any model loads."""
    if cfg.attention == "splash":
        try:
            require_tpu(mesh.devices.flat if mesh is not None else jax.devices(), "this process's devices are")
        except ValueError as e:
            raise ConfigError(f"ExperimentConfig.attention: {e}") from None


def _load_judge(cfg: ExperimentConfig, name: str, path: Path, mesh: Any) -> tuple[Any, Any]:
    """A judge's weights (checked against its sha256 again) and its chat format."""
    try:
        judge = M.load(path, dtype=cfg.dtype, mesh=mesh, expected_sha256=cfg.model(name).sha256)
    except M.ModelHashMismatch as e:  # changed since the first check
        raise ConfigError(f"model {name!r}: {e}") from None
    judge.use_attention(cfg.attention)  # a kernel the devices cannot run was refused before any load
    try:
        return judge, chat_format(judge) if cfg.prompt_style == "chat" else None
    except ValueError as e:  # a judge without a chat template: a config error, named
        raise ConfigError(f"model {name!r}: {e}") from None


def _check_models(cfg: ExperimentConfig, paths: dict[str, Path], companions: dict[str, tuple[str, ...]],
                  verify: bool) -> dict[str, Any]:
    """Every model's hash and tokenizer, before any weights load; a judge and the models its
    jobs load beside it (contrastive generation's assistant) must share a tokenizer. Returns the
    tokenizers by model."""
    tokenizers = {}
    for n in paths:
        expected = cfg.model(n).sha256
        if expected is not None:
            actual = content_sha256(paths[n], memo_dir=cache_root(), verify=verify)
            if actual != expected:
                raise ConfigError(f"model {n!r}: {paths[n]} has sha256 {actual}, the config expects {expected} "
                                    "(the file changed or is damaged; fetch it again, or fix ModelSpec.sha256)")
        tok, template = load_tokenizer(paths[n])
        if cfg.prompt_style == "chat" and not template:
            raise ConfigError(f"model {n!r} ({paths[n]}) has no chat template; set prompt_style='raw'")
        check_tokenizer(cfg, n, tok, separator="" if cfg.prompt_style == "chat" else None)
        tokenizers[n] = tok
    for main_name, others in companions.items():
        for asst_name in others:
            vocab_main, vocab_asst = (as_tokenizer(tokenizers[m]).get_vocab(with_added_tokens=True)
                                      for m in (main_name, asst_name))
            if vocab_main != vocab_asst:
                raise ConfigError(f"contrastive_generate: the judge {main_name!r} and its assistant {asst_name!r} "
                                    "do not share a tokenizer")
    return tokenizers


def _default_context_length(path: Path) -> int | None:
    """The model file's own context length, read from its metadata (no weights; a remote
    source's from its header alone, `jaxjudge.models.source.source_outline`)."""
    if is_remote(path):
        value = source_outline(path).hf_config.get("max_position_embeddings")
    elif path.suffix == ".gguf":
        meta = gguf_metadata(path)
        value = meta.get(f"{meta.get('general.architecture')}.context_length")
    else:
        value = read_config(resolve_source(path)).get("max_position_embeddings")
    return None if value is None else int(value)


def upgrade_stores(
    cfg: ExperimentConfig,
    *,
    store_root: str | os.PathLike | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, int]:
    """Add the setup entry (`jaxjudge.report.stores.job_setup`) to the keys of a config's
    stores written before keys carried it: a one-time migration, ``jaxjudge store upgrade``.

    Each store of the config's plan that lacks a setup is checked against the config on every
    field its key does hold: the `store_match` entries (and the contrastive generation
    settings), the model's sha256, and for score stores the engine's overflow policy, top-k,
    chunk size and context length (the model file's own when the config sets none; the file
    must be present for that). It then gets the config's setup, its chunks verified and
    re-sealed (`jaxjudge.store.Store.extend_key`). What no old key recorded (the template
    text, the data, the prompt style) cannot be checked: like ``store seal``, run it only with
    the config that wrote the stores.

    Returns:
      ``{"upgraded": n, "current": m, "absent": k}`` store counts.

    Raises:
      ConfigError: a store whose key contradicts the config (the fields named), or a model
        file needed for the context length that is missing; then no store is changed.
    """
    validate_config(cfg)
    root = location(store_root or cfg.store_root, "store root")
    data = {t.task: load_task_data(t) for t in cfg.tasks}
    defaults = engine_options()
    counts = {"upgraded": 0, "current": 0, "absent": 0}
    contexts: dict[str, int | None] = {}
    todo = []
    spec = resolve_spec(cfg)  # what the jobs read of the config
    for job in extraction_plan(cfg):
        where = job.folder(root)
        if not (where / "manifest.json").is_file():
            counts["absent"] += 1
            continue
        store = Store.open(where)
        setup = job.setup(spec, data[job.task].examples if job.task else ())
        want = {**job.store_match(), **job.key_extra(spec)}
        if "setup" in store.key:
            diff = key_mismatches(store.key, {**want, "setup": setup})
            if diff:
                raise ConfigError(f"store {where}: its key differs from this config: {'; '.join(diff)}")
            counts["current"] += 1
            continue
        if "prompts_sha256" in store.key:  # an engine key: check the options it recorded
            for k in ("overflow", "topk", "chunk_size"):
                want[k] = cfg.engine.get(k, defaults[k]) if cfg.engine.get(k) is not None else defaults[k]
            ctx = cfg.engine.get("context_length")
            if ctx is None:
                if job.model not in contexts:
                    path = resolve_model_path(cfg.model(job.model))
                    if not path.exists():
                        raise ConfigError(f"store {where}: the model file {path} is needed to check its context "
                                            "length (the config sets none)")
                    contexts[job.model] = _default_context_length(path)
                ctx = contexts[job.model]
            want["context_length"] = ctx
        diff = key_mismatches(store.key, want)
        if diff:
            raise ConfigError(f"store {where}: its key differs from this config: {'; '.join(diff)}")
        check_store_model(store.key, cfg.model(job.model), where)
        todo.append((store, setup))
    # Every store checked first: a config that contradicts one store upgrades none.
    for store, setup in todo:
        done = store.extend_key({"setup": setup})
        log(f"upgraded {store.root.relative_to(root)} ({done['resealed']} chunks re-sealed)")
        counts["upgraded"] += 1
    return counts
