"""Score candidates as token sequences, and token-exact prefix/suffix splits.

How a candidate is appended
---------------------------
The judge's answer for score ``v`` is the text ``answer_separator + label(v)`` written directly
after the prompt (``"...Score (1-5):" + " " + "3"``). Its tokens are found by encoding
``context + separator + label`` and removing the tokens of ``context`` alone, where
``context`` is the end of the prompt. That is only meaningful when the prompt's tokens are an
exact prefix of the tokens of prompt + answer (a clean token boundary); if the tokenizer merges
across the boundary (a GPT-2-style ``"Ġ3"`` after a prompt that ends in a space), the answer
has no token sequence of its own and `CandidateTokenizationError` names the value.

Tokens that every candidate starts with (SmolLM2 writes ``" 3"`` as ``"Ġ"``, ``"3"``) are
moved to ``prompt_extension``: the engine appends them to every prompt, and the candidates then
differ from their first token on. When every remaining candidate is one token the fast path
(`ScoreCandidates.single_token`) reads all K log-probabilities from one next-token
distribution; otherwise candidates are teacher-forced (``"10"`` is ``"1"``, ``"0"`` for
SmolLM2), and a label whose tokens start another's (``"1"`` and ``"10"``) is reported by
`ScoreCandidates.prefix_free`.

Tokenizers are `tokenizers.Tokenizer` objects; a `transformers` tokenizer is accepted too
(its ``backend_tokenizer`` is used).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tokenizers

from jaxjudge.prompts.scale import ScoreScale
from jaxjudge.prompts.template import RenderedPrompt

__all__ = [
    "CandidateTokenizationError",
    "ScoreCandidates",
    "as_tokenizer",
    "encode",
    "score_candidates",
    "split_token_ids",
    "common_prefix_length",
    "DEFAULT_CONTEXT",
]

DEFAULT_CONTEXT = "Score:"


class CandidateTokenizationError(ValueError):
    """A score candidate whose tokens do not start at a clean token boundary after the prompt."""


def as_tokenizer(tokenizer: Any):
    """Return the `tokenizers.Tokenizer` behind ``tokenizer`` (itself, or ``.backend_tokenizer``)."""
    if isinstance(tokenizer, tokenizers.Tokenizer):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(backend, tokenizers.Tokenizer):
        return backend
    raise TypeError(f"expected a tokenizers.Tokenizer (or a fast transformers tokenizer), got {type(tokenizer).__name__}")


def encode(tokenizer: Any, text: str, *, add_special_tokens: bool = False) -> list[int]:
    """Token ids of ``text``."""
    return list(as_tokenizer(tokenizer).encode(text, add_special_tokens=add_special_tokens).ids)


def common_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of token sequences."""
    if not seqs:
        return 0
    n = min(len(s) for s in seqs)
    first = seqs[0]
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in seqs[1:]):
            return i
    return n


