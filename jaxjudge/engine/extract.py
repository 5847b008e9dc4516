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
  length bucket (`jaxjudge.engine.plan.bucket_length`) and run up to ``batch_size`` at a time,
  cut into calls that pad least (`jaxjudge.engine.plan.plan_batches`); each (bucket, rows)
  shape compiles once. Long prompts get fewer rows per call (``max_batch_tokens``).
- The output head runs only at the read positions (the answer position, and the positions
  inside a multi-token candidate); the statistics are reduced on the device.
- With a ``mesh``, the batch is split over its ``data`` axis (parameters placed by the
  models package's rules; a shared prefix is replicated).

Chunks, the store and several processes
---------------------------------------
The work is cut into chunks of whole prefix groups (`jaxjudge.engine.plan.plan_chunks`).
With a ``store`` each finished chunk is written at once; a run started again (after a crash
or a kill) computes only the chunks that are missing and returns the same arrays. Under
``jax.distributed`` each process takes the chunks ``j`` with ``j % process_count ==
process_index``, writes them to the store, waits for the others, and reads the merged
result (a shared folder; with one folder per process, merge them with
`jaxjudge.store.merge_stores`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from jaxjudge.engine.plan import (
    ENGINE_CALL_COST,
    Batch,
    CandidatePlan,
    Chunk,
    Tokenised,
    bucket_length,
    candidate_plan,
    nll_token_span,
    plan_batches,
    plan_chunks,
    resolve_candidates,
    shared_prefix_length,
    slot_bucket,
    tokenise,
)
from jaxjudge.engine.progress import Progress
from jaxjudge.models import decoder as _dec
from jaxjudge.prompts import RenderedPrompt, ScoreCandidates, ScoreScale
from jaxjudge.store import Store, StoreError, ids_digest

_CLAIM_POLL_S = 0.5  # how often a worker looks again at chunks other workers hold

__all__ = [
    "ENGINE_FORMAT",
    "ARRAY_FIELDS",
    "Extraction",
    "Placement",
    "extract",
    "extraction_key",
    "model_sha256",
    "GenerationRoomError",
    "check_generation_room",
    "prefill_prefix",
    "score_generate_rows",
    "score_rows",
]

ENGINE_FORMAT = "jaxjudge-engine/1"

# Per-example arrays of an Extraction, in the order they are documented.
ARRAY_FIELDS = (
    "cand_logprobs",
    "log_normaliser",
    "greedy_ids",
    "valid",
    "topk_ids",
    "topk_logprobs",
    "n_prompt_tokens",
    "truncated",
    "extension_logprob",
)


@dataclass(frozen=True)
class Extraction:
    """What the engine returns per example (rows in the order of the prompts given).

    Attributes:
        example_ids: ``[N]`` example ids.
        cand_logprobs: ``[N, K]`` float32, log p(candidate | prompt + extension), normalised
            over the full vocabulary (multi-token candidates: sum of teacher-forced token
            log-probabilities).
        log_normaliser: ``[N]`` float32, logsumexp of the logits at the answer position.
        greedy_ids: ``[N]`` int32, full-vocabulary argmax at the answer position.
        valid: ``[N]`` bool, whether the greedy token is the first token of a candidate.
        topk_ids: ``[N, k]`` int32, the k most likely tokens at the answer position.
        topk_logprobs: ``[N, k]`` float32, their log-probabilities.
        n_prompt_tokens: ``[N]`` int32, tokens of the prompt (after any truncation; without the
            extension).
        truncated: ``[N]`` bool, whether the prompt's source text was cut to fit the context.
        extension_logprob: ``[N]`` float32, log p(extension | prompt) (0 without an
            extension): add it to ``cand_logprobs`` for the probability of the whole answer
            text ``separator + label``.
        candidates: the `ScoreCandidates` the columns of ``cand_logprobs`` refer to.
        computed_chunks: chunks computed by this call (the others came from the store).
        prompt_nll: ``[N]`` float32, each prompt's mean per-token negative log-likelihood
            (its log-perplexity), when `extract` was asked for it (``prompt_nll=True``), else
            None. The mean runs over every token after the first or, for a prompt with an
            ``nll_span``, over the tokens of that span only (each conditioned on everything
            before it, see `jaxjudge.engine.plan.nll_token_span`); NaN when no token counts.
        generated_ids: ``[N, G]`` int32, the greedy reply to each prompt when `extract` was
            asked for one (``generate_tokens=G``), else None; padding after a row's end.
        generated_lengths: ``[N]`` int32, the tokens of each reply (up to and including the
            first end-of-sequence token); -1 for rows this call read from the store instead
            of computing them (the store keeps the scores, not the replies).
        truncated_tokens: ``[N]`` int32, how many tokens of each prompt's source text were cut
            to fit the context (by `render_all` or by the engine; 0 where nothing was cut), or
            None when unknown (rows rebuilt from arrays that do not carry the count).
    """

    example_ids: list[str]
    cand_logprobs: np.ndarray
    log_normaliser: np.ndarray
    greedy_ids: np.ndarray
    valid: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    n_prompt_tokens: np.ndarray
    truncated: np.ndarray
    extension_logprob: np.ndarray
    candidates: ScoreCandidates | None = None
    computed_chunks: tuple[int, ...] = ()
    prompt_nll: np.ndarray | None = None
    generated_ids: np.ndarray | None = None
    generated_lengths: np.ndarray | None = None
    truncated_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.example_ids)

    @property
    def values(self) -> np.ndarray:
        """``[K]`` float32, the score of each candidate column."""
        if self.candidates is None:
            raise ValueError("this Extraction carries no candidates")
        return self.candidates.scale.values

    @property
    def validity_rate(self) -> float:
        """Share of examples whose greedy token starts a score candidate."""
        return float(np.mean(self.valid)) if len(self) else float("nan")

    def arrays(self) -> dict[str, np.ndarray]:
        """All per-example arrays, ``example_ids`` as a unicode array (the store's format)."""
        out = {"example_ids": np.asarray(self.example_ids, dtype=str)}
        out.update({name: getattr(self, name) for name in ARRAY_FIELDS})
        for name in ("prompt_nll", "truncated_tokens"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], candidates: ScoreCandidates | None = None,
                    computed_chunks: Sequence[int] = ()) -> "Extraction":
        """Rebuilds an Extraction from `arrays` output (e.g. `Store.load`)."""
        missing = [f for f in ("example_ids", *ARRAY_FIELDS) if f not in arrays]
        if missing:
            raise KeyError(f"arrays lack {missing}")
        opt = {f: None if arrays.get(f) is None else np.asarray(arrays[f]) for f in ("prompt_nll", "truncated_tokens")}
        return cls(example_ids=[str(x) for x in arrays["example_ids"]],
                   **{f: np.asarray(arrays[f]) for f in ARRAY_FIELDS},
                   candidates=candidates, computed_chunks=tuple(computed_chunks), **opt)

    def take(self, index: Sequence[int] | np.ndarray) -> "Extraction":
        """The rows ``index`` (in that order)."""
        index = np.asarray(index, np.int64)
        opt = {f: None if getattr(self, f) is None else getattr(self, f)[index]
               for f in ("prompt_nll", "generated_ids", "generated_lengths", "truncated_tokens")}
        return dataclasses.replace(self, example_ids=[self.example_ids[i] for i in index],
                                   **{f: getattr(self, f)[index] for f in ARRAY_FIELDS}, **opt)


