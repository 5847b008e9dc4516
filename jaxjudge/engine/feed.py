"""Each process feeds only its rows: an extraction over a mesh that spans several processes.

Under a mesh over several processes (a multi-host slice) every process runs the same program,
each batch's rows split over the mesh's ``data`` axis. No process tokenises, pads or places
the global batch: each one handles only the rows of the ``data`` blocks its own devices hold
(`jaxjudge.models.sharding.DataBlocks`), as MaxText's per-host loading does:

1. A plan every process derives from the same inputs, without tokens (`FeedPlan`): the
   chunks (`jaxjudge.engine.plan.plan_chunks`, from the prompts' prefix texts), and each
   chunk's work order cut into D runs of consecutive prompts, as equal as can be, run d for
   block d; a prefix group a cut falls inside becomes one part on each side, each with its
   own prefill.
2. Each process tokenises the prompts of its blocks (a prefix group that the overflow policy
   cuts and that spans blocks is tokenised whole, so that its members keep one cut). One
   exchange of small integers (each row's token count, the shared prefix of its part, its
   cut) then gives every process the shapes of every block, and a tokenising error on one
   process stops every process.
3. Each block's calls are planned as one process plans its own (`jaxjudge.engine.runner`) and
   run side by side: call k of the job is call k of every block, padded to the most rows and
   the longest length among them (a block with fewer calls runs a dummy one-token row whose
   output is dropped). Calls that continue a shared prefix come first, each block's prefix
   prefilled on its own devices; then the calls without one.
4. Each process reads its blocks' outputs from its own devices and reduces them there; the
   chunk's per-row results reach every process in one gather, whole.

Its results equal one process's to float32 rounding (the padded shapes differ), not to the
bit. With a prompt NLL the prompts run whole, without a shared prefix: a prefix's part of the
NLL needs a pass per group that blocks splitting the group cannot share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jax.experimental import multihost_utils

from jaxjudge.engine import calls
from jaxjudge.engine.decode import generate_tokens
from jaxjudge.engine.plan import Chunk, bucket_length, plan_chunks, shared_prefix_length
from jaxjudge.engine.runner import Group, Progress, pad_rows, plan_group
from jaxjudge.engine.score import ChunkReader
from jaxjudge.engine.tokens import Tokenised, group_keys, tokenise
from jaxjudge.models.kvcache import pad_batch
from jaxjudge.models.sharding import DataBlocks
from jaxjudge.multihost import process_max
from jaxjudge.prompts import RenderedPrompt

__all__ = ["FeedPlan", "FedReader", "Lockstep", "block_rows", "feed_plan", "generate_fed", "split_chunk"]

# Columns of the exchanged per-row integers.
_TOKENS, _PREFIX, _CUT, _TRUNCATED = range(4)


def split_chunk(chunk: Chunk, n_blocks: int) -> list[list[np.ndarray]]:
    """A chunk's prompts cut into ``n_blocks`` runs of its work order, as equal as can be.

    Returns:
        ``[n_blocks]`` lists of parts: the input indices of one prefix group's prompts in the
        block, in work order (a block may be empty).
    """
    n = len(chunk)
    block_at = (np.arange(n) * n_blocks) // n
    out: list[list[np.ndarray]] = [[] for _ in range(n_blocks)]
    pos = 0
    for piece in chunk.pieces:
        here = block_at[pos:pos + len(piece)]
        for b in np.unique(here):
            out[int(b)].append(np.asarray(piece)[here == b])
        pos += len(piece)
    return out


@dataclass
class FeedPlan:
    """Who feeds what: the chunks, each chunk's parts per block, and every row's shapes.

    Attributes:
        blocks: the mesh's ``data`` blocks and the ones this process holds.
        chunks: the chunks, as `plan_chunks` makes them.
        parts: ``parts[c][b]``: chunk c's parts fed by block b (`split_chunk`).
        block_of: ``[N]`` the block that feeds each prompt.
        info: ``[N, 4]`` int, every row's token count, its part's shared prefix (0: the row
            runs whole), its cut (``truncated_tokens``) and whether its text was cut.
    """

    blocks: DataBlocks
    chunks: list[Chunk]
    parts: list[list[list[np.ndarray]]]
    block_of: np.ndarray
    info: np.ndarray

    def fed_here(self) -> np.ndarray:
        """The input indices of the prompts this process feeds, in order."""
        return np.flatnonzero(np.isin(self.block_of, self.blocks.mine))


def _cut_blocks(prompts: Sequence[RenderedPrompt], chunk_size: int, n_blocks: int
                ) -> tuple[np.ndarray, list[Chunk], list[list[list[np.ndarray]]], np.ndarray]:
    """``(group_of, chunks, parts, block_of)``: the prompts' prefix groups, their chunks, each
    chunk cut into ``n_blocks`` runs (`split_chunk`) and the block that feeds each prompt; from
    the prompts' texts alone (no tokens)."""
    group_of = group_keys(prompts)
    chunks = plan_chunks(group_of, chunk_size)
    parts = [split_chunk(ch, n_blocks) for ch in chunks]
    block_of = np.zeros(len(prompts), np.int64)
    for per_block in parts:
        for b, rows in enumerate(per_block):
            for part in rows:
                block_of[part] = b
    return group_of, chunks, parts, block_of


