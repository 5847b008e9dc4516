"""Run an experiment's extractions: the expensive half, into resumable stores.

`run_extractions(cfg)` walks `jaxjudge.experiment.extraction_plan(cfg)` model by model. For
each model it first loads only the tokenizer and checks that every scale can be expressed
(`check_tokenizer`), so a bad config fails before any weights are read or any forward pass
runs; then it loads the judge once and runs every job of that model:

=============  ===========================================================================
role           what runs
=============  ===========================================================================
score          the task template over the task's examples -> `jaxjudge.engine.extract`,
               chunked into the store as chunks finish (a killed run resumes)
generate       greedy generation parsed into a number, in chunks of `GENERATE_CHUNK_ROWS`
               prompts, each written when done (a killed run resumes). When the cell's score job
               runs in the same call, has single-token candidates and renders the same
               prompts, the replies are decoded from the score pass's own prefill
               (``extract(..., generate_tokens=G)``); otherwise `generate_scores` makes its
               own pass. Both give the same store.
contrastive_   greedy contrastive generation of the judge against its assistant in ``pairs``
generate       (`jaxjudge.engine.contrastive_generate_scores`, both models loaded; the
               config's fixed lambda, temperatures and alpha), parsed like ``generate`` and
               chunked like it; keyed also by the assistant, its sha256 and those settings
random_r/_t    the 100 random-number paraphrases (raw / after the task instruction):
               candidate log-probs and the mean NLL of each paraphrase's own tokens (the
               request, conditioned on the chat and instruction text before it; one pass),
               one chunk; keyed with ``nll_span: "request"``
content_free   the template filled with content-free strings (`CONTENT_FREE`), one chunk
=============  ===========================================================================

Each job has its own store folder under ``<store_root>/<model>/``; its key holds the entries
`jaxjudge.report.stores.store_match` looks up, plus everything the arrays depend on (model
file hash, prompts, candidates). A finished job is skipped when the command is repeated.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxjudge import models as M
from jaxjudge.data.tasks import load_task_data
from jaxjudge.engine import GenerationRoomError, contrastive_generate_scores, extract, generate_scores, parse_replies
from jaxjudge.experiment.checks import check_tokenizer, validate_config
from jaxjudge.experiment.hardware import mesh_for
from jaxjudge.experiment.plan import extraction_plan
from jaxjudge.experiment.schema import ConfigError, ExperimentConfig, engine_options, resolve_model_path
from jaxjudge.models.cache import cache_root, source_sha256
from jaxjudge.models.gguf import gguf_metadata
from jaxjudge.models.hf import read_config, read_tokenizer, resolve_source
from jaxjudge.models.tokenizer import tokenizer_from_gguf_metadata
from jaxjudge.prompts import ScoreScale, as_tokenizer, chat_format, get_template, random_number_prompts, render_all
from jaxjudge.report.stores import (
    CONTENT_FREE,
    ExtractionJob,
    check_store_model,
    content_free_examples,
    contrastive_generate_match,
    job_setup,
    key_mismatches,
    store_match,
)
from jaxjudge.store import Store

__all__ = ["CONTENT_FREE", "GENERATE_CHUNK_ROWS", "JobResult", "load_tokenizer", "job_store_path",
           "run_extractions", "upgrade_stores"]

GENERATE_CHUNK_ROWS = 200
"""Prompts per chunk of a generation store (a few minutes of a 0.5B judge on two CPU cores):
what an interrupted generation job loses at most. A store's chunk count is fixed when it is
created (its manifest's ``n_chunks``); stores written as one chunk stay valid as they are."""


@dataclass(frozen=True)
class JobResult:
    """One extraction job's outcome: its store folder and whether this call computed it."""
    job: ExtractionJob
    store: Path
    computed: bool
    n_rows: int


def load_tokenizer(path: str | os.PathLike) -> tuple[Any, str | None]:
    """Load only a model's tokenizer and chat template (no weights): GGUF file or HF folder."""
    path = Path(path)
    if path.suffix == ".gguf":
        meta = gguf_metadata(path)
        return tokenizer_from_gguf_metadata(meta, source=str(path)), meta.get("tokenizer.chat_template")

    tok, template, _ = read_tokenizer(resolve_source(path))
    return tok, template


def job_store_path(root: str | os.PathLike, job: ExtractionJob) -> Path:
    """``<root>/<model>/<role>[-<task>-<aspect>]-<scale>``: one folder per job."""
    parts = [job.role] + ([job.task, job.aspect] if job.task else []) + [job.scale]
    return Path(root) / job.model / "-".join(parts)


def _one_chunk(root: Path, key: dict[str, Any], make: Callable[[], dict[str, np.ndarray]]) -> tuple[bool, int]:
    """A job small enough to be one chunk: compute it unless the store already has it."""
    store = Store.open(root, key, n_chunks=1)
    if store.has_chunk(0):
        return False, len(next(iter(store.load().values())))
    arrays = make()
    store.write_chunk(0, arrays)
    return True, len(next(iter(arrays.values())))


def _generation_store(root: Path, key: dict[str, Any], n_rows: int) -> Store:
    """Open a generation job's store: its own chunk count when it exists, else a new one of
    ceil(n_rows / GENERATE_CHUNK_ROWS) chunks."""
    try:
        return Store.open(root, key, create=False)
    except FileNotFoundError:
        return Store.open(root, key, n_chunks=max(1, -(-n_rows // GENERATE_CHUNK_ROWS)))


def _row_chunks(root: Path, key: dict[str, Any], n_rows: int,
                make: Callable[[int, int], dict[str, np.ndarray]]) -> tuple[bool, int]:
    """A generation job, chunk by chunk: `make(lo, hi)` gives rows lo..hi-1; each chunk is
    written as soon as it is computed, and chunks already written are kept."""
    store = _generation_store(root, key, n_rows)
    k = store.n_chunks
    size = -(-n_rows // k)
    missing = store.missing_chunks()
    for i in missing:
        store.write_chunk(i, make(i * size, min(n_rows, (i + 1) * size)))
    return bool(missing), len(next(iter(store.load().values())))


def _complete(root: Path, key: dict[str, Any]) -> bool:
    """Whether a chunked store exists for `key` with every chunk written."""
    try:
        return not Store.open(root, key, create=False).missing_chunks()
    except FileNotFoundError:
        return False


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
        tokenizer cannot express, a chat template missing; all before the first forward pass
        (and before any weights are read).
    """
    validate_config(cfg)
    mesh = mesh_for(cfg)  # before any model loads: sizes that do not fit the devices fail here
    root = Path(store_root or cfg.store_root)
    plan = extraction_plan(cfg)
    names = list(dict.fromkeys(j.model for j in plan))
    if models is not None:
        unknown = sorted(set(models) - set(names))
        if unknown:
            raise ConfigError(f"config {cfg.name!r}: no jobs for models {unknown} (jobs exist for {names})")
        names = [n for n in names if n in models]

    # Every model's hash and tokenizer first: a config that cannot run fails before any weights
    # are loaded. Assistants of contrastive generation must share their judge's tokenizer.
    pair_of = {j.model: cfg.assistant_of(j.model) for j in plan
               if j.role == "contrastive_generate" and j.model in names}
    paths = {n: resolve_model_path(cfg.model(n)) for n in dict.fromkeys([*names, *pair_of.values()])}
    tokenizers = {}
    for n in paths:
        expected = cfg.model(n).sha256
        if expected is not None:
            actual = source_sha256(paths[n], memo_dir=cache_root(), verify=verify)
            if actual != expected:
                raise ConfigError(f"model {n!r}: {paths[n]} has sha256 {actual}, the config expects {expected} "
                                    "(the file changed or is damaged; fetch it again, or fix ModelSpec.sha256)")
        tok, template = load_tokenizer(paths[n])
        if cfg.prompt_style == "chat" and not template:
            raise ConfigError(f"model {n!r} ({paths[n]}) has no chat template; set prompt_style='raw'")
        check_tokenizer(cfg, n, tok, separator="" if cfg.prompt_style == "chat" else None)
        tokenizers[n] = tok
    for main_name, asst_name in pair_of.items():
        vocab_main, vocab_asst = (as_tokenizer(tokenizers[m]).get_vocab(with_added_tokens=True)
                                  for m in (main_name, asst_name))
        if vocab_main != vocab_asst:
            raise ConfigError(f"contrastive_generate: the judge {main_name!r} and its assistant {asst_name!r} "
                                "do not share a tokenizer")

    engine_opts = dict(cfg.engine)
    overflow = engine_opts.pop("overflow", "truncate")
    data = {t.task: load_task_data(t) for t in cfg.tasks}
    results: list[JobResult] = []
    g_new = cfg.generation_max_new_tokens

    def job_key(job):  # what the report recomputes from the config: store_match and the setup
        return {**store_match(job), "setup": job_setup(cfg, job, data[job.task].examples if job.task else ())}

    def gen_key(job, judge):
        return {**job_key(job), "model_sha256": judge.sha256, "max_new_tokens": g_new}

    def gen_prompts(job, judge, template, scale, ctx):
        return render_all(template, data[job.task].examples, scale, chat=chat, tokenizer=judge.tokenizer,
                          max_tokens=ctx - g_new, overflow=overflow).prompts

    for n in names:
        try:
            judge = M.load(paths[n], dtype=cfg.dtype, mesh=mesh, expected_sha256=cfg.model(n).sha256)
        except M.ModelHashMismatch as e:  # changed since the check above
            raise ConfigError(f"model {n!r}: {e}") from None
        assistant = None  # loaded at the first contrastive_generate job of this judge
        try:
            chat = chat_format(judge) if cfg.prompt_style == "chat" else None
        except ValueError as e:  # a judge without a chat template: a config error, named
            raise ConfigError(f"model {n!r}: {e}") from None
        ctx = int(engine_opts.get("context_length") or judge.config.max_position_embeddings)
        model_jobs = [j for j in plan if j.model == n]
        # Replies decoded during a score pass, waiting for their generate job: store path -> arrays.
        replies: dict[Path, dict[str, np.ndarray]] = {}
        for job in model_jobs:
            scale = ScoreScale.parse(job.scale)
            key = job_key(job)
            where = job_store_path(root, job)
            template = get_template(job.task, job.aspect) if job.task else None
            if job.role == "score":
                rendered = render_all(template, data[job.task].examples, scale, chat=chat, tokenizer=judge.tokenizer,
                                      max_tokens=ctx, overflow=overflow, reserve_tokens=4)
                gen = next((j for j in model_jobs if j.role == "generate" and
                            (j.task, j.aspect, j.scale) == (job.task, job.aspect, job.scale)), None)
                share = False
                if gen is not None:
                    gen_where = job_store_path(root, gen)
                    share = (not _complete(gen_where, gen_key(gen, judge))
                             and gen_prompts(gen, judge, template, scale, ctx) == list(rendered.prompts))
                out = None
                if share:
                    try:
                        out = extract(judge, rendered.prompts, scale, store=where, key=key, progress=progress,
                                      overflow=overflow, generate_tokens=g_new, **engine_opts)
                    except GenerationRoomError:
                        out = None
                    if out is not None and bool(np.all(out.generated_lengths >= 0)):
                        texts, parsed, _ = parse_replies(
                            judge, [r[:k] for r, k in zip(out.generated_ids, out.generated_lengths)], scale)
                        replies[gen_where] = {"example_ids": np.asarray(out.example_ids),
                                              "parsed_scores": np.asarray(parsed, np.float32),
                                              "texts": np.asarray(texts)}
                if out is None:
                    out = extract(judge, rendered.prompts, scale, store=where, key=key, progress=progress,
                                  overflow=overflow, **engine_opts)
                computed, n_rows = bool(out.computed_chunks), len(out)
            elif job.role == "generate":
                prompts = gen_prompts(job, judge, template, scale, ctx)

                def make(lo, hi, prompts=prompts, scale=scale, where=where):
                    if where in replies:  # decoded in the score pass
                        return {k_: v[lo:hi] for k_, v in replies[where].items()}
                    texts, parsed, _ = generate_scores(judge, prompts[lo:hi], scale, max_new_tokens=g_new,
                                                       progress=progress, overflow=overflow)
                    return {"example_ids": np.asarray([p.example_id for p in prompts[lo:hi]]),
                            "parsed_scores": np.asarray(parsed, np.float32), "texts": np.asarray(texts)}

                computed, n_rows = _row_chunks(where, gen_key(job, judge), len(prompts), make)
                replies.pop(where, None)
            elif job.role == "contrastive_generate":
                match = contrastive_generate_match(cfg, n)
                a_path = paths[match["assistant"]]
                # The hash `models.load` gives the assistant, without loading it for a finished job.
                key = {**gen_key(job, judge), **match,
                       "assistant_sha256": source_sha256(a_path, memo_dir=cache_root())}

                c_prompts: list = []  # rendered for the smaller context once the assistant is loaded

                def make(lo, hi, job=job, scale=scale, template=template, match=match, a_path=a_path,
                         c_prompts=c_prompts):
                    nonlocal assistant
                    if assistant is None:
                        assistant = M.load(a_path, dtype=cfg.dtype, mesh=mesh)
                    # Both judges read the same tokens, so the prompts fit the smaller context.
                    c_ctx = min(ctx, int(assistant.config.max_position_embeddings))
                    if not c_prompts:
                        c_prompts.extend(gen_prompts(job, judge, template, scale, c_ctx))
                    prompts = c_prompts[lo:hi]
                    texts, parsed, _ = contrastive_generate_scores(
                        judge, assistant, prompts, scale, g_new, lam=match["lam"], t_main=match["t_main"],
                        t_asst=match["t_asst"], alpha=match["alpha"], progress=progress, overflow=overflow,
                        context_length=c_ctx)
                    return {"example_ids": np.asarray([p.example_id for p in prompts]),
                            "parsed_scores": np.asarray(parsed, np.float32), "texts": np.asarray(texts)}

                computed, n_rows = _row_chunks(where, key, len(data[job.task].examples), make)
            elif job.role in ("random_r", "random_t"):
                prompts = random_number_prompts(scale, chat=chat,
                                                task_template=template if job.role == "random_t" else None)

                def make(prompts=prompts, scale=scale):
                    # One pass gives both the candidate log-probs and each prompt's NLL.
                    ex = extract(judge, prompts, scale, progress=False, overflow=overflow, prompt_nll=True,
                                 **engine_opts)
                    return {"example_ids": np.asarray(ex.example_ids), "cand_logprobs": ex.cand_logprobs,
                            "sequence_nll": ex.prompt_nll}

                computed, n_rows = _one_chunk(where, {**key, "model_sha256": judge.sha256}, make)
            elif job.role == "content_free":
                rendered = render_all(template, content_free_examples(template), scale, chat=chat)

                def make(prompts=rendered.prompts, scale=scale):
                    ex = extract(judge, prompts, scale, progress=False, overflow=overflow, **engine_opts)
                    return {"example_ids": np.asarray(ex.example_ids), "cand_logprobs": ex.cand_logprobs}

                computed, n_rows = _one_chunk(where, {**key, "model_sha256": judge.sha256}, make)
            else:  # pragma: no cover - extraction_plan only makes the roles above
                raise ValueError(f"unknown extraction role {job.role!r}")
            log(f"{'computed' if computed else 'cached  '} {where.relative_to(root)} ({n_rows} rows)")
            results.append(JobResult(job, where, computed, n_rows))
        del judge, assistant
    return results


def _default_context_length(path: Path) -> int | None:
    """The model file's own context length, read from its metadata (no weights)."""
    if path.suffix == ".gguf":
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
    root = Path(store_root or cfg.store_root)
    data = {t.task: load_task_data(t) for t in cfg.tasks}
    defaults = engine_options()
    counts = {"upgraded": 0, "current": 0, "absent": 0}
    contexts: dict[str, int | None] = {}
    todo = []
    for job in extraction_plan(cfg):
        where = job_store_path(root, job)
        if not (where / "manifest.json").is_file():
            counts["absent"] += 1
            continue
        store = Store.open(where)
        setup = job_setup(cfg, job, data[job.task].examples if job.task else ())
        want = {**store_match(job)}
        if job.role == "contrastive_generate":
            want.update(contrastive_generate_match(cfg, job.model))
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
                    if not path.is_file():
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
