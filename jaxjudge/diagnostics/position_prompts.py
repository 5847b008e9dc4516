"""Prompts of the position-bias protocol: the pairwise template (its wording is data, rendered by
the engine), both orders of every pair as user messages and in the judge's chat, and the one
token each answer label is written as after them."""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jaxjudge.diagnostics.pairwise import Pairs
from jaxjudge.prompts import CandidateTokenizationError, ChatFormat, RenderedPrompt, as_tokenizer

__all__ = ["ASPECT_DEFINITIONS", "PairwiseTemplate", "SUMMARY_PAIRWISE", "render_pair_prompts", "answer_token_ids",
           "pairwise_chat_prompts"]

# A slot placeholder as `str.format` reads it ({summary_a}, {summary_a!r}, {summary_b:>10}).
_SLOT_FIELD_RE = re.compile(r"(?<!\{)\{summary_[ab][}!:]")

# --------------------------------------------------------------------------------------------
# Prompt wording (data, rendered by the engine; the chat template is applied by the prompts
# stage). The judge's answer is read as the first assistant token: "A" or "B".

ASPECT_DEFINITIONS: dict[str, str] = {
    "coherence": (
        "the summary is well structured and well organised; its sentences build a coherent "
        "body of information about the topic rather than a heap of unrelated facts"
    ),
    "consistency": (
        "the summary states only facts supported by the article and contains no invented or "
        "contradicting information"
    ),
    "fluency": "the sentences of the summary are grammatical, well formed and easy to read",
    "relevance": (
        "the summary selects the important content of the article and leaves out redundant "
        "or unimportant details"
    ),
}


@dataclass(frozen=True)
class PairwiseTemplate:
    """A pairwise ("which of A and B is better") judging prompt, as data.

    Attributes:
      name: identifier stored with extracted log-probabilities (part of the cache key).
      system: system message.
      user: user message, a `str.format` template with the placeholders {document},
        {summary_a}, {summary_b}, {aspect} and {aspect_definition}.
      choices: the answer strings for slot A and slot B, in that order; the engine scores each
        as the first token of the assistant reply, and the columns of the log-probability
        arrays passed to `position_bias` follow this order.
      aspect_definitions: default definition per aspect name.
    """

    name: str
    system: str
    user: str
    choices: tuple[str, str] = ("A", "B")
    aspect_definitions: dict[str, str] = field(default_factory=lambda: dict(ASPECT_DEFINITIONS))

    @property
    def placeholders(self) -> frozenset[str]:
        """Names of the placeholders in `user`."""
        return frozenset(f for _, f, _, _ in string.Formatter().parse(self.user) if f)

    def format_user(self, *, document: str, summary_a: str, summary_b: str, aspect: str,
                    aspect_definition: str | None = None) -> str:
        """Renders the user message for one order of one pair.

        Args:
          document: the source article.
          summary_a: the text shown in slot A (the pair's `first` in the forward order, its
            `second` in the swapped order).
          summary_b: the text shown in slot B.
          aspect: aspect name, e.g. "coherence".
          aspect_definition: overrides the template's definition for `aspect`.

        Returns:
          The user message.
        """
        prefix, suffix = self.format_user_parts(document=document, summary_a=summary_a, summary_b=summary_b,
                                                aspect=aspect, aspect_definition=aspect_definition)
        return prefix + suffix

    @property
    def split_index(self) -> int:
        """Offset in `user` where the per-pair part starts.

        It is the start of the line holding the first {summary_a} or {summary_b} placeholder:
        everything before it depends only on the document and the aspect, so it is the same
        for both orders of every pair of one document and can be computed once as a shared
        prefix (KV cache).
        """
        hits = [m.start() for m in _SLOT_FIELD_RE.finditer(self.user)]
        if not hits:
            raise ValueError(f"pairwise template {self.name!r}: user message has no {{summary_a}}/{{summary_b}}")
        return self.user.rfind("\n", 0, min(hits)) + 1

    def format_user_parts(self, *, document: str, summary_a: str, summary_b: str, aspect: str,
                          aspect_definition: str | None = None) -> tuple[str, str]:
        """`format_user` cut into the document-level prefix and the per-pair suffix.

        Args:
          document, summary_a, summary_b, aspect, aspect_definition: as in `format_user`.

        Returns:
          (prefix, suffix) with `prefix + suffix == format_user(...)`; the prefix does not
          depend on the summaries (see `split_index`).
        """
        if aspect_definition is None:
            if aspect not in self.aspect_definitions:
                raise ValueError(
                    f"no definition for aspect {aspect!r}; known: {sorted(self.aspect_definitions)} "
                    "(or pass aspect_definition=)"
                )
            aspect_definition = self.aspect_definitions[aspect]
        cut = self.split_index
        fields = dict(document=document, summary_a=summary_a, summary_b=summary_b, aspect=aspect,
                      aspect_definition=aspect_definition)
        return self.user[:cut].format(**fields), self.user[cut:].format(**fields)