def block_rows(prompts: Sequence[RenderedPrompt], chunk_size: int, n_blocks: int, block: int) -> np.ndarray:
    """The input indices of the prompts that block ``block`` of ``n_blocks`` feeds (`feed_plan`'s
    cut, made without tokens), in order: where a mesh's ``data`` blocks lie one run per process,
    the rows process ``block`` of ``n_blocks`` tokenises."""
    return np.flatnonzero(_cut_blocks(prompts, chunk_size, n_blocks)[3] == block)


def feed_plan(tokenizer: Any, prompts: Sequence[RenderedPrompt], mesh: Any, *, chunk_size: int, limit: int,
              overflow: str, prefix_cache: bool, min_prefix_tokens: int, whole: bool) -> tuple[Tokenised, FeedPlan]:
    """Plans an extraction over a mesh spanning processes and tokenises this process's rows.

    Every process of the job must call this with the same arguments (it ends in a collective).

    Args:
        tokenizer: the judge's tokenizer.
        prompts: ``[N]`` checked prompts.
        mesh: the mesh (over several processes, with a ``data`` axis).
        chunk_size: most prompts per chunk.
        limit, overflow: the context limit and overflow policy of `tokenise`.
        prefix_cache, min_prefix_tokens: when a part's shared prefix is prefilled apart.
        whole: every prompt runs whole (no shared prefix).

    Returns:
        ``(tk, plan)``: ``tk`` holds the token ids of this process's rows only (another
        process's row is a ``range`` of its length, never placed) and every row's cut.

    Raises:
        ValueError: (on every process) a prompt that cannot be tokenised as the policy asks;
            the process that holds it raises its own error, naming the example.
    """
    blocks = DataBlocks(mesh)
    group_of, chunks, parts, block_of = _cut_blocks(prompts, chunk_size, blocks.n)
    plan = FeedPlan(blocks, chunks, parts, block_of, np.zeros((len(prompts), 4), np.int64))
    mine = plan.fed_here()
    local = np.zeros((len(prompts) + 1, 4), np.int64)
    ids: dict[int, list[int]] = {}
    cut: dict[int, RenderedPrompt] = {}
    error: Exception | None = None
    try:
        got = _tokenise_rows(tokenizer, prompts, mine, group_of, limit, overflow)
    except ValueError as e:  # ContextOverflowError included
        error, got = e, {}
    if error is None:
        for i in mine.tolist():
            cut[i], ids[i] = got[i]
            local[i, _TOKENS] = len(ids[i])
            local[i, _CUT] = cut[i].truncated_tokens
            local[i, _TRUNCATED] = cut[i].truncated_tokens > 0
        for per_block in parts:
            for b in blocks.mine:
                for part in per_block[b]:
                    seqs = [ids[int(i)] for i in part]
                    p = shared_prefix_length(seqs) if len(part) > 1 else 0
                    if whole or not prefix_cache or p < min_prefix_tokens:
                        p = 0
                    local[part, _PREFIX] = p
    local[len(prompts), 0] = 1 if error else 0
    table = process_max(local)
    if table[len(prompts), 0]:
        if error is not None:
            raise error
        raise ValueError("another process of this job could not tokenise its prompts (its error names the "
                         "example); nothing was run")
    plan.info = table[:len(prompts)].astype(np.int64)
    rows: list[Any] = [ids[i] if i in ids else range(int(plan.info[i, _TOKENS])) for i in range(len(prompts))]
    shown = [cut[i] if i in cut else dataclasses.replace(p, truncated_tokens=int(plan.info[i, _CUT]))
             for i, p in enumerate(prompts)]
    return Tokenised(shown, rows, plan.info[:, _TRUNCATED].astype(bool), group_of), plan


