"""Host-side planning of an extraction: candidates, prefix groups, chunks, batches.

Nothing here touches a device. The runner (`jaxjudge.engine.runner`) turns the plan into
calls of the judge's primitives. Lengths are padded to the one bucket policy of
`jaxjudge.engine.primitives.bucket_length` (a shared prefix's key/value slots to
`slot_bucket`), so each (rows, bucket) shape compiles once.

Batches
-------
The rows of a call are padded to the longest row's bucket, and a partial call to a power of
two of rows. `plan_batches` cuts a list of rows sorted by decreasing length into calls so that
the padded work (rows x bucket, plus a fixed cost per call) is smallest: the 16 summaries of
an article, 60 to 160 tokens long, run as one batch of 16 or as 8 + 8 with two buckets,
whichever pads less.

Prefix groups and chunks
------------------------
Prompts with the same ``prefix`` text (SummEval: instructions + article, shared by the 16
summaries of the article) form a group. The work order puts the groups one after the other
(in order of first appearance, members in input order) and cuts it into chunks of at most
``chunk_size`` prompts without splitting a group, unless the group alone is larger than a
chunk. Chunks are the unit of the store: written when finished, skipped on resume, and
divided among the processes of a multi-host run. The plan depends only on the prompts and
``chunk_size``, never on batch size, devices or the prefix-cache switch, so a run resumed with
other settings fills the same chunks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from jaxjudge.engine.primitives import bucket_length, slot_bucket
from jaxjudge.prompts import ScoreCandidates, ScoreScale, common_prefix_length, score_candidates

__all__ = [
    "ENGINE_CALL_COST",
    "bucket_length",
    "slot_bucket",
    "CandidatePlan",
    "candidate_plan",
    "resolve_candidates",
    "shared_prefix_length",
    "Chunk",
    "plan_chunks",
    "Batch",
    "plan_batches",
]


# ------------------------------------------------------------------------------ candidates


@dataclass(frozen=True)
class CandidatePlan:
    """How the K candidates are read from a few teacher-forced continuations of a prompt.

    The candidates' token sequences form a trie; the next-token distribution is needed at each
    of its inner nodes (the answer position, and after each proper prefix of a multi-token
    candidate). A *variant* is one continuation ``prompt + extension + path`` whose reads cover
    the inner nodes along ``path``; one variant per deepest inner node covers them all (one
    variant with an empty path when every candidate is a single token).

    Reads of a row: read ``j`` is the distribution after ``prompt + (extension + path)[:j]``;
    read ``n_ext`` is the answer position.

    Attributes:
        candidates: the `ScoreCandidates`.
        extension: token ids appended to every prompt (shared leading candidate tokens).
        paths: ``[n_variants]`` continuation paths after the extension.
        n_reads: R, reads per row (``n_ext + longest path + 1``).
        pick_read: ``[n_variants, M]`` int32, the read of each picked log-probability.
        pick_token: ``[n_variants, M]`` int32, the token it is the log-probability of.
        cand_terms: ``[K]`` tuples of ``(variant, m)``: candidate k's log-probability is the
            sum of these picks.
        ext_terms: ``(variant, m)`` picks summing to log p(extension | prompt).
        first_tokens: ``[K]`` int32, each candidate's first token (validity of the greedy token).
    """

    candidates: ScoreCandidates
    extension: tuple[int, ...]
    paths: tuple[tuple[int, ...], ...]
    n_reads: int
    pick_read: np.ndarray
    pick_token: np.ndarray
    cand_terms: tuple[tuple[tuple[int, int], ...], ...]
    ext_terms: tuple[tuple[int, int], ...]
    first_tokens: np.ndarray

    @property
    def n_ext(self) -> int:
        return len(self.extension)

    @property
    def n_variants(self) -> int:
        return len(self.paths)

    def continuation(self, variant: int) -> list[int]:
        """Tokens appended after the prompt for one variant."""
        return list(self.extension) + list(self.paths[variant])


def candidate_plan(candidates: ScoreCandidates) -> CandidatePlan:
    """Builds the read/pick tables of `CandidatePlan` for a set of candidates."""
    seqs = [tuple(int(t) for t in s) for s in candidates.token_ids]
    ext = tuple(int(t) for t in candidates.prompt_extension)
    inner = {s[:d] for s in seqs for d in range(1, len(s))}
    deepest = sorted(n for n in inner if not any(len(m) > len(n) and m[: len(n)] == n for m in inner))
    paths = tuple(deepest) or ((),)

    picks: list[dict[tuple[int, int], int]] = [{} for _ in paths]

    def pick(v: int, read: int, token: int) -> tuple[int, int]:
        table = picks[v]
        if (read, token) not in table:
            table[(read, token)] = len(table)
        return v, table[(read, token)]

    ext_terms = tuple(pick(0, j, t) for j, t in enumerate(ext))
    cand_terms = []
    for s in seqs:
        terms = []
        for d, token in enumerate(s):
            # The first variant whose path passes through the node s[:d] reads it.
            v = next(i for i, p in enumerate(paths) if p[:d] == s[:d] and len(p) >= d)
            terms.append(pick(v, len(ext) + d, token))
        cand_terms.append(tuple(terms))

    m = max(len(t) for t in picks)
    pick_read = np.full((len(paths), m), len(ext), np.int32)
    pick_token = np.zeros((len(paths), m), np.int32)
    for v, table in enumerate(picks):
        for (read, token), i in table.items():
            pick_read[v, i], pick_token[v, i] = read, token
    return CandidatePlan(
        candidates=candidates,
        extension=ext,
        paths=paths,
        n_reads=len(ext) + max(len(p) for p in paths) + 1,
        pick_read=pick_read,
        pick_token=pick_token,
        cand_terms=tuple(cand_terms),
        ext_terms=ext_terms,
        first_tokens=np.asarray([s[0] for s in seqs], np.int32),
    )


def _ending(text: str) -> str:
    """The end of a prompt that decides how a candidate tokenises after it (its last line)."""
    tail = text[-200:]
    cut = tail.rfind("\n")
    return tail if cut < 0 else tail[cut + 1:]


def resolve_candidates(
    tokenizer: Any, prompts: Sequence[Any], candidates: ScoreCandidates | ScoreScale | Sequence[str]
) -> ScoreCandidates:
    """The candidates to score, checked against how every prompt ends.

    Args:
        tokenizer: the judge's tokenizer.
        prompts: the rendered prompts.
        candidates: a `ScoreCandidates`, or a `ScoreScale` or a label set (``("A", "B")``) to
            tokenise after the prompts.

    Returns:
        The candidates (the same for every prompt).

    Raises:
        CandidateTokenizationError: (from the prompts package) a candidate has no token
            sequence of its own after some prompt; the message names the value.
        ValueError: the candidates tokenise differently after two prompts (names both).
    """
    if isinstance(candidates, ScoreScale):
        scale, given = candidates, None
    elif isinstance(candidates, ScoreCandidates):
        scale, given = candidates.scale if candidates.scale is not None else candidates.labels, candidates
    elif isinstance(candidates, Sequence) and not isinstance(candidates, str) and all(
            isinstance(x, str) for x in candidates):
        scale, given = tuple(candidates), None
    else:
        raise TypeError("candidates must be ScoreCandidates, a ScoreScale or a sequence of label strings, got "
                        f"{type(candidates).__name__}")
    seen: dict[tuple[str, str], tuple[str, ScoreCandidates]] = {}
    for p in prompts:
        key = (_ending(p.text), p.answer_separator)
        if key in seen:
            continue
        try:
            found = score_candidates(tokenizer, scale, context=key[0], separator=key[1])
        except ValueError as e:
            # Keep the prompts package's error class and message; add the example.
            raise type(e)(f"example {p.example_id!r}: {e}") from e
        seen[key] = (p.example_id, found)
        if given is None:
            given = found
        elif (found.prompt_extension, found.token_ids) != (given.prompt_extension, given.token_ids):
            first = next(iter(seen.values()))[0]
            raise ValueError(
                f"score candidates tokenise differently after example {p.example_id!r} "
                f"(extension {found.prompt_extension}, tokens {found.token_ids}) than expected "
                f"(extension {given.prompt_extension}, tokens {given.token_ids}; first prompt {first!r}); "
                "score prompts whose endings tokenise alike in one call"
            )
    return given


# ------------------------------------------------------------------------------ chunks


@dataclass(frozen=True)
class Chunk:
    """One unit of work and of storage.

    Attributes:
        index: chunk number.
        pieces: ``[n_pieces]`` arrays of input indices; each piece is (part of) one prefix
            group, in work order.
    """

    index: int
    pieces: tuple[np.ndarray, ...]

    @property
    def members(self) -> np.ndarray:
        """Input indices of the chunk's prompts, in the order its arrays are stored [n]."""
        return np.concatenate(self.pieces)

    def __len__(self) -> int:
        return sum(len(p) for p in self.pieces)


