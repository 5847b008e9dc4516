"""Score extraction: the judge's log-probabilities over the score candidates, at scale.

For each rendered prompt the engine reads the next-token distribution at the answer position
(after the prompt and the candidates' shared ``prompt_extension``) and returns, over the FULL
vocabulary: the log-probability of each of the K score candidates (multi-token candidates
such as "10" teacher-forced: the sum of their tokens' log-probabilities), the log-normaliser,
the greedy token and whether it starts a score candidate (validity), and the top-k tokens.

How it is fast
--------------
- Prompts with the same prefix text (instructions + source document) form a group; the
  prefix is run once (batch 1) into a KV cache and every suffix of the group attends to it
  (`jaxjudge.models.decoder` broadcasts a batch-1 prefix over the batch without copying it).
- Suffixes (or whole prompts, without a shared prefix) are sorted by length, left-padded to a
  length bucket (`jaxjudge.engine.primitives.bucket_length`) and run up to ``batch_size`` at a
  time, cut into calls that pad least (`jaxjudge.engine.plan.plan_batches`); each (bucket,
  rows) shape compiles once. Long prompts get fewer rows per call (``max_batch_tokens``). The
  walk is the engine's one loop (`jaxjudge.engine.runner`).
- The output head runs only at the read positions (the answer position, and the positions
  inside a multi-token candidate); the statistics are reduced on the device
  (`jaxjudge.engine.calls.read_rows`).
- The candidates are a score scale's labels or any label set: a pairwise verdict is
  ``extract(judge, prompts, ("A", "B"))``.
- With a ``mesh``, the batch is split over its ``data`` axis (parameters placed by the
  models package's rules; a shared prefix is replicated).

Chunks, the store and several processes
---------------------------------------
The work is cut into chunks of whole prefix groups (`jaxjudge.engine.plan.plan_chunks`).
With a ``store`` each finished chunk is written at once; a run started again (after a crash
or a kill) computes only the chunks that are missing and returns the same arrays. Under
``jax.distributed`` each process takes the chunks ``j`` with ``j % process_count ==
process_index`` first, then every chunk nobody holds, each under a claim, writes them to
the store, waits for the chunks the others hold (taking over those of a dead process), and
reads the whole result: the processes share one folder (a local one, or a bucket prefix). When the mesh spans the processes (a multi-host slice, the
judge's ``model`` axis possibly across hosts) they are one worker instead: every call is one
SPMD program, each process tokenises and places only the rows of the ``data`` blocks its own
devices hold, each chunk's results reach every process in one gather
(`jaxjudge.engine.feed`), and process 0 claims and writes the chunks
(`jaxjudge.store.work.claimed_chunks`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import numpy as np

from jaxjudge.engine.result import ARRAY_FIELDS, Extraction
from jaxjudge.engine.feed import FedReader, feed_plan
from jaxjudge.engine.store_key import extraction_key, open_store
from jaxjudge.engine.options import EngineOptions
from jaxjudge.engine.plan import CandidatePlan, Chunk, candidate_plan, plan_chunks, resolve_candidates
from jaxjudge.engine.runner import Progress
from jaxjudge.engine.score import ChunkReader
from jaxjudge.engine.tokens import RowsOnDemand, Tokenised, check_prompts, nll_token_span, positive_int, tokenise
from jaxjudge.models.judge import Judge
from jaxjudge.prompts import RenderedPrompt, ScoreCandidates, ScoreScale
from jaxjudge.models.sharding import spans_processes
from jaxjudge.store import CLAIM_STALE_S, Store, StoreError, assign_chunks
from jaxjudge.store.location import is_bucket
from jaxjudge.store.work import claimed_chunks

__all__ = ["GenerationRoomError", "check_generation_room", "extract"]

def extract(
    judge: Judge,
    prompts: Sequence[RenderedPrompt],
    candidates: ScoreCandidates | ScoreScale | Sequence[str],
    options: EngineOptions | None = None,
    *,
    store: str | os.PathLike | Store | None = None,
    progress: bool = True,
    key: Mapping[str, Any] | None = None,
    on_chunk: Callable[[int], None] | None = None,
    prompt_nll: bool = False,
    generate_tokens: int = 0,
    claim_lease: float = CLAIM_STALE_S,
    local: bool = False,
    read_back: bool = True,
    **engine: Any,
) -> Extraction:
    """Extracts the judge's score log-probabilities for rendered prompts.

    Args:
        judge: a `jaxjudge.models.Judge`.
        prompts: ``[N]`` rendered prompts (unique example ids); a
            `jaxjudge.prompts.RenderResult` works too.
        candidates: the `ScoreCandidates`, or a `ScoreScale` or a label set (e.g. ``("A",
            "B")``) to tokenise after the prompts; either way they are checked against how
            every prompt ends.
        options: the engine's options (`EngineOptions`), overridden by ``**engine`` entries of
            the same names. Under ``mesh`` (default: the judge's own) the batch is split over
            its ``data`` axis, on a copy of the judge; several processes: the module docstring.
        store: a folder (opened or created with `extraction_key`) or an open `Store`; chunks
            are written as they finish, each claimed first (workers on one store share its
            chunks), and skipped when the call is repeated. None keeps everything in memory.
        progress: show a progress bar (examples/s, tokens/s).
        key: extra store-key entries (see `extraction_key`).
        on_chunk: called with the chunk index after each chunk this call computes.
        prompt_nll: also return each prompt's mean token NLL (`Extraction.prompt_nll`: over
            every token after the first, or over the tokens of the prompt's ``nll_span``),
            from the same forward passes (the output head then runs at every prompt position;
            a shared prefix's part is computed once per group). Equal to
            `jaxjudge.engine.sequence_nll` of the prompts.
        generate_tokens: G > 0 also decodes each prompt's greedy reply of up to G tokens from
            the same prefill (`Extraction.generated_ids`), instead of a second pass over the
            prompts as `jaxjudge.engine.generate_scores` makes. Needs single-token candidates
            read right after the prompt (no ``prompt_extension``) and room for G tokens after
            every prompt. The replies are returned, not stored: the store key and arrays are
            those of a plain extraction.
        claim_lease: seconds without a heartbeat before another worker's claim is taken over.
        local: this process computes every chunk itself, whatever the number of processes (no
            split, no wait for the others): for a call made inside a piece of work this process
            alone has claimed (a prompt-set job's one chunk).
        read_back: False returns only the rows of the chunks this call computed (none, when
            the store held them all), reading no chunk back: for a worker whose result is the
            store (the experiment's jobs; another process's chunks are never read).

    Returns:
        `Extraction` in the order of ``prompts`` (with ``read_back=False``: the rows of
        ``computed_chunks`` only, in that order too).

    Raises:
        ValueError / TypeError: empty or malformed prompts, bad parameters.
        ContextOverflowError: a prompt too long for the context under ``overflow="raise"``
            (or with nothing to cut).
        CandidateTokenizationError: a candidate with no token sequence of its own after a
            prompt (the message names the value and the example).
    """
    prompts = check_prompts(prompts)
    o = EngineOptions.of(options, **engine)
    cands = resolve_candidates(judge.tokenizer, prompts, candidates)
    cplan = candidate_plan(cands)
    ctx, limit, generate_tokens = _context(judge, o, cplan, generate_tokens, prompt_nll)
    mesh, spmd = _checked_mesh(judge, o)
    tk, feed, chunks, rows = _tokenised(judge, prompts, mesh, spmd, o, limit, prompt_nll, local)
    if generate_tokens:
        check_generation_room(tk, cplan, generate_tokens, ctx)
    st, todo = _store_and_todo(judge, prompts, cands, o, ctx, store, key, prompt_nll, len(chunks), spmd, local)
    run = _chunk_runner(judge, mesh, o, cplan, tk, feed, prompt_nll, generate_tokens, rows, ctx)
    in_memory, replies, computed = _compute_chunks(run, chunks, todo, st, progress=progress, claim_lease=claim_lease,
                                                   spmd=spmd, on_chunk=on_chunk, generate=bool(generate_tokens))
    ext = _assemble(chunks, tk, st, in_memory, cands, computed, rows, read_back, o.topk)
    return _with_replies(ext, judge, tk, chunks, replies, generate_tokens) if generate_tokens else ext


def _context(judge: Judge, o: EngineOptions, cplan: CandidatePlan, generate_tokens: int,
             prompt_nll: bool) -> tuple[int, int, int]:
    """The context length, the tokens a prompt may have before the answer's reads, and the
    tokens to generate (checked)."""
    generate_tokens = 0 if not generate_tokens else positive_int("generate_tokens", generate_tokens)
    if generate_tokens and prompt_nll:
        raise ValueError("prompt_nll and generate_tokens cannot be combined in one extract call")
    if o.topk > judge.config.vocab_size:
        raise ValueError(f"topk={o.topk} exceeds the vocabulary ({judge.config.vocab_size})")
    ctx = judge.config.max_position_embeddings if o.context_length is None else o.context_length
    limit = ctx - cplan.n_reads
    if limit < 1:
        raise ValueError(f"context_length={ctx} leaves no room for a prompt before the {cplan.n_reads} answer tokens")
    return ctx, limit, generate_tokens


def _checked_mesh(judge: Judge, o: EngineOptions) -> tuple[Any, bool]:
    """The mesh the call runs under (the options', else the judge's own), and whether it spans
    processes: then they compute every chunk together (one SPMD program), each process tokenising
    and placing only the rows of its own devices (`jaxjudge.engine.feed`)."""
    mesh = judge.mesh if o.mesh is None else o.mesh
    spmd = spans_processes(mesh)
    if mesh is not None:
        if "data" not in mesh.shape:
            raise ValueError(f"mesh needs a 'data' axis, has {tuple(mesh.shape)}")
        if spmd and mesh.devices.size != jax.device_count():
            raise ValueError(f"a mesh over several processes must hold all {jax.device_count()} devices of the "
                             f"job, this one holds {mesh.devices.size}")
    return mesh, spmd


def _tokenised(judge: Judge, prompts: Sequence[RenderedPrompt], mesh: Any, spmd: bool, o: EngineOptions, limit: int,
               prompt_nll: bool, local: bool) -> tuple[Tokenised, Any, list[Chunk], RowsOnDemand | None]:
    """The prompts tokenised (under SPMD: this process's rows only, with the feed plan), their
    chunks, and where several processes claim the chunks, the `RowsOnDemand` that tokenises a
    chunk's rows when this process takes it (so a prompt the overflow policy refuses fails
    there; the chunks written before it stay)."""
    if not (local or spmd or prompt_nll) and jax.process_count() > 1:
        rows = RowsOnDemand(judge.tokenizer, prompts, limit=limit, overflow=o.overflow)
        return rows.tk, None, plan_chunks(rows.tk.group_of, o.chunk_size), rows  # chunks from texts, as `feed_plan`
    if spmd:
        tk, feed = feed_plan(judge.tokenizer, prompts, mesh, chunk_size=o.chunk_size, limit=limit, overflow=o.overflow,
                             prefix_cache=o.prefix_cache, min_prefix_tokens=o.min_prefix_tokens, whole=prompt_nll)
        return tk, feed, feed.chunks, None
    tk = tokenise(judge.tokenizer, prompts, limit=limit, overflow=o.overflow)
    return tk, None, plan_chunks(tk.group_of, o.chunk_size), None


def _store_and_todo(judge: Judge, prompts: Sequence[RenderedPrompt], cands: ScoreCandidates, o: EngineOptions,
                    ctx: int, store: Any, key: Mapping[str, Any] | None, prompt_nll: bool, n_chunks: int, spmd: bool,
                    local: bool) -> tuple[Store | None, list[int]]:
    """The opened store (None: in memory) and the chunks this process goes for, in order."""
    n_proc, proc = (1, 0) if local or spmd else (jax.process_count(), jax.process_index())
    st = None
    if store is not None:
        extra = dict(key or {})
        if prompt_nll:
            extra["prompt_nll"] = True
        ekey = extraction_key(judge, prompts, cands, chunk_size=o.chunk_size, topk=o.topk, overflow=o.overflow,
                              context_length=ctx, extra=extra)
        st = open_store(store, ekey, n_chunks)
    elif n_proc > 1:
        raise ValueError(
            f"running under {n_proc} processes: pass a store (a folder every process can write, or one per "
            "process merged with jaxjudge.store.merge_stores) so the processes' chunks can be combined"
        )
    if spmd:
        return st, list(range(n_chunks))
    # Every chunk is claimed, not striped: each process starts with its own stripe, then
    # takes the others' chunks nobody holds, so a dead or slow process's chunks are done.
    mine = assign_chunks(range(n_chunks), proc, n_proc)
    order = mine + [c for c in range(n_chunks) if c not in set(mine)]
    return st, [c for c in order if st is None or not st.has_chunk(c)]


def _chunk_runner(judge: Judge, mesh: Any, o: EngineOptions, cplan: CandidatePlan, tk: Tokenised, feed: Any,
                  prompt_nll: bool, generate_tokens: int, rows: RowsOnDemand | None,
                  ctx: int) -> Callable[[Chunk, Any], dict[str, np.ndarray]]:
    """``run(chunk, bar) -> arrays``: the chunk read by the judge (on a copy placed on ``mesh``
    unless it is the judge's own; fed per process under SPMD; with ``rows``, its rows tokenised
    first)."""
    if mesh is not None and judge.mesh is not mesh:
        judge = copy.copy(judge).shard(mesh)
    spans = None
    if prompt_nll:
        fed = None if feed is None else set(feed.fed_here().tolist())
        spans = [nll_token_span(judge.tokenizer, p, ids) if fed is None or i in fed else None
                 for i, (p, ids) in enumerate(zip(tk.prompts, tk.ids))]
    data = 1 if judge.mesh is None else int(judge.mesh.shape["data"])
    per_call = data if o.groups_per_call is None else o.groups_per_call
    if per_call % data and data % per_call:
        raise ValueError(f"engine option groups_per_call={per_call} must divide the mesh's data axis ({data}) or be a "
                         f"multiple of it: each data shard reads whole groups, or a share of one group")
    reader = ChunkReader(judge, cplan, batch_size=o.batch_size, max_batch_tokens=o.max_batch_tokens, topk=o.topk,
                         prefix_cache=o.prefix_cache, min_prefix_tokens=o.min_prefix_tokens, nll_spans=spans,
                         generate_tokens=generate_tokens, groups_per_call=per_call)
    if feed is not None:
        return FedReader(reader, tk, feed).run_chunk
    if rows is None:
        return lambda chunk, bar: reader.run_chunk(chunk, tk, bar)

    def run(chunk: Chunk, bar: Any) -> dict[str, np.ndarray]:
        rows.fill(chunk.members)
        if generate_tokens:
            check_generation_room(tk, cplan, generate_tokens, ctx, chunk.members)
        return reader.run_chunk(chunk, tk, bar)

    return run


def _compute_chunks(run: Callable[[Chunk, Any], dict[str, np.ndarray]], chunks: list[Chunk], todo: list[int],
                    st: Store | None, *, progress: bool, claim_lease: float, spmd: bool,
                    on_chunk: Callable[[int], None] | None, generate: bool) -> tuple[dict, dict, list[int]]:
    """Computes the chunks of ``todo`` (claimed one by one in a store): their arrays kept in
    memory, the generated replies per chunk, and the chunks this call computed, in order."""
    in_memory: dict[int, dict[str, np.ndarray]] = {}
    replies: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    computed: list[int] = []
    # A store keeps the array names of its first chunks: one written before chunks carried
    # ``truncated_tokens`` is resumed without it (its load would refuse mixed chunks). Told by the
    # names in one finished chunk's directory (no array read), when this call computes a chunk.
    done = [] if st is None else st.completed_chunks()
    legacy: list[bool] = []
    with Progress(sum(len(chunks[c]) for c in todo), enabled=progress) as bar:

        def compute(c: int) -> dict[str, np.ndarray]:
            arrays = run(chunks[c], bar)
            if generate:
                replies[c] = (arrays.pop("generated_ids"), arrays.pop("generated_lengths"))
            if not legacy:
                legacy.append(bool(done) and "truncated_tokens" not in st.chunk_names(done[0]))
            if legacy[0]:
                arrays.pop("truncated_tokens")
            computed.append(c)
            in_memory[c] = arrays  # kept: the result is assembled without reading it back
            return arrays

        if st is None:
            for c in todo:
                in_memory[c] = compute(c)
                if on_chunk is not None:
                    on_chunk(c)
        else:
            # Each chunk is claimed just before it is computed, so workers started on one store
            # share its chunks; the ones other workers hold are waited for at the end (and taken
            # over if their worker died).
            claimed_chunks(st, todo, compute, claim_lease, spmd=spmd, on_written=on_chunk)
    return in_memory, replies, computed


def _with_replies(ext: Extraction, judge: Judge, tk: Tokenised, chunks: list[Chunk],
                  replies: dict[int, tuple[np.ndarray, np.ndarray]], generate_tokens: int) -> Extraction:
    """``ext`` with the greedy replies of the chunks this call computed (-1 lengths elsewhere)."""
    ids = np.full((len(tk.prompts), generate_tokens), judge.pad_id, np.int32)
    lengths = np.full(len(tk.prompts), -1, np.int32)
    for c, (g, n) in replies.items():
        ids[chunks[c].members], lengths[chunks[c].members] = g, n
    if len(ext) != len(tk.prompts):  # some chunks missing (other processes' folders)
        row = {p.example_id: i for i, p in enumerate(tk.prompts)}
        keep = np.asarray([row[e] for e in ext.example_ids], np.int64)
        ids, lengths = ids[keep], lengths[keep]
    return dataclasses.replace(ext, generated_ids=ids, generated_lengths=lengths)


class GenerationRoomError(ValueError):
    """Scoring and generation cannot share one prefill for these prompts and candidates."""


def check_generation_room(tk: Tokenised, cplan: CandidatePlan, generate_tokens: int, context_length: int,
                          rows: Sequence[int] | np.ndarray | None = None) -> None:
    """Raises `GenerationRoomError` unless scoring and a G-token reply can share one prefill.

    That needs single-token candidates read right after the prompt, and room for G tokens
    after every (tokenised, possibly truncated) prompt within the context: of ``rows`` (default
    all), those tokenised so far (`RowsOnDemand` tokenises a chunk's when it is computed).
    """
    if cplan.n_reads != 1:
        raise GenerationRoomError("generate_tokens needs single-token score candidates and no prompt_extension "
                         f"(these candidates need {cplan.n_reads} reads); generate with generate_scores instead")
    for i in range(len(tk.ids)) if rows is None else (int(r) for r in rows):
        ids = tk.ids[i]
        if ids is not None and len(ids) + generate_tokens > context_length:
            raise GenerationRoomError(f"prompt {i} ({tk.prompts[i].example_id!r}) has {len(ids)} tokens: no room for "
                             f"{generate_tokens} generated tokens within the context of {context_length}")


def _assemble(chunks: list[Chunk], tk: Tokenised, st: Store | None, in_memory: dict[int, dict[str, np.ndarray]],
              cands: ScoreCandidates, computed: list[int], rows: RowsOnDemand | None, read_back: bool,
              topk: int) -> Extraction:
    """The extraction of the chunks computed here and (``read_back``) of those read from the store."""
    n = len(tk.prompts)
    parts: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
    missing = []
    read = _read_chunks(st, [ch.index for ch in chunks if ch.index not in in_memory] if read_back else [])
    for ch in chunks:
        arrays = in_memory.get(ch.index, read.get(ch.index))
        if arrays is None:
            missing.append(ch.index)
            continue
        want = [tk.prompts[i].example_id for i in ch.members]
        got = [str(x) for x in arrays.get("example_ids", [])]
        if got != want:
            raise StoreError(f"store {st.root if st else ''}: chunk {ch.index} holds examples {got[:3]}..., "
                             f"expected {want[:3]}...; the store does not match these prompts")
        parts.append((ch.members, arrays))
    if not parts and not read_back:
        return _no_rows(cands, topk)
    if not parts:
        raise StoreError(f"store {st.root if st else ''}: none of the {len(chunks)} chunks is available")
    rows_of = np.concatenate([m for m, _ in parts])
    if missing and read_back:
        warnings.warn(f"{len(missing)} of {len(chunks)} chunks are not in the store (written by other processes "
                      "to other folders?); returning the examples of the chunks present. Merge the stores with "
                      "jaxjudge.store.merge_stores to get all.", stacklevel=3)
    out = {}
    names = list(ARRAY_FIELDS) + (["prompt_nll"] if all("prompt_nll" in a for _, a in parts) else [])
    for name in names:
        stacked = np.concatenate([a[name] for _, a in parts], axis=0)
        full = np.zeros((n, *stacked.shape[1:]), stacked.dtype)
        full[rows_of] = stacked
        out[name] = full
    keep = np.sort(rows_of) if missing else np.arange(n)
    if rows is not None:
        _cuts_read(rows, [(m, a) for m, a in parts if rows.missing(m)])
    # The tokenised prompts know every row's cut, whether its chunk was computed or read.
    cut = np.asarray([p.truncated_tokens for p in tk.prompts], np.int32)
    ext = Extraction(example_ids=[p.example_id for p in tk.prompts], **out, candidates=cands,
                     computed_chunks=tuple(computed), truncated_tokens=cut)
    return ext.take(keep) if missing else ext


def _cuts_read(rows: RowsOnDemand, parts: list[tuple[np.ndarray, dict[str, np.ndarray]]]) -> None:
    """The cut of each row read from the store and not tokenised here: the one its chunk recorded
    (a chunk written before chunks recorded it: the rows tokenised)."""
    for members, arrays in parts:
        if "truncated_tokens" not in arrays:
            rows.fill(members)
            continue
        for i, c in zip(members.tolist(), arrays["truncated_tokens"].tolist()):
            if rows.tk.ids[i] is None:
                rows.tk.prompts[i] = dataclasses.replace(rows.tk.prompts[i], truncated_tokens=int(c))


def _no_rows(cands: ScoreCandidates, topk: int) -> Extraction:
    """An extraction of no rows (a call with ``read_back=False`` that computed no chunk)."""
    f32, i32 = np.zeros(0, np.float32), np.zeros(0, np.int32)
    k = len(cands.token_ids)
    return Extraction(example_ids=[], cand_logprobs=np.zeros((0, k), np.float32), log_normaliser=f32, greedy_ids=i32,
                      valid=np.zeros(0, bool), topk_ids=np.zeros((0, topk), np.int32),
                      topk_logprobs=np.zeros((0, topk), np.float32), n_prompt_tokens=i32, truncated=np.zeros(0, bool),
                      extension_logprob=f32, candidates=cands, truncated_tokens=i32)


def _read_chunks(st: Store | None, wanted: list[int]) -> dict[int, dict[str, np.ndarray]]:
    """The chunks of ``wanted`` that ``st`` holds (those computed elsewhere), read concurrently
    from a bucket (each a whole-object GET), one after another from a local disk."""
    if st is None or not wanted:
        return {}

    def one(i: int) -> dict[str, np.ndarray] | None:
        return st.read_chunk(i) if st.has_chunk(i) else None

    if is_bucket(st.root):
        with ThreadPoolExecutor(max_workers=8) as pool:
            got = dict(zip(wanted, pool.map(one, wanted)))
    else:
        got = {i: one(i) for i in wanted}
    return {i: a for i, a in got.items() if a is not None}