def _tokenise_rows(tokenizer: Any, prompts: Sequence[RenderedPrompt], rows: np.ndarray, group_of: np.ndarray,
                   limit: int, overflow: str) -> dict[int, tuple[RenderedPrompt, list[int]]]:
    """The prompts ``rows`` tokenised: ``{row: (prompt after any cut, ids)}``. A prefix group
    the overflow policy cuts is tokenised whole (with rows of other processes), so that its
    members keep the one cut a process tokenising every prompt gives them."""
    rows = [int(i) for i in rows]
    tk = tokenise(tokenizer, [prompts[i] for i in rows], limit=limit, overflow=overflow)
    cut_groups = {int(group_of[i]) for i, p in zip(rows, tk.prompts)
                  if p.truncated_tokens != prompts[i].truncated_tokens}
    have = set(rows)
    spill = [i for i in range(len(prompts)) if int(group_of[i]) in cut_groups and i not in have]
    if spill:
        rows = sorted(have | set(spill))
        tk = tokenise(tokenizer, [prompts[i] for i in rows], limit=limit, overflow=overflow)
    return {i: (p, row) for i, p, row in zip(rows, tk.prompts, tk.ids)}


class Lockstep:
    """The calls of a chunk, every block's side by side (step 3 of the module docstring).

    Args:
        judges: the judges whose prefixes each step prefills (one; two for contrastive
            generation), on the one mesh over the processes.
        tk: from `feed_plan`.
        plan: from `feed_plan`.
        batch_size, max_batch_tokens: each block's call sizes (`jaxjudge.engine.runner.batches`).
        extra_tokens: tokens each row feeds after its tail.
        rows_per_example: rows each example takes (teacher-forcing variants).
    """

    def __init__(self, judges: Sequence[Any], tk: Tokenised, plan: FeedPlan, *, batch_size: int,
                 max_batch_tokens: int, extra_tokens: int = 0, rows_per_example: int = 1):
        self.judges = tuple(judges)
        self.tk = tk
        self.plan = plan
        self.blocks = plan.blocks
        self.pad = self.judges[0].pad_id
        self.sizes = dict(batch_size=batch_size, max_batch_tokens=max_batch_tokens, extra_tokens=extra_tokens,
                          rows_per_example=rows_per_example)

    def _groups(self, parts: list[np.ndarray]) -> list[Group]:
        ids, out, flat = self.tk.ids, [], []
        for part in parts:
            p = int(self.plan.info[part[0], _PREFIX])
            if p:
                out.append(Group([int(i) for i in part], {int(i): ids[i][p:] for i in part}, ids[part[0]][:p]))
            else:
                flat.extend(int(i) for i in part)
        if flat:
            out.append(Group(flat, {i: ids[i] for i in flat}, []))
        return out

    def _local_calls(self, parts: list[np.ndarray]) -> list[tuple[Group, list[int], Any]]:
        out = []
        for g in self._groups(parts):
            order, plans = plan_group(g, **self.sizes)
            out += [(g, order[b.start:b.stop], b) for b in plans]
        return out

    def _prefill(self, step: list) -> Any:
        prefixes = {b: (list(step[b][0].prefix_ids) if step[b] else [self.pad]) for b in self.blocks.mine}
        t = bucket_length(max(len(step[b][0].prefix_ids) if step[b] else 1 for b in range(self.blocks.n)))
        tokens, mask = {}, {}
        for b, ids in prefixes.items():
            tokens[b] = np.full((1, t), self.pad, np.int32)
            tokens[b][0, :len(ids)] = ids
            mask[b] = np.zeros((1, t), bool)
            mask[b][0, :len(ids)] = True
        read = {b: np.zeros((1, 1), np.int32) for b in self.blocks.mine}
        placed = [self.blocks.place(x, 1) for x in (tokens, mask, read)]
        return tuple(calls.prefill_placed(j, *placed) for j in self.judges)

    def steps(self, chunk: int, progress: Progress | None = None) -> Iterator[tuple[list, int, int, Any]]:
        """The job's calls of chunk ``chunk``: ``(step, rows, length, prefixes)``, ``step[b]``
        block b's call ``(group, members, batch)`` or None (a dummy), each block's part padded
        to ``rows`` examples of ``length`` tokens, ``prefixes`` each judge's prefix cache of the
        blocks (P = D) or None. Every process gets the same steps."""
        per_block = [self._local_calls(parts) for parts in self.plan.parts[chunk]]
        tokens = self.plan.info[:, _TOKENS]
        for with_prefix in (True, False):
            seqs = [[c for c in calls_b if bool(c[0].prefix_ids) == with_prefix] for calls_b in per_block]
            prefix, prefix_of = None, None
            for k in range(max(map(len, seqs))):
                step = [s[k] if k < len(s) else None for s in seqs]
                if with_prefix:
                    key = tuple(id(c[0]) if c else None for c in step)
                    if key != prefix_of:
                        prefix, prefix_of = self._prefill(step), key
                yield step, max(c[2].rows for c in step if c), max(c[2].length for c in step if c), prefix
                if progress is not None:
                    members = [i for c in step if c for i in c[1]]
                    progress.update(len(members), int(tokens[members].sum()))

    def tails(self, step: list, block: int, rows: int) -> list:
        """Block ``block``'s tails in a step, padded to ``rows`` (a dummy one-token row where the
        block has no call)."""
        if not step[block]:
            return [[self.pad]] * rows
        g, members, _ = step[block]
        return pad_rows([g.tails[i] for i in members], rows)

    def gather(self, members: np.ndarray, results: dict[int, dict[str, np.ndarray]],
               fields: list[tuple[str, Any, tuple[int, ...]]]) -> dict[str, np.ndarray]:
        """Every row's results (``fields``: name, dtype, per-row shape) on every process, from the
        process that fed it: one gather of each process's rows as bytes."""
        sizes = [int(np.dtype(dt).itemsize * np.prod(shape, dtype=np.int64)) for _, dt, shape in fields]
        buf = np.zeros((len(members), sum(sizes)), np.uint8)
        for j, i in enumerate(members):
            if int(i) in results:
                buf[j] = np.concatenate([np.ascontiguousarray(np.asarray(results[int(i)][name], dt)).reshape(-1)
                                         .view(np.uint8) for name, dt, _ in fields])
        every = np.asarray(multihost_utils.process_allgather(buf))  # [processes, n, bytes]
        feeder = [self.blocks.holders[int(self.plan.block_of[i])][0] for i in members]
        rows = every[feeder, np.arange(len(members))]
        out, at = {}, 0
        for (name, dt, shape), size in zip(fields, sizes):
            out[name] = np.ascontiguousarray(rows[:, at:at + size]).view(dt).reshape(len(members), *shape)
            at += size
        return out