SUMMARY_PAIRWISE = PairwiseTemplate(
    name="summary_pairwise_v1",
    system="You are a careful evaluator of news summaries.",
    user=(
        "Read the news article below and the two summaries of it, Summary A and Summary B.\n\n"
        "Evaluation criterion: {aspect}, meaning that {aspect_definition}.\n\n"
        "Article:\n{document}\n\n"
        "Summary A:\n{summary_a}\n\n"
        "Summary B:\n{summary_b}\n\n"
        "Which of the two summaries is better with respect to {aspect}? Answer with A or B only."
    ),
)
"""Default pairwise prompt for SummEval-style summary pairs (the project's own wording)."""


def render_pair_prompts(pairs: Pairs, documents: Sequence[str], summaries: Sequence[str], aspect: str, *,
                        template: PairwiseTemplate = SUMMARY_PAIRWISE) -> tuple[list[str], list[str]]:
    """User messages for both orders of every pair, ready for the chat template and the engine.

    Args:
      pairs: from `build_pairs` / `pairs_from_examples`.
      documents: source document of each item, indexed like the items given to `build_pairs`.
      summaries: text of each item, same indexing.
      aspect: aspect name for the template.
      template: the pairwise prompt.

    Returns:
      (forward [P], swapped [P]): in `forward[k]` the pair's `first` is Summary A; in
      `swapped[k]` its `second` is. Score the answers with `template.choices` and pass the two
      resulting [P, 2] arrays to `position_bias` in this order.
    """
    forward, swapped = [], []
    for f, t in zip(pairs.first.tolist(), pairs.second.tolist()):
        if documents[f] != documents[t]:
            raise ValueError(f"pair ({f}, {t}) mixes two different documents; check the indexing of documents")
        forward.append(template.format_user(document=documents[f], summary_a=summaries[f],
                                            summary_b=summaries[t], aspect=aspect))
        swapped.append(template.format_user(document=documents[f], summary_a=summaries[t],
                                            summary_b=summaries[f], aspect=aspect))
    return forward, swapped


