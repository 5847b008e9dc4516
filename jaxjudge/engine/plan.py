"""Host-side planning of an extraction: tokens, overflow policy, prefix groups, chunks, buckets.

Nothing here touches a device. The engine (`jaxjudge.engine.extract`) turns the plan into
jitted calls.

Length buckets
--------------
Every jitted call has a static shape, so lengths are padded to a few bucket sizes and each
bucket compiles once (per batch size), never once per batch. `bucket_length` rounds up to a
multiple of 32 up to 256 tokens and, above that, to ``steps_per_octave`` steps per doubling
(default 4: 320, 384, 448, 512, 640, 768, ...), so padding wastes at most 32 tokens on short
sequences and at most 25 % on long ones, while an 8k context needs 28 buckets.
`slot_bucket` is the coarser rounding (powers of two, at least 256) used for the key/value
slots of a shared prefix: attending to a few empty slots is nearly free, and it keeps the
number of (prefix, suffix) shape pairs that compile small.

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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from jaxjudge.prompts import (
    ContextOverflowError,
    RenderedPrompt,
    ScoreCandidates,
    ScoreScale,
    as_tokenizer,
    common_prefix_length,
    score_candidates,
    truncate_text,
)

__all__ = [
    "ENGINE_CALL_COST",
    "bucket_length",
    "slot_bucket",
    "CandidatePlan",
    "candidate_plan",
    "resolve_candidates",
    "Tokenised",
    "tokenise",
    "nll_token_span",
    "Chunk",
    "plan_chunks",
    "Batch",
    "plan_batches",
]


def bucket_length(n: int, *, minimum: int = 32, steps_per_octave: int = 4) -> int:
    """Padded length for ``n`` tokens (see the module docstring).

    Args:
        n: number of real tokens (>= 1).
        minimum: the smallest bucket and the step below 256 tokens.
        steps_per_octave: buckets per doubling above ``8 * minimum``.

    Returns:
        The bucket, ``>= n``.
    """
    if n <= minimum:
        return minimum
    if n <= 8 * minimum:
        return -(-n // minimum) * minimum
    octave = 1 << ((n - 1).bit_length() - 1)  # largest power of two below n
    step = max(minimum, octave // steps_per_octave)
    return -(-n // step) * step


def slot_bucket(n: int, minimum: int = 256) -> int:
    """Key/value slots reserved for a shared prefix of ``n`` tokens: a power of two >= minimum."""
    return max(minimum, 1 << (max(n, 1) - 1).bit_length())


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
    tokenizer: Any, prompts: Sequence[RenderedPrompt], candidates: ScoreCandidates | ScoreScale
) -> ScoreCandidates:
    """The candidates to score, checked against how every prompt ends.

    Args:
        tokenizer: the judge's tokenizer.
        prompts: the rendered prompts.
        candidates: a `ScoreCandidates`, or a `ScoreScale` to tokenise after the prompts.

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
        scale, given = candidates.scale, candidates
    else:
        raise TypeError(f"candidates must be ScoreCandidates or ScoreScale, got {type(candidates).__name__}")
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


# ------------------------------------------------------------------------------ tokens


@dataclass
class Tokenised:
    """Token ids of the prompts after the overflow policy.

    Attributes:
        prompts: the prompts, with truncated prefixes where the policy cut them.
        ids: ``[N]`` token-id lists of the full prompts.
        truncated: ``[N]`` bool, whether the source text was cut (by the engine or earlier by
            `jaxjudge.prompts.render_all`).
        group_of: ``[N]`` int, prefix-group index of each prompt.
    """

    prompts: list[RenderedPrompt]
    ids: list[list[int]]
    truncated: np.ndarray
    group_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _encode_all(tok: Any, prompts: Sequence[RenderedPrompt]) -> list[list[int]]:
    out: list[list[int] | None] = [None] * len(prompts)
    for flag in (True, False):
        idx = [i for i, p in enumerate(prompts) if p.add_special_tokens == flag]
        if idx:
            for i, enc in zip(idx, tok.encode_batch([prompts[i].text for i in idx], add_special_tokens=flag)):
                out[i] = list(enc.ids)
    return out  # type: ignore[return-value]


def _group_keys(prompts: Sequence[RenderedPrompt]) -> np.ndarray:
    index: dict[tuple[str, bool], int] = {}
    return np.asarray([index.setdefault((p.prefix, p.add_special_tokens), len(index)) for p in prompts], np.int64)


