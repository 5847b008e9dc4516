"""The one engine loop: prefix groups, one prefill per shared prefix, then length-sorted batches.

Extraction (`jaxjudge.engine.extract`), generation (`jaxjudge.engine.generate_scores`,
`jaxjudge.engine.contrastive_generate`) and prompt NLL (`jaxjudge.engine.sequence_nll`) all
walk their prompts the same way:

1. `prefix_groups` cuts the prompts into groups: each prefix group whose shared token prefix
   is worth a prefill (prefix cache on, at least ``min_prefix_tokens``) with that prefix and
   its members' tails after it, then the remaining prompts, whole, without a prefix;
2. `batches` prefills each group's prefix once (by the caller's ``prefill``) and cuts the
   group's tails, longest first, into the calls `jaxjudge.engine.plan.plan_batches` chooses;
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

__all__ = ["Call", "Group", "Progress", "batches", "left_slots", "pad_rows", "prefix_groups"]


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
    """One batch of one group.

    Attributes:
        group: the group.
        prefix: what ``prefill`` returned for the group's prefix (None without a prefix).
        members: input indices of the call's prompts, longest tail first.
        batch: the padded shape (`jaxjudge.engine.plan.Batch`).
        first: whether this is the group's first call.
    """

    group: Group
    prefix: Any
    members: list[int]
    batch: Batch
    first: bool

    @property
    def tails(self) -> list[list[int]]:
        """The members' tails, in call order."""
        return [self.group.tails[i] for i in self.members]


def batches(groups: Iterable[Group], prefill: Callable[[list[int]], Any], *, batch_size: int,
            max_batch_tokens: int, extra_tokens: int = 0, rows_per_example: int = 1) -> Iterator[Call]:
    """The calls of every group: its prefix prefilled once, its tails longest first.

    Args:
        groups: from `prefix_groups`.
        prefill: makes a group's prefix (e.g. `jaxjudge.engine.calls.prefill_prefix` of a judge); called once per group
            with a prefix, and the result dropped after the group's last call.
        batch_size: most examples per call.
        max_batch_tokens: most rows x padded length per call.
        extra_tokens: tokens each row feeds after its tail (the candidates' continuation).
        rows_per_example: rows each example takes (teacher-forcing variants).
    """
    for group in groups:
        prefix = prefill(group.prefix_ids) if group.prefix_ids else None
        order = sorted(group.members, key=lambda i: -len(group.tails[i]))
        plans = plan_batches([len(group.tails[i]) + extra_tokens for i in order], max_rows=batch_size,
                             max_tokens=max_batch_tokens, rows_per_example=rows_per_example,
                             call_cost=ENGINE_CALL_COST)
        for k, batch in enumerate(plans):
            yield Call(group, prefix, order[batch.start:batch.stop], batch, k == 0)
        del prefix


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
