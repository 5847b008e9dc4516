"""Prompts of the position-bias protocol: both orders of every pair in the judge's chat, and
the one token each answer label is written as after them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxjudge.diagnostics.pairwise import SUMMARY_PAIRWISE, Pairs, PairwiseTemplate
from jaxjudge.prompts import CandidateTokenizationError, ChatFormat, RenderedPrompt, as_tokenizer

__all__ = ["answer_token_ids", "pairwise_chat_prompts"]


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