# ------------------------------------------------------------------------------ device code


@functools.partial(jax.jit, static_argnames=("graphdef", "answer_read", "topk"))
def score_rows(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    read_br: jax.Array,
    pick_read_bm: jax.Array,
    pick_token_bm: jax.Array,
    prefix: _dec.KVCache | None = None,
    nll_use_bt: jax.Array | None = None,
    *,
    answer_read: int,
    topk: int,
) -> tuple[jax.Array, ...]:
    """One batch of rows: forward to the read positions, reduce to the per-row statistics.

    Args:
        graphdef, state: ``nnx.split`` of the decoder.
        tokens_bt: [B, T] int32 token ids (left-padded).
        mask_bt: [B, T] bool, True on real tokens.
        read_br: [B, R] int32 indices into T whose next-token distributions are needed.
        pick_read_bm: [B, M] int32, which read each picked log-probability comes from.
        pick_token_bm: [B, M] int32, the token it is the log-probability of.
        prefix: optional batch-1 KV cache of the shared prefix.
        nll_use_bt: optional [B, T] bool: the slots whose next token's negative log-likelihood
            is summed per row (slot j predicts token j + 1); None skips it.
        answer_read: the read (in [0, R)) at the answer position (static).
        topk: k (static).

    Returns:
        ``picked [B, M]`` log-probabilities, ``log_normaliser [B]``, ``greedy [B]`` int32,
        ``topk_logprobs [B, k]``, ``topk_ids [B, k]`` int32 (the last four at the answer read),
        and with ``nll_use_bt`` the summed NLL ``[B]`` float32 as a sixth output.
    """
    model = nnx.merge(graphdef, state)
    positions_bt = _dec.default_positions(mask_bt, None, prefix)
    nll_b = None
    if nll_use_bt is None:
        logits_brv, _ = model(tokens_bt, positions_bt, mask_bt, read_br, None, prefix)
    else:
        h_btd, _ = model.trunk(tokens_bt, positions_bt, mask_bt, None, prefix)
        logits_brv = model.head(jnp.take_along_axis(h_btd, read_br.astype(jnp.int32)[..., None], axis=1))
        target_bt, _ = _dec.next_token_targets(tokens_bt, mask_bt)
        nll_b = _dec.next_token_nll(model, h_btd, target_bt, nll_use_bt.astype(bool))
    out = _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read, topk)
    return out if nll_b is None else (*out, nll_b)


def _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read: int, topk: int):
    """Logits at the read positions -> (picked, log_normaliser, greedy, top-k log-probs, ids)."""
    logz_br = jax.nn.logsumexp(logits_brv, axis=-1)
    rows_b1 = jnp.arange(logits_brv.shape[0])[:, None]
    picked_bm = logits_brv[rows_b1, pick_read_bm, pick_token_bm] - logz_br[rows_b1, pick_read_bm]
    answer_bv = logits_brv[:, answer_read]
    logz_b = logz_br[:, answer_read]
    top_bk, top_ids_bk = jax.lax.top_k(answer_bv, topk)
    greedy_b = jnp.argmax(answer_bv, axis=-1).astype(jnp.int32)
    return picked_bm, logz_b, greedy_b, top_bk - logz_b[:, None], top_ids_bk.astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("graphdef", "answer_read", "topk", "max_new_tokens", "eos_ids",
                                             "pad_id"))