def pairwise_chat_prompts(pairs: Pairs, documents: Sequence[str], summaries: Sequence[str], aspect: str,
                          chat: ChatFormat, *, template: PairwiseTemplate = SUMMARY_PAIRWISE,
                          ) -> tuple[list[RenderedPrompt], list[RenderedPrompt]]:
    """Both orders of every pair as chat-rendered `RenderedPrompt`s, split for prefix caching.

    The chat's system message is replaced by ``template.system``. Example ids are
    ``"<k>:<first_id>|<second_id>:forward"`` / ``":swapped"`` (k the pair's index), groups the
    pair's document.

    Args:
      pairs: from `pairs_from_examples` / `build_pairs`.
      documents: source document of each item (indexed like the items of `pairs`).
      summaries: text of each item, same indexing.
      aspect: aspect name for the template.
      chat: a `jaxjudge.prompts.ChatFormat` (e.g. `jaxjudge.prompts.chat_format(judge)`).
      template: the pairwise prompt.

    Returns:
      (forward [P], swapped [P]) lists of `RenderedPrompt`; the text of each is the chat for
      ``template.format_user`` of that order.
    """
    chat = dataclasses.replace(chat, system=template.system)
    forward, swapped = [], []
    for k, (f, s) in enumerate(zip(pairs.first.tolist(), pairs.second.tolist(), strict=True)):
        if documents[f] != documents[s]:
            raise ValueError(f"pair {k} (items {f}, {s}) mixes two different documents; check the indexing")
        base = f"{k}:{pairs.first_id[k]}|{pairs.second_id[k]}"
        for out, (a, b), order in ((forward, (f, s), "forward"), (swapped, (s, f), "swapped")):
            head, tail = template.format_user_parts(document=documents[f], summary_a=summaries[a],
                                                    summary_b=summaries[b], aspect=aspect)
            chat_head, chat_tail = chat.render(head, tail)
            out.append(RenderedPrompt(chat_head, chat_tail, f"{base}:{order}", str(pairs.group[k]),
                                      chat.separator, False))
    return forward, swapped


def _ending(text: str) -> str:
    """The last line of a prompt: all a tokenizer's merges can reach of it from an appended answer."""
    cut = text.rfind("\n")
    return text if cut < 0 else text[cut + 1:]


def answer_token_ids(tokenizer: Any, prompts: Sequence[Any], choices: Sequence[str]) -> np.ndarray:
    """The one token each answer string is written as right after every prompt.

    The answer is ``prompt.answer_separator + choice`` appended to the prompt text; its tokens
    are those of prompt + answer beyond the tokens of the prompt alone (checked on the last
    line of each distinct prompt ending, which is where merges could happen).

    Args:
      tokenizer: the judge's tokenizer.
      prompts: `RenderedPrompt`s.
      choices: the answer strings, e.g. ``("A", "B")``.

    Returns:
      int32 [C] token ids, in the order of `choices`.

    Raises:
      CandidateTokenizationError: a choice is not exactly one token of its own after some
        prompt (merged into the prompt, or split into several tokens), or tokenises
        differently after two prompts; the message names the choice and the example.
      ValueError: fewer than two choices, or two choices with the same token.
    """
    if len(choices) < 2:
        raise ValueError(f"choices needs at least two answers, got {list(choices)}")
    tok = as_tokenizer(tokenizer)
    found: np.ndarray | None = None
    first_example = None
    for key in dict.fromkeys((_ending(p.text), p.answer_separator) for p in prompts):
        context, sep = key
        example = next(p.example_id for p in prompts if (_ending(p.text), p.answer_separator) == key)
        ctx = tok.encode(context, add_special_tokens=False)
        ids = []
        for choice in choices:
            full = tok.encode(context + sep + choice, add_special_tokens=False)
            tail = full.ids[len(ctx.ids):]
            if full.ids[:len(ctx.ids)] != ctx.ids or len(tail) != 1:
                raise CandidateTokenizationError(
                    f"example {example!r}: answer {choice!r} (after separator {sep!r}) is not one token of its own "
                    f"after the prompt ({context[-20:]!r} + {sep + choice!r} -> tokens "
                    f"{full.tokens[max(0, len(ctx.ids) - 1):]}); pick single-token answer labels"
                )
            ids.append(tail[0])
        got = np.asarray(ids, np.int32)
        if found is None:
            found, first_example = got, example
        elif not np.array_equal(found, got):
            raise CandidateTokenizationError(
                f"answers {list(choices)} are tokens {got.tolist()} after example {example!r} but "
                f"{found.tolist()} after example {first_example!r}"
            )
    if found is None:
        raise ValueError("prompts is empty")
    if len(set(found.tolist())) != len(found):
        raise ValueError(f"answers {list(choices)} share a token ({found.tolist()})")
    return found
