"""Host-side tokens of an extraction: checked prompts, the overflow policy, NLL spans.

Nothing here touches a device.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from jaxjudge.prompts import ContextOverflowError, RenderedPrompt, as_tokenizer, truncate_text
from jaxjudge.prompts.render import token_bound

__all__ = ["TOKENISED", "RowsOnDemand", "TokeniseCount", "Tokenised", "check_prompts", "group_keys", "nll_token_span",
           "positive_int", "tokenise"]


class TokeniseCount:
    """The prompts `tokenise` has tokenised in this process: what a process fed.

    Attributes:
        rows: prompts tokenised so far (a prompt tokenised twice counts twice).
        log: None (the default: nothing kept), or a list to which each `tokenise` call appends
            the example ids it tokenised, in order, an empty tuple included (a test's record of
            which rows each process of an SPMD job fed; every process makes the same calls).
    """

    def __init__(self) -> None:
        self.rows = 0
        self.log: list[tuple[str, ...]] | None = None

    def record(self, prompts: Sequence[RenderedPrompt]) -> None:
        self.rows += len(prompts)
        if self.log is not None:
            self.log.append(tuple(p.example_id for p in prompts))


TOKENISED = TokeniseCount()
"""This process's count of the prompts the engine tokenised (`TokeniseCount`)."""


def check_prompts(prompts: Any) -> list[RenderedPrompt]:
    """The prompts as a list, checked: non-empty, `RenderedPrompt`s, unique example ids."""
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


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int, or ValueError naming ``name`` unless it is a positive int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


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


def group_keys(prompts: Sequence[RenderedPrompt]) -> np.ndarray:
    """``[N]`` prefix-group index of each prompt (its prefix text and special-token flag), numbered
    by first appearance: from the texts alone, no tokens."""
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
    TOKENISED.record(prompts)
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
        groups = group_keys(prompts)
        for g in sorted({int(groups[i]) for i in over}):
            members = [i for i in range(len(prompts)) if groups[i] == g]
            _truncate_group(tok, prompts, ids, members, limit)
            truncated[members] = True
    return Tokenised(prompts, ids, truncated, group_keys(prompts))


class RowsOnDemand:
    """A `Tokenised` of every prompt whose rows are tokenised when asked for: where chunks are
    claimed (several processes, each with its own work), a process tokenises the chunks it
    computes and nothing else. A row goes alone where no prompt of its prefix group can exceed
    the limit (`token_bound`, no tokens needed), else with its whole group, so that a group the
    overflow policy cuts gets the one cut `tokenise` over every prompt gives it.

    Attributes:
        tk: the prompts (the cut ones once tokenised), with ``ids[i]`` None until row ``i`` is.
    """

    def __init__(self, tokenizer: Any, prompts: Sequence[RenderedPrompt], *, limit: int, overflow: str):
        self.tokenizer, self.limit, self.overflow = tokenizer, limit, overflow
        self.given = list(prompts)
        group_of = group_keys(self.given)
        self.members: dict[int, list[int]] = {}
        for i, g in enumerate(group_of.tolist()):
            self.members.setdefault(g, []).append(i)
        self.tk = Tokenised(list(self.given), [None] * len(self.given),  # type: ignore[list-item]
                            np.asarray([p.truncated_tokens > 0 for p in self.given], bool), group_of)
        self._may_cut: dict[int, bool] = {}

    def missing(self, rows: Sequence[int] | np.ndarray) -> list[int]:
        """The rows of ``rows`` not tokenised yet."""
        return [int(i) for i in rows if self.tk.ids[int(i)] is None]

    def may_cut(self, group: int) -> bool:
        """Whether a prompt of prefix group ``group`` may exceed the limit (by `token_bound`)."""
        if group not in self._may_cut:
            members = [self.given[i] for i in self.members[group]]
            bound = token_bound(self.tokenizer, [p.text for p in members],
                                add_special_tokens=members[0].add_special_tokens)
            self._may_cut[group] = max(bound) > self.limit
        return self._may_cut[group]

    def fill(self, rows: Sequence[int] | np.ndarray) -> None:
        """Tokenises the rows of ``rows`` not tokenised yet, with the whole prefix group of any
        that may be cut (raising as `tokenise` does)."""
        alone = self.missing(rows)
        if not alone:
            return
        whole = {i for g in {int(self.tk.group_of[i]) for i in alone} if self.may_cut(g) for i in self.members[g]}
        todo = sorted(set(alone) | whole)
        got = tokenise(self.tokenizer, [self.given[i] for i in todo], limit=self.limit, overflow=self.overflow)
        for j, i in enumerate(todo):
            self.tk.prompts[i], self.tk.ids[i], self.tk.truncated[i] = got.prompts[j], got.ids[j], got.truncated[j]


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