def score_generate_rows(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    tokens_bt: jax.Array,
    mask_bt: jax.Array,
    read_br: jax.Array,
    pick_read_bm: jax.Array,
    pick_token_bm: jax.Array,
    cache: _dec.KVCache,
    prefix: _dec.KVCache | None = None,
    *,
    answer_read: int,
    topk: int,
    max_new_tokens: int,
    eos_ids: tuple[int, ...],
    pad_id: int,
) -> tuple[jax.Array, ...]:
    """`score_rows` (same reads and picks) plus the greedy reply, from one prefill.

    The prefill fills ``cache`` (empty, ``T + max_new_tokens`` slots); the logits at the answer
    read give the score statistics and the first generated token, and decoding continues from
    the cache (`jaxjudge.models.decoder.generate`). The answer read must be each row's last
    token (single-token candidates, no extension: see `check_generation_room`).

    Returns:
        The five `score_rows` outputs, then ``generated [B, G]`` int32 and ``lengths [B]``.
    """
    model = nnx.merge(graphdef, state)
    positions_bt = _dec.default_positions(mask_bt, cache, prefix)
    logits_brv, cache = model(tokens_bt, positions_bt, mask_bt, read_br, cache, prefix)
    out = _reduce_reads(logits_brv, pick_read_bm, pick_token_bm, answer_read, topk)
    gen_bg, lengths_b, _ = _dec.generate(graphdef, state, logits_brv[:, answer_read], cache, jax.random.key(0), prefix,
                                         max_new_tokens=max_new_tokens, temperature=0.0, top_k=None,
                                         eos_ids=eos_ids, pad_id=pad_id)
    return (*out, gen_bg, lengths_b)


@functools.partial(jax.jit, static_argnames=("graphdef",))
def _prefix_nll(graphdef: nnx.GraphDef, state: nnx.State, tokens_bt: jax.Array, mask_bt: jax.Array):
    """A right-padded batch-1 prefix: the NLL [T] of each of its tokens after the first (slot
    j holds that of token j + 1; 0 past the prefix) and the log-probabilities [V] of the token
    after its last real token."""
    model = nnx.merge(graphdef, state)
    mask_bt = mask_bt.astype(bool)
    h_btd, _ = model.trunk(tokens_bt, _dec.default_positions(mask_bt), mask_bt)
    target_bt, use_bt = _dec.next_token_targets(tokens_bt, mask_bt)
    last = jnp.sum(mask_bt[0]) - 1
    logits_v = model.head(h_btd[:, last][:, None])[0, 0]
    return _dec.next_token_nll(model, h_btd, target_bt, use_bt, per_slot=True)[0], jax.nn.log_softmax(logits_v)


