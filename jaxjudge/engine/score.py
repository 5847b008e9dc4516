"""Reading the candidates of one chunk: rows, reads and picks for the judge's `read_rows`.

For each prompt the engine reads the next-token distribution at the answer position (after
the prompt and the candidates' shared ``prompt_extension``) and, for multi-token candidates,
inside each teacher-forced continuation (`jaxjudge.engine.plan.CandidatePlan`); the output
head runs only at those reads and the statistics are reduced on the device. With a prompt
NLL the head also runs at every prompt position: a shared prefix's part once per group
(`jaxjudge.engine.calls.prefix_nll`), each tail's part in the same call as its reads.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from jaxjudge.engine import calls
from jaxjudge.engine.plan import CandidatePlan, Chunk
from jaxjudge.engine.primitives import RowReads
from jaxjudge.engine.runner import Call, Group, Progress, batches, left_slots, pad_rows, prefix_groups
from jaxjudge.engine.tokens import Tokenised
from jaxjudge.models.decoder import KVCache, pad_batch
from jaxjudge.models.judge import Judge
from jaxjudge.models.sharding import to_host

__all__ = ["ChunkReader"]


class ChunkReader:
    """Reads the candidates (and optionally NLL or a greedy reply) of chunks of prompts.

    Args:
        judge: the judge (placed on its mesh).
        cplan: the candidates' read/pick tables.
        batch_size, max_batch_tokens: call sizes (`jaxjudge.engine.runner.batches`).
        topk: k of the top-k tokens recorded at the answer position.
        prefix_cache, min_prefix_tokens: prefix groups (`jaxjudge.engine.runner.prefix_groups`).
        nll_spans: per prompt, the tokens ``[a, b)`` its NLL counts; None: no NLL.
        generate_tokens: G > 0 also decodes each prompt's greedy reply of G tokens.
        groups_per_call: P > 1 reads small prefix groups P at a time, each against its own
            prefix (`jaxjudge.engine.runner.batches`); P a multiple or a divisor of the mesh's
            ``data`` axis (each group's part then padded to a multiple of data / P examples, so
            every data shard reads one group's rows).
    """

    def __init__(self, judge: Judge, cplan: CandidatePlan, *, batch_size: int, max_batch_tokens: int, topk: int,
                 prefix_cache: bool, min_prefix_tokens: int, nll_spans: Sequence[tuple[int, int]] | None = None,
                 generate_tokens: int = 0, groups_per_call: int = 1):
        self.judge = judge
        self.cplan = cplan
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.topk = topk
        self.prefix_cache = prefix_cache
        self.min_prefix_tokens = min_prefix_tokens
        self.nll_spans = nll_spans
        self.generate_tokens = generate_tokens
        self.groups_per_call = groups_per_call

    def dispatch(self, tails: Sequence[Sequence[int]], prefix: KVCache | None, rows: int, length: int,
                 nll_slots: Sequence[tuple[int, int]] | None = None) -> tuple[RowReads, int]:
        """Starts the call that reads examples whose own tokens are ``tails`` (after the prefix,
        if any) and returns without waiting for it: ``(device outputs, n examples)`` for
        `collect`.

        Args:
            tails: ``[n]`` token lists (each non-empty), the examples of one call.
            prefix: the group's prefix cache, or None.
            rows, length: the call's padded shape: ``rows`` examples of ``length`` tokens.
            nll_slots: with the NLL on, ``[n]`` ranges ``[lo, hi)`` of tail positions whose
                next token's NLL is summed (position k predicts tail token k + 1).

        """
        b, n = self.judge.round_rows(rows * self.cplan.n_variants), len(tails) * self.cplan.n_variants
        if prefix is not None and prefix.batch_size > 1 and b != n:
            raise ValueError(f"{prefix.batch_size} prefixes need exactly their rows ({n}), but the mesh rounds "
                             f"them to {b}: make the groups per call a multiple of the data axis")
        tokens, mask, read_br, pick_r, pick_t, nll_use = self.row_arrays(tails, b, length, nll_slots)
        out = calls.read_rows(self.judge, tokens, mask, read_br, pick_r, pick_t, answer_read=self.cplan.n_ext,
                              topk=self.topk, prefix=prefix, nll_use_bt=nll_use, generate_tokens=self.generate_tokens)
        return out, len(tails)

    def row_arrays(self, tails: Sequence[Sequence[int]], b: int, length: int,
                   nll_slots: Sequence[tuple[int, int]] | None = None) -> tuple[np.ndarray, ...]:
        """The host arrays of `read_rows` for examples whose own tokens are ``tails``: one row
        per (example, variant), padded to ``b`` rows by repeating the last.

        Returns:
            ``(tokens [b, T], mask [b, T], read [b, R], pick_read [b, M], pick_token [b, M],
            nll_use [b, T] or None)``, T = ``length``.
        """
        cp = self.cplan
        n_var, r, t = cp.n_variants, cp.n_reads, length
        seqs, reads, picks_r, picks_t, slot_ranges = [], [], [], [], []
        for e, tail in enumerate(tails):
            for v in range(n_var):
                cont = cp.continuation(v)
                seqs.append(list(tail) + cont)
                if nll_slots is not None:
                    slot_ranges.append(nll_slots[e])
                start = len(tail) - 1
                row_reads = [start + j for j in range(len(cont) + 1)]
                reads.append(row_reads + [row_reads[-1]] * (r - len(row_reads)))
                picks_r.append(cp.pick_read[v])
                picks_t.append(cp.pick_token[v])
        tokens, mask = pad_batch(pad_rows(seqs, b), side="left", length=t, pad_id=self.judge.pad_id)
        lengths = np.asarray([len(x) for x in pad_rows(seqs, b)])
        read_br = np.asarray(pad_rows(reads, b), np.int32) + (t - lengths)[:, None]
        nll_use = None
        if nll_slots is not None:
            # Slots whose next token is a counted prompt token of the row (never a candidate's).
            nll_use = left_slots(lengths, t, np.asarray(pad_rows(slot_ranges, b)))
        return (tokens, mask, read_br, np.asarray(pad_rows(picks_r, b), np.int32),
                np.asarray(pad_rows(picks_t, b), np.int32), nll_use)

    def collect(self, started: tuple[RowReads, int]) -> dict[str, np.ndarray]:
        """Waits for a `dispatch`ed call: its per-example arrays (see `run_chunk`), n rows."""
        out, n_tails = started
        n_var = self.cplan.n_variants
        n = n_tails * n_var
        picked = to_host(out.picked_bm)[:n].reshape(n_tails, n_var, -1)
        res = self._per_example(picked, *(to_host(x)[:n][::n_var] for x in (
            out.log_normaliser_b, out.greedy_b, out.topk_logprobs_bk, out.topk_ids_bk)))
        if out.nll_b is not None:
            res["tail_nll"] = to_host(out.nll_b).astype(np.float64)[:n][::n_var]
        if out.generated_bg is not None:
            res["generated_ids"] = to_host(out.generated_bg).astype(np.int32)[:n]
            res["generated_lengths"] = to_host(out.lengths_b).astype(np.int32)[:n]
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

    def _prefix_nll(self, call: Call, tk: Tokenised) -> dict[int, float]:
        """The counted prefix tokens' NLL of each member of the call's groups, and the
        prediction of its first tail token (prompt token p), from the prefix alone."""
        out = {}
        for group in call.groups:
            p = len(group.prefix_ids)
            pre = calls.prefix_nll(self.judge, group.prefix_ids)
            pre_tok, pre_lp = to_host(pre.nll_t).astype(np.float64), to_host(pre.next_logprobs_v).astype(np.float64)
            for i in group.members:
                a, b = self.nll_spans[i]
                # Slot j of the prefix holds the NLL of token j + 1 (tokens 1 .. p - 1).
                total = float(pre_tok[max(a, 1) - 1:max(min(b, p) - 1, 0)].sum())
                if a <= p < b:
                    total -= pre_lp[tk.ids[i][p]]
                out[i] = total
        return out

    def _tail_slots(self, rows: Sequence[tuple[Group, int]]) -> list[tuple[int, int]]:
        """Tail position k predicts prompt token n_prefix + k + 1: keep those inside [a, b)."""
        slots = []
        for group, i in rows:
            n_prefix = len(group.prefix_ids)
            a, b = self.nll_spans[i]
            lo = max(a, n_prefix + 1) - n_prefix - 1
            slots.append((lo, max(lo, b - n_prefix - 1)))
        return slots

    def run_chunk(self, chunk: Chunk, tk: Tokenised, progress: Progress) -> dict[str, np.ndarray]:
        """All arrays of one chunk, rows in ``chunk.members`` order."""
        nll = self.nll_spans is not None
        results: dict[int, dict[str, np.ndarray]] = {}
        prefix_nll: dict[int, float] = {}
        groups = prefix_groups(tk.ids, chunk.pieces, prefix_cache=self.prefix_cache,
                               min_prefix_tokens=self.min_prefix_tokens)
        extra = self.cplan.n_ext + max(len(p) for p in self.cplan.paths)
        pending = None

        def finish(call: Call, rows: list[tuple[Group, int]], started: tuple[RowReads, int]) -> None:
            out = self.collect(started)
            for j, (_, i) in enumerate(rows):
                results.setdefault(i, {k: v[j] for k, v in out.items()})  # a padding copy comes later
            progress.update(len(call.members), sum(len(tk.ids[i]) for i in call.members))

        for call in batches(groups, functools.partial(calls.prefill_prefixes, self.judge), batch_size=self.batch_size,
                            max_batch_tokens=self.max_batch_tokens, extra_tokens=extra,
                            rows_per_example=self.cplan.n_variants, groups_per_call=self.groups_per_call,
                            part_multiple=max(1, self.judge.round_rows(1) // self.groups_per_call)):
            if nll and call.first and call.prefix is not None:
                prefix_nll.update(self._prefix_nll(call, tk))
            if len(call.groups) == 1:
                rows = [(call.group, i) for i in call.members]
                started = self.dispatch(call.tails, call.prefix, call.batch.rows, call.batch.length,
                                        self._tail_slots(rows) if nll else None)
            else:  # every group's part padded to the same rows, group after group
                rows = call.padded_members()
                started = self.dispatch([g.tails[i] for g, i in rows], call.prefix, len(rows), call.batch.length,
                                        self._tail_slots(rows) if nll else None)
            # The next call is on its way before this one's outputs are read back: the host
            # prepares and reduces one batch while the device computes the other.
            if pending is not None:
                finish(*pending)
            pending = (call, rows, started)
        if pending is not None:
            finish(*pending)

        members = chunk.members
        arrays = {k: np.stack([results[int(i)][k] for i in members]) for k in results[int(members[0])]}
        arrays["n_prompt_tokens"] = np.asarray([len(tk.ids[i]) for i in members], np.int32)
        arrays["truncated"] = tk.truncated[members]
        arrays["truncated_tokens"] = np.asarray([tk.prompts[i].truncated_tokens for i in members], np.int32)
        arrays["example_ids"] = np.asarray([tk.prompts[i].example_id for i in members], dtype=str)
        if nll:
            tail = arrays.pop("tail_nll")
            total = tail + np.asarray([prefix_nll.get(int(i), 0.0) for i in members])
            count = np.asarray([self.nll_spans[int(i)][1] - self.nll_spans[int(i)][0] for i in members], np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                arrays["prompt_nll"] = np.where(count > 0, total / np.maximum(count, 1), np.nan).astype(np.float32)
        return arrays