def tokenise(
    tokenizer: Any,
    prompts: Sequence[RenderedPrompt],
    *,
    limit: int,
    overflow: str,
) -> Tokenised:
    """Tokenises the prompts and applies the context-overflow policy.

    A prompt may use ``limit`` tokens (the context minus what the answer needs). Over it:

    - ``overflow="raise"``: `ContextOverflowError` naming the example and the lengths;
    - ``overflow="truncate"``: the end of the shared prefix text (the source document, which
      every built-in template puts last in the prefix) is cut at a token boundary, by the
      prompts package's `truncate_text`, until the longest prompt of its group fits; the
      prefix's trailing whitespace is kept, the suffix (judged text and question) never cut.
      Prompts sharing the prefix get the same cut, so they keep sharing it. A prompt with no
      prefix text raises instead: render it with ``render_all(..., overflow="truncate")``,
      which knows the template's source field.

    Args:
        tokenizer: the judge's tokenizer.
        prompts: rendered prompts.
        limit: most prompt tokens allowed.
        overflow: ``"raise"`` or ``"truncate"``.

    Returns:
        `Tokenised`.
    """
    if overflow not in ("raise", "truncate"):
        raise ValueError(f"overflow must be 'truncate' or 'raise', got {overflow!r}")
    tok = as_tokenizer(tokenizer)
    prompts = list(prompts)
    ids = _encode_all(tok, prompts)
    truncated = np.asarray([p.truncated_tokens > 0 for p in prompts], bool)
    for i, row in enumerate(ids):
        if not row:
            raise ValueError(f"example {prompts[i].example_id!r}: the prompt encodes to no tokens")
    over = [i for i, row in enumerate(ids) if len(row) > limit]
    if over and overflow == "raise":
        i = over[0]
        raise ContextOverflowError(
            f"example {prompts[i].example_id!r}: prompt is {len(ids[i])} tokens, more than the {limit} the "
            f"context allows after reserving room for the answer ({len(over)} prompt(s) too long); pass "
            "overflow='truncate' to cut the source text"
        )
    if over:
        groups = _group_keys(prompts)
        for g in sorted({int(groups[i]) for i in over}):
            members = [i for i in range(len(prompts)) if groups[i] == g]
            _truncate_group(tok, prompts, ids, members, limit)
            truncated[members] = True
    return Tokenised(prompts, ids, truncated, _group_keys(prompts))


def _truncate_group(tok: Any, prompts: list[RenderedPrompt], ids: list[list[int]], members: list[int],
                    limit: int) -> None:
    first = prompts[members[0]]
    body = first.prefix.rstrip()
    trail = first.prefix[len(body):]
    worst = max(members, key=lambda i: len(ids[i]))
    if not body:
        raise ContextOverflowError(
            f"example {first.example_id!r}: prompt is {len(ids[worst])} tokens, more than the {limit} allowed, and "
            "it has no shared prefix text to truncate; render it with jaxjudge.prompts.render_all(..., "
            "overflow='truncate'), which cuts the template's source field"
        )
    n_body = len(tok.encode(body, add_special_tokens=False).ids)
    keep = n_body - (len(ids[worst]) - limit)
    while True:
        if keep <= 0:
            raise ContextOverflowError(
                f"example {prompts[worst].example_id!r}: prompt is {len(ids[worst])} tokens and does not fit in "
                f"{limit} even with its shared prefix (instructions and source text) removed"
            )
        cut = truncate_text(tok, body, keep, "right") + trail
        trial = [replace(prompts[i], prefix=cut) for i in members]
        new_ids = _encode_all(tok, trial)
        excess = max(len(r) for r in new_ids) - limit
        if excess <= 0:
            break
        keep -= excess
    removed = n_body - len(tok.encode(cut.rstrip(), add_special_tokens=False).ids)
    for i, p, r in zip(members, trial, new_ids, strict=True):
        prompts[i] = replace(p, truncated_tokens=p.truncated_tokens + max(removed, 1))
        ids[i] = r


def nll_token_span(tokenizer: Any, prompt: RenderedPrompt, ids: Sequence[int]) -> tuple[int, int]:
    """The tokens ``[a, b)`` of a prompt whose negative log-likelihood a prompt NLL counts.

    Without ``prompt.nll_span`` that is every token after the first (``(1, len(ids))``: the
    first token has nothing to be predicted from). With it, the tokens of ``prompt.text``
    whose character offsets overlap the span (offsets into the suffix, shifted by the
    prefix's length); a span that would include the first token starts at the second.

    Args:
        tokenizer: the judge's tokenizer.
        prompt: the prompt, after any truncation of its prefix (the suffix is never cut).
        ids: its token ids as the engine runs them (`Tokenised.ids`).

    Returns:
        ``(a, b)`` with ``1 <= a <= b <= len(ids)``; ``a == b`` when nothing is counted.

    Raises:
        ValueError: the ids are not the tokens of the prompt's text.
    """
    n = len(ids)
    if prompt.nll_span is None:
        return min(1, n), n
    enc = as_tokenizer(tokenizer).encode(prompt.text, add_special_tokens=prompt.add_special_tokens)
    if list(enc.ids) != list(ids):
        raise ValueError(f"example {prompt.example_id!r}: token ids do not match the prompt's text")
    start, end = (len(prompt.prefix) + c for c in prompt.nll_span)
    inside = [k for k, (cs, ce) in enumerate(enc.offsets) if ce > cs and ce > start and cs < end]
    if not inside:
        return n, n
    return max(inside[0], 1), max(inside[-1] + 1, 1)


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