class Placement:
    """Where batches go: one device, or split over a mesh's ``data`` axis (prefixes replicated).

    Args:
        mesh: a ``jax.sharding.Mesh`` with a ``data`` axis, or None.
    """

    def __init__(self, mesh: Any = None):
        self.mesh = mesh
        self.row_multiple = 1 if mesh is None else int(mesh.shape["data"])

    def rows(self, x: np.ndarray) -> jax.Array:
        """A batch-major array, split over ``data``."""
        if self.mesh is None:
            return jnp.asarray(x)
        return jax.device_put(x, NamedSharding(self.mesh, PartitionSpec("data", *([None] * (x.ndim - 1)))))

    def replicated(self, tree: Any) -> Any:
        """A pytree copied to every device of the mesh."""
        if self.mesh is None:
            return jax.tree.map(jnp.asarray, tree)
        return jax.device_put(tree, NamedSharding(self.mesh, PartitionSpec()))

    def round_rows(self, n: int) -> int:
        """``n`` rounded up to a multiple of the data axis."""
        return -(-n // self.row_multiple) * self.row_multiple

    def empty_cache(self, judge: Any, batch: int, slots: int) -> _dec.KVCache:
        """An empty per-row KV cache for a batch, its rows split over ``data`` like the batch."""
        if self.mesh is None:
            return _dec.init_cache(judge.config, batch, slots, judge.dtype)
        from jaxjudge.models import sharding  # noqa: PLC0415

        cache = self.replicated(_dec.init_cache(judge.config, batch, slots, judge.dtype))
        return jax.device_put(cache, sharding.cache_sharding(self.mesh, cache))


def prefill_prefix(judge: Any, ids: Sequence[int], place: Placement) -> _dec.KVCache:
    """The batch-1 KV cache of a shared prefix.

    The tokens are right-padded to `bucket_length` (the prefill's compute) inside a cache of
    `slot_bucket` slots (what later calls attend to), so few shapes compile.

    Args:
        judge: the judge.
        ids: the prefix's token ids.
        place: device placement (the cache is replicated over a mesh).

    Returns:
        A `KVCache` with batch 1 whose valid slots are the prefix tokens.
    """
    p = len(ids)
    pb = bucket_length(p)
    tokens = np.full((1, pb), judge.pad_id, np.int32)
    tokens[0, :p] = ids
    mask = np.zeros((1, pb), bool)
    mask[0, :p] = True
    cache = _dec.init_cache(judge.config, 1, slot_bucket(pb), judge.dtype)
    tokens, mask, read, cache = place.replicated((tokens, mask, np.zeros((1, 1), np.int32), cache))
    _, cache = _dec.forward(judge.graphdef, judge.state, tokens, mask, read, None, cache, None)
    return cache


class _Runner:
    """Runs the plan on the device(s): prefill of shared prefixes, batched scoring of rows."""

    def __init__(self, judge: Any, cplan: CandidatePlan, *, batch_size: int, max_batch_tokens: int,
                 topk: int, mesh: Any, prefix_cache: bool, min_prefix_tokens: int,
                 nll_spans: Sequence[tuple[int, int]] | None = None, generate_tokens: int = 0):
        self.judge = judge
        # Per prompt, the tokens [a, b) its NLL counts (`nll_token_span`); None: no NLL.
        self.nll_spans = nll_spans
        self.nll = nll_spans is not None
        self.generate_tokens = generate_tokens
        self.cfg = judge.config
        self.graphdef, self.state = judge.graphdef, judge.state
        self.cplan = cplan
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.topk = topk
        self.mesh = mesh
        self.prefix_cache = prefix_cache
        self.min_prefix_tokens = min_prefix_tokens
        self.pad_id = judge.pad_id
        self.place = Placement(mesh)

    # -- device calls

    def score(self, tails: Sequence[Sequence[int]], prefix: _dec.KVCache | None, batch: Batch,
              nll_slots: Sequence[tuple[int, int]] | None = None) -> dict[str, np.ndarray]:
        """Scores examples whose own tokens are ``tails`` (after the prefix, if any).

        Args:
            tails: ``[n]`` token lists (each non-empty), the examples of one call.
            prefix: the group's prefix cache, or None.
            batch: the call's padded shape (`plan_batches`): ``batch.rows`` examples of
                ``batch.length`` tokens.
            nll_slots: with the NLL on, ``[n]`` ranges ``[lo, hi)`` of tail positions whose
                next token's NLL is summed (position k predicts tail token k + 1).

        Returns:
            Per-example arrays (see `_Runner.run_chunk`), n rows.
        """
        cp = self.cplan
        n_var, r, t = cp.n_variants, cp.n_reads, batch.length
        rows, reads, picks_r, picks_t, slot_ranges = [], [], [], [], []
        for e, tail in enumerate(tails):
            for v in range(n_var):
                cont = cp.continuation(v)
                rows.append(list(tail) + cont)
                if self.nll:
                    slot_ranges.append(nll_slots[e])
                start = len(tail) - 1
                row_reads = [start + j for j in range(len(cont) + 1)]
                reads.append(row_reads + [row_reads[-1]] * (r - len(row_reads)))
                picks_r.append(cp.pick_read[v])
                picks_t.append(cp.pick_token[v])
        # Padding rows repeat the last one (their outputs are dropped).
        b = self.place.round_rows(batch.rows * n_var)
        pad = b - len(rows)
        tokens, mask = _dec.pad_batch(rows + [rows[-1]] * pad, side="left", length=t, pad_id=self.pad_id)
        lengths = np.asarray([len(x) for x in rows] + [len(rows[-1])] * pad)
        read_br = np.asarray(reads + [reads[-1]] * pad, np.int32) + (t - lengths)[:, None]
        pick_read = np.asarray(picks_r + [picks_r[-1]] * pad, np.int32)
        pick_token = np.asarray(picks_t + [picks_t[-1]] * pad, np.int32)
        put = self.place.rows
        nll_use = None
        if self.nll:
            # Slots whose next token is a counted prompt token of the row (never a candidate's).
            off = t - lengths
            lo, hi = np.asarray(slot_ranges + [slot_ranges[-1]] * pad, np.int64).reshape(-1, 2).T
            slots = np.arange(t)[None, :]
            nll_use = put((slots >= (off + lo)[:, None]) & (slots < (off + hi)[:, None]))
        if self.generate_tokens:
            cache = self.place.empty_cache(self.judge, b, t + self.generate_tokens)
            out = score_generate_rows(self.graphdef, self.state, put(tokens), put(mask), put(read_br.astype(np.int32)),
                                      put(pick_read), put(pick_token), cache, prefix, answer_read=cp.n_ext,
                                      topk=self.topk, max_new_tokens=self.generate_tokens,
                                      eos_ids=tuple(int(e) for e in self.cfg.eos_token_ids), pad_id=self.pad_id)
        else:
            out = score_rows(self.graphdef, self.state, put(tokens), put(mask), put(read_br.astype(np.int32)),
                             put(pick_read), put(pick_token), prefix, nll_use, answer_read=cp.n_ext, topk=self.topk)
        picked, logz, greedy, top_lp, top_ids = (np.asarray(x)[: len(rows)] for x in out[:5])
        res = self._per_example(picked.reshape(len(tails), n_var, -1), logz[::n_var], greedy[::n_var],
                                top_lp[::n_var], top_ids[::n_var])
        if self.nll:
            res["tail_nll"] = np.asarray(out[5], np.float64)[: len(rows)][::n_var]
        if self.generate_tokens:
            res["generated_ids"] = np.asarray(out[5], np.int32)[: len(rows)]
            res["generated_lengths"] = np.asarray(out[6], np.int32)[: len(rows)]
        return res

    def _per_example(self, picked_nvm, logz, greedy, top_lp, top_ids) -> dict[str, np.ndarray]:
        cp = self.cplan
        cand = np.stack([sum(picked_nvm[:, v, m].astype(np.float64) for v, m in terms)
                         for terms in cp.cand_terms], axis=1)
        ext = np.zeros(len(logz), np.float64)
        for v, m in cp.ext_terms:
            ext += picked_nvm[:, v, m]
        return {
            "cand_logprobs": cand.astype(np.float32),
            "log_normaliser": logz.astype(np.float32),
            "greedy_ids": greedy.astype(np.int32),
            "valid": np.isin(greedy, cp.first_tokens),
            "topk_ids": top_ids.astype(np.int32),
            "topk_logprobs": top_lp.astype(np.float32),
            "extension_logprob": ext.astype(np.float32),
        }

    def _run_sorted(self, members: Sequence[int], tails: Mapping[int, Sequence[int]],
                    prefix: _dec.KVCache | None, collect: Callable, n_prefix: int = 0) -> None:
        """Scores ``members`` longest first, in the calls `plan_batches` chooses.

        ``n_prefix`` is the number of prefix tokens before every tail (0 without a prefix).
        """
        extra = self.cplan.n_ext + max(len(p) for p in self.cplan.paths)
        order = sorted(members, key=lambda i: -len(tails[i]))
        slots = None
        if self.nll:
            # Tail position k predicts prompt token n_prefix + k + 1: keep those inside [a, b).
            slots = {}
            for i in order:
                a, b = self.nll_spans[i]
                lo = max(a, n_prefix + 1) - n_prefix - 1
                slots[i] = (lo, max(lo, b - n_prefix - 1))
        for batch in plan_batches([len(tails[i]) + extra for i in order], max_rows=self.batch_size,
                                  max_tokens=self.max_batch_tokens, rows_per_example=self.cplan.n_variants,
                                  call_cost=ENGINE_CALL_COST):
            idx = order[batch.start:batch.stop]
            collect(idx, self.score([tails[i] for i in idx], prefix, batch,
                                    None if slots is None else [slots[i] for i in idx]))

    def run_chunk(self, chunk: Chunk, tk: Tokenised, progress: Progress) -> dict[str, np.ndarray]:
        """All arrays of one chunk, rows in ``chunk.members`` order."""
        results: dict[int, dict[str, np.ndarray]] = {}
        flat: list[int] = []

        def collect(members: Sequence[int], out: dict[str, np.ndarray]) -> None:
            for j, i in enumerate(members):
                results[int(i)] = {k: v[j] for k, v in out.items()}
            progress.update(len(members), sum(len(tk.ids[i]) for i in members))

        prefix_nll: dict[int, float] = {}
        for piece in chunk.pieces:
            seqs = [tk.ids[i] for i in piece]
            p = shared_prefix_length(seqs) if len(piece) > 1 else 0
            if not self.prefix_cache or p < self.min_prefix_tokens:
                flat.extend(int(i) for i in piece)
                continue
            prefix = prefill_prefix(self.judge, seqs[0][:p], self.place)
            if self.nll:
                # The counted prefix tokens' NLL, and the prediction of each example's first
                # tail token (prompt token p), from the prefix alone.
                pb = bucket_length(p)
                ptok = np.full((1, pb), self.pad_id, np.int32)
                ptok[0, :p] = seqs[0][:p]
                pmask = np.zeros((1, pb), bool)
                pmask[0, :p] = True
                pre_tok, pre_lp = _prefix_nll(self.graphdef, self.state, *self.place.replicated((ptok, pmask)))
                pre_tok, pre_lp = np.asarray(pre_tok, np.float64), np.asarray(pre_lp, np.float64)
                for i in piece:
                    a, b = self.nll_spans[int(i)]
                    # Slot j of the prefix holds the NLL of token j + 1 (tokens 1 .. p - 1).
                    total = float(pre_tok[max(a, 1) - 1:max(min(b, p) - 1, 0)].sum())
                    if a <= p < b:
                        total -= pre_lp[tk.ids[i][p]]
                    prefix_nll[int(i)] = total
            self._run_sorted([int(i) for i in piece], {int(i): tk.ids[i][p:] for i in piece}, prefix, collect,
                             n_prefix=p)
            del prefix
        if flat:
            self._run_sorted(flat, {i: tk.ids[i] for i in flat}, None, collect)

        members = chunk.members
        arrays = {k: np.stack([results[int(i)][k] for i in members]) for k in results[int(members[0])]}
        arrays["n_prompt_tokens"] = np.asarray([len(tk.ids[i]) for i in members], np.int32)
        arrays["truncated"] = tk.truncated[members]
        arrays["truncated_tokens"] = np.asarray([tk.prompts[i].truncated_tokens for i in members], np.int32)
        arrays["example_ids"] = np.asarray([tk.prompts[i].example_id for i in members], dtype=str)
        if self.nll:
            tail = arrays.pop("tail_nll")
            total = tail + np.asarray([prefix_nll.get(int(i), 0.0) for i in members])
            count = np.asarray([self.nll_spans[int(i)][1] - self.nll_spans[int(i)][0] for i in members], np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                arrays["prompt_nll"] = np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)
        return arrays


# ------------------------------------------------------------------------------ keys, store


def model_sha256(judge: Any) -> str:
    """The judge's content hash: ``judge.sha256`` (the model files), else a hash of its parameters."""
    if getattr(judge, "sha256", None):
        return str(judge.sha256)
    h = hashlib.sha256()
    h.update(repr(judge.config).encode())
    for path, leaf in sorted(jax.tree_util.tree_leaves_with_path(judge.state), key=lambda x: str(x[0])):
        arr = np.asarray(jax.device_get(leaf))
        h.update(f"{jax.tree_util.keystr(path)}:{arr.dtype}:{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _prompts_sha256(prompts: Sequence[RenderedPrompt]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        # The NLL span enters only when set, so the keys of prompts without one are unchanged.
        span = [] if p.nll_span is None else [list(p.nll_span)]
        h.update(json.dumps([p.example_id, p.prefix, p.suffix, p.answer_separator, p.add_special_tokens,
                             p.truncated_tokens, *span], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def extraction_key(
    judge: Any,
    prompts: Sequence[RenderedPrompt],
    candidates: ScoreCandidates,
    *,
    chunk_size: int,
    topk: int,
    overflow: str,
    context_length: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The store key of an extraction: everything its arrays depend on, nothing they don't.

    Batch size, buckets, the prefix-cache switch, devices and process count are left out:
    they change the floating-point rounding, not what is computed, so a run may resume with
    other settings.

    Args:
        judge: the judge (its file hash, or a parameter hash when it has none, and dtype).
        prompts: the prompts as given (before the engine's own truncation).
        candidates: the resolved score candidates.
        chunk_size, topk, overflow, context_length: as given to `extract`.
        extra: more entries (e.g. ``role``, ``model``, ``task``, ``aspect``, ``scale`` for the
            report's store lookup); a clash with an engine entry raises.

    Returns:
        A JSON-able dict for `jaxjudge.store.Store.open`.
    """
    ids = [p.example_id for p in prompts]
    key = {
        "engine": ENGINE_FORMAT,
        "model_sha256": model_sha256(judge),
        "dtype": jnp.dtype(judge.dtype).name,
        "n_examples": len(ids),
        "example_ids_sha256": ids_digest(ids),
        "prompts_sha256": _prompts_sha256(prompts),
        "candidates": candidates.to_key(),
        "chunk_size": int(chunk_size),
        "topk": int(topk),
        "overflow": overflow,
        "context_length": int(context_length),
    }
    for name, value in (extra or {}).items():
        if name in key:
            raise ValueError(f"key entry {name!r} is set by the engine; pick another name")
        key[name] = value
    return key


def _open_store(store: Any, key: dict[str, Any], n_chunks: int) -> Store:
    if isinstance(store, Store):
        if store.n_chunks is not None and store.n_chunks != n_chunks:
            raise ValueError(f"store {store.root} was opened for {store.n_chunks} chunks; this extraction has "
                             f"{n_chunks} (chunk_size or prompts differ)")
        store.n_chunks = n_chunks
        return store
    if isinstance(store, (str, os.PathLike)):
        return Store.open(store, key, n_chunks=n_chunks,
                          info={"process_count": jax.process_count(), "backend": jax.default_backend()})
    raise TypeError(f"store must be a folder path or a jaxjudge.store.Store, got {type(store).__name__}")


def _barrier(name: str) -> None:
    from jax.experimental import multihost_utils  # noqa: PLC0415

    multihost_utils.sync_global_devices(name)


# ------------------------------------------------------------------------------ entry point


def check_prompts(prompts: Any) -> list[RenderedPrompt]:
    if isinstance(prompts, (str, RenderedPrompt)):
        raise TypeError("prompts must be a sequence of RenderedPrompt, not a single prompt")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: nothing to extract")
    seen: set[str] = set()
    for i, p in enumerate(prompts):
        if not isinstance(p, RenderedPrompt):
            raise TypeError(f"prompts[{i}] is a {type(p).__name__}, not a jaxjudge.prompts.RenderedPrompt")
        if p.example_id in seen:
            raise ValueError(f"prompts[{i}]: duplicate example id {p.example_id!r}")
        seen.add(p.example_id)
    return prompts


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def extract(
    judge: Any,
    prompts: Sequence[RenderedPrompt],
    candidates: ScoreCandidates | ScoreScale,
    *,
    batch_size: int = 16,
    store: str | os.PathLike | Store | None = None,
    chunk_size: int = 256,
    topk: int = 5,
    progress: bool = True,
    overflow: str = "truncate",
    mesh: Any = None,
    prefix_cache: bool = True,
    context_length: int | None = None,
    max_batch_tokens: int = 8192,
    min_prefix_tokens: int = 32,
    key: Mapping[str, Any] | None = None,
    on_chunk: Callable[[int], None] | None = None,
    prompt_nll: bool = False,
    generate_tokens: int = 0,
) -> Extraction:
    """Extracts the judge's score log-probabilities for rendered prompts.

    Args:
        judge: a `jaxjudge.models.Judge`.
        prompts: ``[N]`` rendered prompts (unique example ids); a
            `jaxjudge.prompts.RenderResult` works too.
        candidates: the `ScoreCandidates`, or a `ScoreScale` to tokenise after the prompts;
            either way they are checked against how every prompt ends.
        batch_size: examples per forward call (rows, times the candidate variants; rounded up
            to a multiple of the mesh's data axis).
        store: a folder (opened or created with `extraction_key`) or an open
            `jaxjudge.store.Store`; finished chunks are written as they finish and skipped
            when the call is repeated. Each chunk is claimed before it is computed
            (`jaxjudge.store.Store.claim_chunk`), so several processes started on one store
            share its chunks. None keeps everything in memory.
        chunk_size: most examples per chunk (whole prefix groups are kept together).
        topk: k of the top-k tokens recorded at the answer position.
        progress: show a progress bar (examples/s, tokens/s).
        overflow: ``"truncate"`` (cut the end of the shared prefix text, i.e. the source
            document, never the suffix; flagged in ``truncated``) or ``"raise"``
            (`jaxjudge.prompts.ContextOverflowError` naming the example). See
            `jaxjudge.engine.plan.tokenise`.
        mesh: a ``jax.sharding.Mesh`` with a ``data`` axis: the batch is split over it
            (and the parameters placed by the models package's rules, on a copy of the judge).
            Default: the judge's own mesh (``judge.shard``), if any. Under several processes
            it must hold only this process's devices.
        prefix_cache: compute each shared prefix once (True) or run every prompt in full.
        context_length: the context to fit in (default the model's
            ``max_position_embeddings``).
        max_batch_tokens: cap on rows x padded length per call (long prompts get smaller
            batches).
        min_prefix_tokens: shorter shared prefixes are not worth a separate prefill.
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

    Returns:
        `Extraction` in the order of ``prompts``.

    Raises:
        ValueError / TypeError: empty or malformed prompts, bad parameters.
        ContextOverflowError: a prompt too long for the context under ``overflow="raise"``
            (or with nothing to cut).
        CandidateTokenizationError: a candidate with no token sequence of its own after a
            prompt (the message names the value and the example).
    """
    prompts = check_prompts(prompts)
    batch_size = _positive_int("batch_size", batch_size)
    chunk_size = _positive_int("chunk_size", chunk_size)
    topk = _positive_int("topk", topk)
    max_batch_tokens = _positive_int("max_batch_tokens", max_batch_tokens)
    if topk > judge.config.vocab_size:
        raise ValueError(f"topk={topk} exceeds the vocabulary ({judge.config.vocab_size})")
    if overflow not in ("truncate", "raise"):
        raise ValueError(f"overflow must be 'truncate' or 'raise', got {overflow!r}")
    ctx = judge.config.max_position_embeddings if context_length is None else _positive_int(
        "context_length", context_length)

    cands = resolve_candidates(judge.tokenizer, prompts, candidates)
    cplan = candidate_plan(cands)
    limit = ctx - cplan.n_reads
    if limit < 1:
        raise ValueError(f"context_length={ctx} leaves no room for a prompt before the {cplan.n_reads} answer tokens")
    tk = tokenise(judge.tokenizer, prompts, limit=limit, overflow=overflow)
    generate_tokens = 0 if not generate_tokens else _positive_int("generate_tokens", generate_tokens)
    if generate_tokens:
        check_generation_room(tk, cplan, generate_tokens, ctx)
        if prompt_nll:
            raise ValueError("prompt_nll and generate_tokens cannot be combined in one extract call")
    chunks = plan_chunks(tk.group_of, chunk_size)

    n_proc, proc = jax.process_count(), jax.process_index()
    st = None
    if store is not None:
        extra = dict(key or {})
        if prompt_nll:
            extra["prompt_nll"] = True
        ekey = extraction_key(judge, prompts, cands, chunk_size=chunk_size, topk=topk, overflow=overflow,
                              context_length=ctx, extra=extra)
        st = _open_store(store, ekey, len(chunks))
    elif n_proc > 1:
        raise ValueError(
            f"running under {n_proc} processes: pass a store (a folder every process can write, or one per "
            "process merged with jaxjudge.store.merge_stores) so the processes' chunks can be combined"
        )
    mine = [c.index for c in chunks if c.index % n_proc == proc]
    todo = [c for c in mine if st is None or not st.has_chunk(c)]

    if mesh is None:
        mesh = judge.mesh
    if mesh is not None:
        if "data" not in mesh.shape:
            raise ValueError(f"mesh needs a 'data' axis, has {tuple(mesh.shape)}")
        if any(d.process_index != proc for d in np.asarray(mesh.devices).flat):
            raise ValueError("mesh must hold only this process's devices (each process extracts its own chunks)")
        if judge.mesh is not mesh:
            judge = copy.copy(judge).shard(mesh)
    spans = None
    if prompt_nll:
        spans = [nll_token_span(judge.tokenizer, p, ids) for p, ids in zip(tk.prompts, tk.ids)]
    runner = _Runner(judge, cplan, batch_size=batch_size, max_batch_tokens=max_batch_tokens, topk=topk,
                     mesh=mesh, prefix_cache=prefix_cache, min_prefix_tokens=min_prefix_tokens, nll_spans=spans,
                     generate_tokens=generate_tokens)

    in_memory: dict[int, dict[str, np.ndarray]] = {}
    replies: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    computed: list[int] = []
    # A store keeps the array names of its first chunks: one written before chunks carried
    # ``truncated_tokens`` is resumed without it (its load would refuse mixed chunks).
    done = [] if st is None else st.completed_chunks()
    legacy = bool(done) and "truncated_tokens" not in st.read_chunk(done[0])
    with Progress(sum(len(chunks[c]) for c in todo), enabled=progress) as bar:

        def compute(c: int) -> None:
            arrays = runner.run_chunk(chunks[c], tk, bar)
            if generate_tokens:
                replies[c] = (arrays.pop("generated_ids"), arrays.pop("generated_lengths"))
            if legacy:
                arrays.pop("truncated_tokens")
            if st is not None:
                st.write_chunk(c, arrays)
            else:
                in_memory[c] = arrays
            computed.append(c)

        if st is None:
            for c in todo:
                compute(c)
                if on_chunk is not None:
                    on_chunk(c)
        else:
            # Each chunk is claimed just before it is computed, so workers started on one store
            # share its chunks; the ones other workers hold are waited for at the end (and taken
            # over if their worker died).
            pending = list(todo)
            while pending:
                waiting = []
                for c in pending:
                    claim = st.claim_chunk(c)
                    if claim is None:
                        if not st.has_chunk(c):
                            waiting.append(c)
                        continue
                    with claim:
                        compute(c)
                    if on_chunk is not None:
                        on_chunk(c)
                if waiting:
                    time.sleep(_CLAIM_POLL_S)
                pending = waiting
    if n_proc > 1:
        _barrier(f"jaxjudge-extract-{st.key_hash[:16]}")
    ext = _assemble(chunks, tk, st, in_memory, cands, computed)
    if generate_tokens:
        ids = np.full((len(tk.prompts), generate_tokens), judge.pad_id, np.int32)
        lengths = np.full(len(tk.prompts), -1, np.int32)
        for c, (g, n) in replies.items():
            ids[chunks[c].members], lengths[chunks[c].members] = g, n
        if len(ext) != len(tk.prompts):  # some chunks missing (other processes' folders)
            row = {p.example_id: i for i, p in enumerate(tk.prompts)}
            keep = np.asarray([row[e] for e in ext.example_ids], np.int64)
            ids, lengths = ids[keep], lengths[keep]
        ext = dataclasses.replace(ext, generated_ids=ids, generated_lengths=lengths)
    return ext


class GenerationRoomError(ValueError):
    """Scoring and generation cannot share one prefill for these prompts and candidates."""


def check_generation_room(tk: Tokenised, cplan: CandidatePlan, generate_tokens: int, context_length: int) -> None:
    """Raises `GenerationRoomError` unless scoring and a G-token reply can share one prefill.

    That needs single-token candidates read right after the prompt, and room for G tokens
    after every (tokenised, possibly truncated) prompt within the context.
    """
    if cplan.n_reads != 1:
        raise GenerationRoomError("generate_tokens needs single-token score candidates and no prompt_extension "
                         f"(these candidates need {cplan.n_reads} reads); generate with generate_scores instead")
    for i, ids in enumerate(tk.ids):
        if len(ids) + generate_tokens > context_length:
            raise GenerationRoomError(f"prompt {i} ({tk.prompts[i].example_id!r}) has {len(ids)} tokens: no room for "
                             f"{generate_tokens} generated tokens within the context of {context_length}")


def _assemble(chunks: list[Chunk], tk: Tokenised, st: Store | None, in_memory: dict[int, dict[str, np.ndarray]],
              cands: ScoreCandidates, computed: list[int]) -> Extraction:
    n = len(tk.prompts)
    parts: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
    missing = []
    for ch in chunks:
        if ch.index in in_memory:
            arrays = in_memory[ch.index]
        elif st is not None and st.has_chunk(ch.index):
            arrays = st.read_chunk(ch.index)
        else:
            missing.append(ch.index)
            continue
        want = [tk.prompts[i].example_id for i in ch.members]
        got = [str(x) for x in arrays.get("example_ids", [])]
        if got != want:
            raise StoreError(f"store {st.root if st else ''}: chunk {ch.index} holds examples {got[:3]}..., "
                             f"expected {want[:3]}...; the store does not match these prompts")
        parts.append((ch.members, arrays))
    if not parts:
        raise StoreError(f"store {st.root if st else ''}: none of the {len(chunks)} chunks is available")
    rows = np.concatenate([m for m, _ in parts])
    if missing:
        warnings.warn(f"{len(missing)} of {len(chunks)} chunks are not in the store (written by other processes "
                      "to other folders?); returning the examples of the chunks present. Merge the stores with "
                      "jaxjudge.store.merge_stores to get all.", stacklevel=3)
    out = {}
    names = list(ARRAY_FIELDS) + (["prompt_nll"] if all("prompt_nll" in a for _, a in parts) else [])
    for name in names:
        stacked = np.concatenate([a[name] for _, a in parts], axis=0)
        full = np.zeros((n, *stacked.shape[1:]), stacked.dtype)
        full[rows] = stacked
        out[name] = full
    keep = np.sort(rows) if missing else np.arange(n)
    # The tokenised prompts know every row's cut, whether its chunk was computed or read.
    cut = np.asarray([p.truncated_tokens for p in tk.prompts], np.int32)
    ext = Extraction(example_ids=[p.example_id for p in tk.prompts], **out, candidates=cands,
                     computed_chunks=tuple(computed), truncated_tokens=cut)
    return ext.take(keep) if missing else ext