class FedReader:
    """Runs a chunk with this process feeding only its blocks' rows (see the module docstring).

    Args:
        reader: the extraction's `ChunkReader` (its judge on the mesh over the processes; its
            ``nll_spans`` given for this process's rows, None elsewhere).
        tk: from `feed_plan`.
        plan: from `feed_plan`.
    """

    def __init__(self, reader: ChunkReader, tk: Tokenised, plan: FeedPlan):
        self.reader = reader
        self.tk = tk
        self.plan = plan
        self.blocks = plan.blocks
        self.lock = Lockstep((reader.judge,), tk, plan, batch_size=reader.batch_size,
                             max_batch_tokens=reader.max_batch_tokens,
                             extra_tokens=reader.cplan.n_ext + max(len(p) for p in reader.cplan.paths),
                             rows_per_example=reader.cplan.n_variants)

    def _dispatch(self, step: list, rows: int, length: int, prefix: Any) -> Any:
        r = self.reader
        nll = r.nll_spans is not None
        per: dict[int, tuple] = {}
        for b in self.blocks.mine:
            slots = None
            if nll:
                slots = pad_rows(r._tail_slots([(step[b][0], i) for i in step[b][1]]) if step[b] else [(0, 0)], rows)
            per[b] = r.row_arrays(self.lock.tails(step, b, rows), rows * r.cplan.n_variants, length, slots)
        n = rows * r.cplan.n_variants
        placed = [self.blocks.place({b: per[b][j] for b in per}, n) for j in range(5)]
        nll_use = self.blocks.place({b: per[b][5] for b in per}, n) if nll else None
        return calls.read_placed(r.judge, *placed, answer_read=r.cplan.n_ext, topk=r.topk, prefix=prefix,
                                 nll_use_bt=nll_use, generate_tokens=r.generate_tokens)

    def _collect(self, step: list, out: Any, results: dict[int, dict[str, np.ndarray]]) -> None:
        r = self.reader
        n_var = r.cplan.n_variants
        for b in self.blocks.mine:
            if not step[b]:
                continue
            g, members, _ = step[b]
            n = len(members) * n_var

            def mine(x: Any) -> np.ndarray:  # one value per example: its first variant's row
                return self.blocks.read(x, b)[:n][::n_var]

            picked = self.blocks.read(out.picked_bm, b)[:n].reshape(len(members), n_var, -1)
            res = r._per_example(picked, *(mine(x) for x in (out.log_normaliser_b, out.greedy_b,
                                                            out.topk_logprobs_bk, out.topk_ids_bk)))
            if out.generated_bg is not None:
                res["generated_ids"] = mine(out.generated_bg).astype(np.int32)
                res["generated_lengths"] = mine(out.lengths_b).astype(np.int32)
            if out.nll_b is not None:
                tail = mine(out.nll_b).astype(np.float64)
                spans = np.asarray([r.nll_spans[i] for i in members], np.float64).reshape(-1, 2)
                count = spans[:, 1] - spans[:, 0]
                with np.errstate(invalid="ignore", divide="ignore"):
                    res["prompt_nll"] = np.where(count > 0, tail / np.maximum(count, 1), np.nan).astype(np.float32)
            for j, i in enumerate(members):
                results.setdefault(i, {k: v[j] for k, v in res.items()})

    def _fields(self) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
        r = self.reader
        k = len(r.cplan.candidates.token_ids)
        out = [("cand_logprobs", np.float32, (k,)), ("log_normaliser", np.float32, ()), ("greedy_ids", np.int32, ()),
               ("valid", np.bool_, ()), ("topk_ids", np.int32, (r.topk,)), ("topk_logprobs", np.float32, (r.topk,)),
               ("extension_logprob", np.float32, ())]
        if r.generate_tokens:
            out += [("generated_ids", np.int32, (r.generate_tokens,)), ("generated_lengths", np.int32, ())]
        if r.nll_spans is not None:
            out.append(("prompt_nll", np.float32, ()))
        return out

    def run_chunk(self, chunk: Chunk, progress: Progress) -> dict[str, np.ndarray]:
        """All arrays of one chunk, rows in ``chunk.members`` order, on every process (every
        process must call this for the same chunk)."""
        results: dict[int, dict[str, np.ndarray]] = {}
        pending = None
        for step, rows, length, prefixes in self.lock.steps(chunk.index, progress):
            started = self._dispatch(step, rows, length, prefixes[0] if prefixes else None)
            # The next call is on its way before this one's outputs are read back.
            if pending is not None:
                self._collect(*pending, results)
            pending = (step, started)
        if pending is not None:
            self._collect(*pending, results)
        members = chunk.members
        arrays = self.lock.gather(members, results, self._fields())
        nll = arrays.pop("prompt_nll", None)
        info = self.plan.info
        arrays["n_prompt_tokens"] = info[members, _TOKENS].astype(np.int32)
        arrays["truncated"] = info[members, _TRUNCATED].astype(bool)
        arrays["truncated_tokens"] = info[members, _CUT].astype(np.int32)
        arrays["example_ids"] = np.asarray([self.tk.prompts[i].example_id for i in members], dtype=str)
        if nll is not None:
            arrays["prompt_nll"] = nll
        return arrays