@dataclass(frozen=True)
class ScoreCandidates:
    """The K candidates of a score scale (or of any label set), as token ids.

    The engine appends ``prompt_extension`` to every prompt; the answer position (where the
    fast path reads the K first-token log-probabilities, and where the greedy token is checked
    for validity) is the position right after it.

    Attributes:
      scale: the score scale, or None for a plain label set (e.g. ``("A", "B")``).
      texts: ``[K]`` candidate texts appended after the prompt (separator + label).
      prompt_extension: token ids shared by all candidates, appended to every prompt.
      token_ids: ``[K]`` tuples of token ids after ``prompt_extension`` (each non-empty).
      labels: ``[K]`` the labels of a label set (empty for a scale: its `ScoreScale.labels`).
    """

    scale: ScoreScale | None
    texts: tuple[str, ...]
    prompt_extension: tuple[int, ...]
    token_ids: tuple[tuple[int, ...], ...]
    labels: tuple[str, ...] = ()

    @property
    def single_token(self) -> bool:
        """True when every candidate is one token: one next-token distribution scores all K."""
        return all(len(t) == 1 for t in self.token_ids)

    @property
    def max_len(self) -> int:
        return max(len(t) for t in self.token_ids)

    @property
    def first_token_ids(self) -> np.ndarray:
        """int32 ``[K]``: first token of each candidate (the fast path's indices into the vocabulary)."""
        return np.asarray([t[0] for t in self.token_ids], dtype=np.int32)

    @property
    def prefix_free(self) -> bool:
        """False when some candidate's tokens are a proper prefix of another's (``"1"`` vs ``"10"``).

        Then the probability of the shorter label also counts continuations into the longer
        one, unless the engine scores an end-of-answer token after it.
        """
        seqs = self.token_ids
        return not any(
            i != j and len(a) < len(b) and tuple(b[: len(a)]) == tuple(a)
            for i, a in enumerate(seqs)
            for j, b in enumerate(seqs)
        )

    @property
    def extra_input_tokens(self) -> int:
        """Tokens the engine feeds after the prompt: the extension and all but the last candidate token."""
        return len(self.prompt_extension) + self.max_len - 1

    def padded(self, pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Candidates as a padded matrix for teacher forcing.

        Returns:
          ids: int32 ``[K, L]`` with L = `max_len`, padded with ``pad_id``.
          mask: bool ``[K, L]``, True on real tokens.
        """
        k, length = len(self.token_ids), self.max_len
        ids = np.full((k, length), pad_id, dtype=np.int32)
        mask = np.zeros((k, length), dtype=bool)
        for i, seq in enumerate(self.token_ids):
            ids[i, : len(seq)] = seq
            mask[i, : len(seq)] = True
        return ids, mask

    def to_key(self) -> dict[str, Any]:
        """JSON-able description for store keys."""
        head = {"scale": self.scale.to_key()} if self.scale is not None else {"labels": list(self.labels)}
        return {
            **head,
            "texts": list(self.texts),
            "prompt_extension": list(self.prompt_extension),
            "token_ids": [list(t) for t in self.token_ids],
        }


def score_candidates(
    tokenizer: Any,
    scale: ScoreScale | Sequence[str],
    *,
    context: str | None = None,
    separator: str = " ",
) -> ScoreCandidates:
    """Token sequences of the K score candidates when written after a prompt.

    Args:
      tokenizer: `tokenizers.Tokenizer` (or a fast `transformers` tokenizer).
      scale: the score scale (candidates are its `labels`), or a sequence of label strings
        (e.g. ``("A", "B")`` for a pairwise verdict).
      context: the end of the prompt the candidates follow (e.g. ``rendered.suffix``, or just
        its last line; merges never reach further back than a pre-token, so a line is
        plenty). None uses ``"Score:"``.
      separator: text between prompt and label: `RenderedPrompt.answer_separator` (``" "`` for
        raw prompts, ``""`` after a chat template's assistant header).

    Returns:
      `ScoreCandidates`; ``prompt_extension`` holds the tokens all candidates start with.

    Raises:
      CandidateTokenizationError: a candidate does not start at a clean token boundary, or
        two labels tokenise identically.
    """
    tok = as_tokenizer(tokenizer)
    context = DEFAULT_CONTEXT if context is None else context
    ctx_ids = tok.encode(context, add_special_tokens=False).ids
    if isinstance(scale, ScoreScale):
        labels, name = scale.labels, scale.name
    else:
        labels, scale = tuple(str(x) for x in scale), None
        name = "/".join(labels)
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise ValueError(f"a label set needs at least two distinct labels, got {list(labels)}")
    texts, seqs = [], []
    for label in labels:
        text = separator + label
        full = tok.encode(context + text, add_special_tokens=False)
        ids = list(full.ids)
        if ids[: len(ctx_ids)] != list(ctx_ids) or len(ids) == len(ctx_ids):
            tail = list(full.tokens[max(0, len(ctx_ids) - 2):])
            raise CandidateTokenizationError(
                f"score candidate {label!r} (scale {name}): the tokenizer merges it with the end of the "
                f"prompt ({context[-20:]!r} + {text!r} -> tokens {tail}), so it has no token sequence of its "
                f"own; end the prompt elsewhere or change answer_separator (now {separator!r})"
            )
        texts.append(text)
        seqs.append(tuple(ids[len(ctx_ids):]))
    if len(set(seqs)) != len(seqs):
        raise CandidateTokenizationError(f"scale {name}: two score candidates tokenise identically: {seqs}")
    # Shared leading tokens go to the prompt, but each candidate keeps at least one token.
    shared = min(common_prefix_length(seqs), min(len(s) for s in seqs) - 1)
    return ScoreCandidates(
        scale=scale,
        texts=tuple(texts),
        prompt_extension=tuple(seqs[0][:shared]),
        token_ids=tuple(s[shared:] for s in seqs),
        labels=() if scale is not None else labels,
    )


def split_token_ids(tokenizer: Any, prompt: RenderedPrompt) -> tuple[list[int], list[int]]:
    """Token ids of a rendered prompt, cut at the prefix/suffix boundary.

    The ids of ``prompt.text`` are cut after the longest common prefix of the ids of
    ``prompt.prefix`` alone and of the whole text, so ``prefix_ids + suffix_ids`` is exactly
    the tokenisation of the full prompt (what a per-example forward pass sees) even when the
    tokenizer would merge across the boundary; the prefix then loses its last few tokens.

    Returns:
      ``(prefix_ids, suffix_ids)``.
    """
    tok = as_tokenizer(tokenizer)
    full = tok.encode(prompt.text, add_special_tokens=prompt.add_special_tokens).ids
    # An empty prefix still shares the special tokens (BOS) the tokenizer adds.
    head = tok.encode(prompt.prefix, add_special_tokens=prompt.add_special_tokens).ids
    n = common_prefix_length([head, full])
    return list(full[:n]), list(full[n:])