def plan_chunks(group_of: np.ndarray, chunk_size: int) -> list[Chunk]:
    """Cuts the work order into chunks of whole prefix groups (see the module docstring).

    Args:
        group_of: ``[N]`` group index of each prompt (groups numbered by first appearance).
        chunk_size: most prompts per chunk.

    Returns:
        The chunks, numbered from 0.
    """
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    n_groups = int(group_of.max()) + 1 if len(group_of) else 0
    order = np.argsort(group_of, kind="stable")
    bounds = np.searchsorted(group_of[order], np.arange(n_groups + 1))
    chunks: list[list[np.ndarray]] = []
    current: list[np.ndarray] = []
    filled = 0
    for g in range(n_groups):
        members = order[bounds[g]:bounds[g + 1]]
        if filled and filled + len(members) > chunk_size:
            chunks.append(current)
            current, filled = [], 0
        for start in range(0, len(members), chunk_size):
            piece = members[start:start + chunk_size]
            if filled and filled + len(piece) > chunk_size:
                chunks.append(current)
                current, filled = [], 0
            current.append(piece)
            filled += len(piece)
    if current:
        chunks.append(current)
    return [Chunk(i, tuple(pieces)) for i, pieces in enumerate(chunks)]


def shared_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    """Tokens every sequence starts with, leaving each at least one token of its own."""
    return min(common_prefix_length(seqs), min(len(s) for s in seqs) - 1)