def generate_fed(judges: Sequence[Any], tk: Tokenised, plan: FeedPlan, *, max_new_tokens: int, batch_size: int,
                 max_batch_tokens: int, progress: Progress | None = None,
                 decode: Callable[[list, tuple], tuple[Any, Any]] | None = None) -> list[list[int]]:
    """Replies to every prompt of a one-chunk `FeedPlan` over a mesh spanning processes, each
    process feeding its blocks' rows; the replies reach every process in one gather.

    Args:
        judges: one judge (`jaxjudge.engine.generate_scores`'s greedy replies), or the main judge
            and the assistant of `jaxjudge.engine.contrastive_generate`, on one mesh.
        decode: ``decode(extended, prefixes)`` -> ``(tokens [B, G], lengths [B])`` device arrays,
            from each judge's ``(logits, cache)`` of the step's rows and its prefix cache (None
            without one); the default decodes the one judge greedily.

    Returns:
        ``[N]`` reply token ids (up to and including the first EOS), on every process.
    """
    judges = tuple(judges)
    if decode is None:
        def decode(extended, prefixes):
            (logits, cache), = extended
            return generate_tokens(judges[0], logits[:, 0], cache, max_new_tokens=max_new_tokens,
                                   prefix=prefixes[0], host=False)
    lock = Lockstep(judges, tk, plan, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
    blocks = lock.blocks
    results: dict[int, dict[str, np.ndarray]] = {}
    for step, rows, length, prefixes in lock.steps(0, progress):
        tokens, mask, read = {}, {}, {}
        for b in blocks.mine:
            tokens[b], mask[b] = pad_batch(lock.tails(step, b, rows), side="left", length=length, pad_id=lock.pad)
            read[b] = np.full((rows, 1), length - 1, np.int32)
        placed = [blocks.place(x, rows) for x in (tokens, mask, read)]
        prefixes = prefixes or (None,) * len(judges)
        extended = [calls.extend_placed(j, *placed, prefix=p, max_length=length + max_new_tokens)
                    for j, p in zip(judges, prefixes)]
        out, lengths = decode(extended, prefixes)
        for b in blocks.mine:
            if step[b]:
                ids, n = blocks.read(out, b), blocks.read(lengths, b)
                for r, i in enumerate(step[b][1]):
                    results[i] = {"ids": ids[r], "length": n[r]}
    got = lock.gather(np.arange(len(tk.prompts)), results,
                      [("ids", np.int32, (max_new_tokens,)), ("length", np.int32, ())])
    return [row[:n].tolist() for row, n in zip(got["ids"], got["length"])]
