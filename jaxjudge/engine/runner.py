"""The one engine loop: prefix groups, one prefill per shared prefix, then length-sorted batches.

Extraction (`jaxjudge.engine.extract`), generation (`jaxjudge.engine.generate_scores`,
`jaxjudge.engine.contrastive_generate`) and prompt NLL (`jaxjudge.engine.sequence_nll`) all
walk their prompts the same way:

1. `prefix_groups` cuts the prompts into groups: each prefix group whose shared token prefix
   is worth a prefill (prefix cache on, at least ``min_prefix_tokens``) with that prefix and
   its members' tails after it, then the remaining prompts, whole, without a prefix;
2. `batches` prefills each group's prefix once (by the caller's ``prefill``) and cuts the
   group's tails, longest first, into the calls `jaxjudge.engine.plan.plan_batches` chooses,
   or reads several small groups in one call, each against its own prefix;
3. the caller runs each `Call` and reports it to one `Progress` bar.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from jaxjudge.engine.plan import ENGINE_CALL_COST, Batch, plan_batches, shared_prefix_length

__all__ = ["Call", "Group", "Progress", "batches", "left_slots", "pad_rows", "plan_group", "prefix_groups"]


@dataclass(frozen=True)
class Group:
    """Prompts that share one prefill (or none).

    Attributes:
        members: input indices of the group's prompts.
        tails: {input index: the prompt's token ids after the shared prefix}.
        prefix_ids: the shared prefix's token ids (empty: no prefix, tails are whole prompts).
    """

    members: list[int]
    tails: dict[int, list[int]]
    prefix_ids: list[int]


def prefix_groups(ids: Sequence[Sequence[int]], pieces: Iterable[Sequence[int]], *, prefix_cache: bool,
                  min_prefix_tokens: int) -> Iterator[Group]:
    """The groups of the pieces (prompts of one prefix text each), ungrouped prompts last.

    Args:
        ids: ``[N]`` token ids of every prompt.
        pieces: input indices of the prompts of one prefix group each, in work order.
        prefix_cache: prefill shared prefixes (False: every prompt runs whole).
        min_prefix_tokens: shorter shared prefixes are not worth a separate prefill.
    """
    flat: list[int] = []
    for piece in pieces:
        seqs = [ids[i] for i in piece]
        p = shared_prefix_length(seqs) if len(piece) > 1 else 0
        if not prefix_cache or p < min_prefix_tokens:
            flat.extend(int(i) for i in piece)
            continue
        yield Group([int(i) for i in piece], {int(i): list(ids[i][p:]) for i in piece}, list(seqs[0][:p]))
    if flat:
        yield Group(flat, {i: list(ids[i]) for i in flat}, [])


@dataclass(frozen=True)
class Call:
    """One call: a batch of one group's tails, or every tail of several groups at once.

    A call of several groups reads them against a prefix cache of one prefix per group: its
    rows are the groups' padded tails, group after group (`padded_members`), so row b continues
    prefix b // ``batch.rows``, and on a mesh the prefixes and their rows split over ``data``
    together.

    Attributes:
        groups: the call's groups (one, or several whose prefixes were prefilled together).
        prefix: what ``prefill`` returned for the groups' prefixes (None without a prefix).
        parts: each group's members in the call, longest tail first.
        batch: the padded shape of one group's part: ``batch.rows`` examples of
            ``batch.length`` tokens (its ``start``/``stop`` count the first group's members).
        first: whether this is the first call of its group(s).
    """

    groups: tuple[Group, ...]
    prefix: Any
    parts: tuple[list[int], ...]
    batch: Batch
    first: bool

    @property
    def group(self) -> Group:
        """The call's group (a call of one group only)."""
        if len(self.groups) != 1:
            raise ValueError(f"this call reads {len(self.groups)} groups; use .groups")
        return self.groups[0]

    @property
    def members(self) -> list[int]:
        """Input indices of the call's prompts, group after group."""
        return [i for part in self.parts for i in part]

    @property
    def tails(self) -> list[list[int]]:
        """The members' tails, in call order."""
        return [g.tails[i] for g, part in zip(self.groups, self.parts) for i in part]

    def padded_members(self) -> list[tuple[Group, int]]:
        """(group, input index) of every row of a call of several groups: each group's part
        padded to ``batch.rows`` examples by repeating its last member (whose copies are
        padding, read and dropped)."""
        return [(g, i) for g, part in zip(self.groups, self.parts) for i in pad_rows(part, self.batch.rows)]


def plan_group(group: Group, *, batch_size: int, max_batch_tokens: int, extra_tokens: int,
               rows_per_example: int) -> tuple[list[int], list[Batch]]:
    """A group's members, longest tail first, and the calls `plan_batches` cuts them into."""
    order = sorted(group.members, key=lambda i: -len(group.tails[i]))
    plans = plan_batches([len(group.tails[i]) + extra_tokens for i in order], max_rows=batch_size,
                         max_tokens=max_batch_tokens, rows_per_example=rows_per_example, call_cost=ENGINE_CALL_COST)
    return order, plans


def batches(groups: Iterable[Group], prefill: Callable[[list[list[int]]], Any], *, batch_size: int,
            max_batch_tokens: int, extra_tokens: int = 0, rows_per_example: int = 1,
            groups_per_call: int = 1, part_multiple: int = 1) -> Iterator[Call]:
    """The calls of every group: its prefix prefilled once, its tails longest first.

    With ``groups_per_call`` P > 1, groups with a prefix whose tails fit one call are read P
    at a time in one call: their P prefixes prefilled together into one cache (one prefill
    call), each group's tails padded to the largest part among them. Each group keeps its own
    call's budget (``batch_size`` examples, ``max_batch_tokens``), so a call of P groups is P
    one-group calls side by side: on a mesh whose ``data`` axis is P, one per data shard, and
    no shard computes another's prefix. The groups left over (fewer than P at the end, or too
    large for one call) run one at a time.

    Args:
        groups: from `prefix_groups`.
        prefill: makes the prefix cache of a list of prefixes (e.g.
            `jaxjudge.engine.calls.prefill_prefixes` of a judge); called once per group (or
            once per P groups read together) with a prefix, the result dropped after the last
            call that reads it.
        batch_size: most examples per call (per group).
        max_batch_tokens: most rows x padded length per call (per group).
        extra_tokens: tokens each row feeds after its tail (the candidates' continuation).
        rows_per_example: rows each example takes (teacher-forcing variants).
        groups_per_call: P, the groups read together.
        part_multiple: each group's part of a call of P groups padded to a multiple of this many
            examples (data / P when P groups share a ``data`` axis larger than P: each shard
            then reads rows of one group only).
    """
    kw = dict(batch_size=batch_size, max_batch_tokens=max_batch_tokens, extra_tokens=extra_tokens,
              rows_per_example=rows_per_example)
    pending: list[tuple[Group, list[int], Batch]] = []

    def alone(group: Group, order: list[int], plans: list[Batch]) -> Iterator[Call]:
        prefix = prefill([group.prefix_ids]) if group.prefix_ids else None
        for k, batch in enumerate(plans):
            yield Call((group,), prefix, (order[batch.start:batch.stop],), batch, k == 0)
        del prefix

    for group in groups:
        order, plans = plan_group(group, **kw)
        if groups_per_call == 1 or not group.prefix_ids or len(plans) != 1:
            yield from alone(group, order, plans)
            continue
        pending.append((group, order, plans[0]))
        if len(pending) == groups_per_call:
            rows = max(b.rows for _, _, b in pending)
            shape = Batch(0, len(pending[0][1]), -(-rows // part_multiple) * part_multiple,
                          max(b.length for _, _, b in pending))
            prefix = prefill([g.prefix_ids for g, _, _ in pending])
            yield Call(tuple(g for g, _, _ in pending), prefix, tuple(o for _, o, _ in pending), shape, True)
            del prefix
            pending = []
    for group, order, batch in pending:
        yield from alone(group, order, [batch])


def pad_rows(rows: list[list[int]], n_rows: int) -> list[list[int]]:
    """``rows`` repeated at the end up to ``n_rows`` (padding rows whose outputs are dropped)."""
    return rows + [rows[-1]] * (n_rows - len(rows))


def left_slots(lengths: np.ndarray, length: int, spans: np.ndarray) -> np.ndarray:
    """``[B, T]`` bool: the slots ``[lo, hi)`` of each left-padded row (``spans`` ``[B, 2]``
    counted from the row's first real token)."""
    off = length - np.asarray(lengths)
    lo, hi = np.asarray(spans, np.int64).reshape(-1, 2).T
    slots = np.arange(length)[None, :]
    return (slots >= (off + lo)[:, None]) & (slots < (off + hi)[:, None])


class Progress:
    """The engine's one progress display: a ``tqdm`` bar (or nothing) with a tokens/s counter.

    Tokens are the prompt tokens of the examples finished, counted in full even when a shared
    prefix was computed once: the rate is the throughput a per-example forward pass would need
    to match.

    Args:
        total: examples to process.
        enabled: show a bar.
        desc: the bar's label.
    """

    def __init__(self, total: int, *, enabled: bool = True, desc: str = "extract"):
        self.start = time.perf_counter()
        self.examples = 0
        self.tokens = 0
        self.bar: Any = None
        if enabled and total > 0:
            self.bar = tqdm(total=total, desc=desc, unit="ex", dynamic_ncols=True, smoothing=0.1)

    def update(self, examples: int, tokens: int) -> None:
        self.examples += examples
        self.tokens += tokens
        if self.bar is not None:
            elapsed = max(time.perf_counter() - self.start, 1e-9)
            self.bar.set_postfix_str(f"{self.tokens / elapsed:,.0f} tok/s", refresh=False)
            self.bar.update(examples)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