@dataclass(frozen=True)
class Batch:
    """One call: examples ``[start, stop)`` of a length-sorted list.

    Attributes:
        start, stop: the examples (positions in the sorted list).
        rows: examples the call is padded to (>= stop - start).
        length: T, the padded length of every row.
    """

    start: int
    stop: int
    rows: int
    length: int


def _rows_cap(length: int, max_rows: int, max_tokens: int, rows_per_example: int) -> int:
    by_tokens = max(1, max_tokens // (length * rows_per_example))
    if by_tokens < max_rows:
        by_tokens = 1 << (by_tokens.bit_length() - 1)  # a power of two: few distinct shapes
    return min(max_rows, by_tokens)


# The fixed cost of one call that the engine's planners use, in padded tokens: dispatch, and
# above all the compilation of every new (rows, length) shape (several seconds for a small
# judge on a CPU, the work of about a thousand tokens). A smaller value splits groups into
# more calls that pad less, and compiles more shapes.
ENGINE_CALL_COST = 1024


def plan_batches(
    lengths: Sequence[int],
    *,
    max_rows: int,
    max_tokens: int,
    rows_per_example: int = 1,
    call_cost: int = 64,
) -> list[Batch]:
    """Cuts examples sorted by decreasing length into calls with the least padded work.

    A call of examples ``[i, j)`` is padded to ``bucket_length(lengths[i])`` tokens and to
    ``min(cap, next power of two >= j - i)`` examples, where the cap is ``max_rows``, lowered
    (to a power of two) so that rows x length stays within ``max_tokens``. Its cost is
    ``padded examples x rows_per_example x length + call_cost``; dynamic programming over the
    cut points minimises the total.

    Args:
        lengths: ``[n]`` row lengths (tokens each example feeds), non-increasing.
        max_rows: most examples per call.
        max_tokens: most rows x padded length per call.
        rows_per_example: rows each example takes (teacher-forcing variants).
        call_cost: fixed cost of a call, in padded tokens.

    Returns:
        The calls, in order, covering every example once.
    """
    n = len(lengths)
    if any(lengths[i] < lengths[i + 1] for i in range(n - 1)):
        raise ValueError("plan_batches needs lengths sorted in decreasing order")
    best = [0.0] * (n + 1)
    cut: list[Batch | None] = [None] * (n + 1)
    for i in range(n - 1, -1, -1):
        t = bucket_length(lengths[i])
        cap = _rows_cap(t, max_rows, max_tokens, rows_per_example)
        best[i] = math.inf
        for j in range(i + 1, min(n, i + cap) + 1):
            rows = min(cap, 1 << (j - i - 1).bit_length())
            cost = rows * rows_per_example * t + call_cost + best[j]
            if cost < best[i]:
                best[i], cut[i] = cost, Batch(i, j, rows, t)
    out, i = [], 0
    while i < n:
        out.append(cut[i])
        i = cut[i].stop
    return out
