"""Render examples into prompts, with a caller-chosen policy for prompts longer than the context.

Context overflow policy
-----------------------
``overflow="raise"`` (default): a prompt whose tokens plus ``reserve_tokens`` exceed
``max_tokens`` raises `ContextOverflowError` naming the example id and the lengths.

``overflow="truncate"``: the template's ``truncate_field`` (the source text: the SummEval
article, the HelpSteer2 conversation) is cut at a token boundary, from the end
(``truncate_side="right"``) or the start (``"left"``), until the longest prompt of its group
fits. The summary/response and the question are never cut. All examples that share the source
get the same cut, so they keep sharing the prompt prefix. Each `RenderedPrompt` records the
number of source tokens removed in ``truncated_tokens`` and `RenderResult.n_truncated` counts
the truncated examples, so a run can report them. A prompt that does not fit even with the
source removed entirely, or a template without a truncatable field, raises.

``reserve_tokens`` is the room the answer needs after the prompt:
`ScoreCandidates.extra_input_tokens` + 1 for teacher-forced scoring.

Checking the length without tokenising
--------------------------------------
Every token of a byte-level BPE or a SentencePiece model with byte fallback covers at least one
byte of the normalised text; the exceptions are the special tokens the tokenizer adds (BOS) and
one prefix marker a pre-tokenizer may prepend (``add_prefix_space``, Metaspace's "first").
So ``len(normalise(text).encode()) + 1 + specials`` (`token_bound`) bounds a prompt's token
count, and only prompts whose bound exceeds the limit are tokenised. A run's prompts usually all
fit by that bound (a SummEval prompt is about 3,000 bytes; the judges' contexts are 8,192 tokens
and more), so a process of a multi-host job does not tokenise every prompt of the job to check
them: the engine tokenises only the rows it feeds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from jaxjudge.data.example import Example
from jaxjudge.prompts.candidates import as_tokenizer
from jaxjudge.prompts.chat import ChatFormat
from jaxjudge.prompts.scale import ScoreScale
from jaxjudge.prompts.template import RenderedPrompt, Template, TemplateError

__all__ = ["ContextOverflowError", "RenderResult", "render", "render_all", "token_bound", "truncate_text"]

OverflowPolicy = Literal["raise", "truncate"]


class ContextOverflowError(ValueError):
    """A prompt longer than the model's context (names the example and the lengths)."""


@dataclass(frozen=True)
class RenderResult:
    """Rendered prompts in example order, with the truncation count.

    Attributes:
      prompts: one `RenderedPrompt` per example.
      n_truncated: how many prompts had their source text truncated.
    """

    prompts: list[RenderedPrompt]
    n_truncated: int = 0

    @property
    def truncated_ids(self) -> list[str]:
        return [p.example_id for p in self.prompts if p.truncated_tokens > 0]

    def __len__(self) -> int:
        return len(self.prompts)

    def __iter__(self) -> Iterator[RenderedPrompt]:
        return iter(self.prompts)

    def __getitem__(self, i: int) -> RenderedPrompt:
        return self.prompts[i]


def _render_fields(
    template: Template, example_id: str, group: str, fields: Any, scale: ScoreScale, chat: ChatFormat | None
) -> RenderedPrompt:
    prefix, suffix = template.render_parts(fields, scale)
    if chat is None:
        return RenderedPrompt(prefix, suffix, example_id, group, template.answer_separator, True)
    chat_prefix, chat_suffix = chat.render(prefix, suffix)
    return RenderedPrompt(chat_prefix, chat_suffix, example_id, group, chat.separator, False)


def render(template: Template, example: Example, scale: ScoreScale, *, chat: ChatFormat | None = None) -> RenderedPrompt:
    """Render one example (no length checks; see `render_all`).

    Args:
      template: the judge template.
      example: supplies the text fields, id and group.
      scale: fills ``{min}``/``{max}``.
      chat: wrap in this chat template (None: raw prompt).
    """
    return _render_fields(template, example.id, example.group, example.fields, scale, chat)


def truncate_text(tokenizer: Any, text: str, keep: int, side: Literal["right", "left"] = "right") -> str:
    """Keep the first (``side="right"``) or last (``"left"``) ``keep`` tokens of ``text``.

    The cut is made at the character offset of a token boundary of ``text`` tokenised alone.
    """
    if keep < 0:
        raise ValueError(f"keep must be >= 0, got {keep}")
    enc = as_tokenizer(tokenizer).encode(text, add_special_tokens=False)
    n = len(enc.ids)
    if keep >= n:
        return text
    if keep == 0:
        return ""
    if side == "right":
        return text[: enc.offsets[keep - 1][1]].rstrip()
    return text[enc.offsets[n - keep][0]:].lstrip()


def _check_shared_prefix_fields(template: Template, examples: Sequence[Example]) -> None:
    names = template.placeholders("prefix")
    if not names:
        return
    first: dict[str, Example] = {}
    for ex in examples:
        ref = first.setdefault(ex.group, ex)
        for name in names:
            key = next((k for k in ex.fields if k.lower() == name.lower()), None)
            ref_key = next((k for k in ref.fields if k.lower() == name.lower()), None)
            if key is not None and ref_key is not None and ex.fields[key] != ref.fields[ref_key]:
                raise TemplateError(
                    f"template {template.name!r} uses field {name!r} in its shared prefix, but it differs within "
                    f"group {ex.group!r} (examples {ref.id!r} and {ex.id!r}); move it after {{{{/prefix}}}}"
                )


def token_bound(tokenizer: Any, texts: Sequence[str], *, add_special_tokens: bool) -> list[int]:
    """An upper bound on each text's token count, without tokenising: the UTF-8 bytes of the text
    after the tokenizer's normaliser, plus one possible prefix marker, plus the special tokens the
    tokenizer adds (see the module; ``tests/models/test_tokenizer.py`` checks it on the judges'
    tokenizers)."""
    tok = as_tokenizer(tokenizer)
    norm = tok.normalizer
    post = tok.post_processor
    specials = post.num_special_tokens_to_add(False) if add_special_tokens and post is not None else 0
    return [len((norm.normalize_str(t) if norm is not None else t).encode("utf-8")) + 1 + specials for t in texts]


def render_all(
    template: Template,
    examples: Sequence[Example],
    scale: ScoreScale,
    *,
    chat: ChatFormat | None = None,
    tokenizer: Any = None,
    max_tokens: int | None = None,
    overflow: OverflowPolicy = "raise",
    reserve_tokens: int = 0,
) -> RenderResult:
    """Render many examples, checking prefix sharing and (optionally) the context length.

    Args:
      template: the judge template.
      examples: the examples, any order (the output keeps it).
      scale: fills ``{min}``/``{max}``.
      chat: wrap in this chat template (None: raw prompts).
      tokenizer: needed when ``max_tokens`` is given.
      max_tokens: the model's context length; None skips the length check.
      overflow: ``"raise"`` or ``"truncate"`` (see the module docstring).
      reserve_tokens: tokens kept free after the prompt for the answer.

    Returns:
      `RenderResult` with one prompt per example.

    Raises:
      TemplateError: a prefix field differs within a group, or a placeholder has no field.
      ContextOverflowError: a prompt does not fit (``overflow="raise"``, or nothing to cut).
    """
    if overflow not in ("raise", "truncate"):
        raise ValueError(f"overflow must be 'raise' or 'truncate', got {overflow!r}")
    ids = [ex.id for ex in examples]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"render_all: duplicate example id {dup!r}")
    _check_shared_prefix_fields(template, examples)
    prompts = [render(template, ex, scale, chat=chat) for ex in examples]
    if max_tokens is None:
        return RenderResult(prompts, 0)
    if tokenizer is None:
        raise ValueError("render_all: max_tokens needs a tokenizer")
    if max_tokens <= reserve_tokens:
        raise ValueError(f"max_tokens ({max_tokens}) must exceed reserve_tokens ({reserve_tokens})")
    tok = as_tokenizer(tokenizer)
    limit = max_tokens - reserve_tokens
    counts = _TokenCounts(tok, prompts)
    # Only prompts that might not fit are tokenised (`token_bound`); the rest fit for certain.
    bounds = token_bound(tok, [p.text for p in prompts], add_special_tokens=prompts[0].add_special_tokens)
    counts.measure([i for i, b in enumerate(bounds) if b > limit])
    over = sorted(i for i, n in counts.n.items() if n > limit)
    if not over:
        return RenderResult(prompts, 0)

    def overflow_error(i: int, why: str) -> ContextOverflowError:
        return ContextOverflowError(
            f"example {examples[i].id!r}: prompt is {counts.n[i]} tokens but the context allows {max_tokens} "
            f"({reserve_tokens} reserved for the answer, so at most {limit}){why}"
        )

    if overflow == "raise":
        raise overflow_error(over[0], "; pass overflow='truncate' to cut the source text")
    if template.truncate_field is None:
        raise overflow_error(over[0], f"; template {template.name!r} has no truncatable field")
    clusters = _source_clusters(examples, over, template.truncate_field, overflow_error)
    counts.measure([i for members in clusters.values() for i in members])
    n_truncated = 0
    for (_, source), members in clusters.items():
        trial, removed = _cut_to_fit(template, examples, members, source, scale, chat, counts, limit, overflow_error)
        for i, p in zip(members, trial, strict=True):
            prompts[i] = replace(p, truncated_tokens=removed)
        n_truncated += len(members)
    return RenderResult(prompts, n_truncated)


class _TokenCounts:
    """Prompts' token counts, measured on demand and kept (``n``: prompt index -> tokens)."""

    def __init__(self, tok: Any, prompts: Sequence[RenderedPrompt]):
        self.tok, self.prompts, self.n = tok, prompts, {}

    def lengths(self, ps: Sequence[RenderedPrompt]) -> list[int]:
        # Chat text carries its own special tokens; raw prompts get the tokenizer's (BOS).
        enc = self.tok.encode_batch([p.text for p in ps], add_special_tokens=ps[0].add_special_tokens)
        return [len(e.ids) for e in enc]

    def measure(self, idx: Sequence[int]) -> None:
        todo = [i for i in idx if i not in self.n]
        if todo:
            self.n.update(zip(todo, self.lengths([self.prompts[i] for i in todo]), strict=True))


def _source_clusters(examples: Sequence[Example], over: Sequence[int], field: str,
                     overflow_error: Any) -> dict[tuple[str, str], list[int]]:
    """(group, source text) -> every example sharing it, for each source an overflowing prompt
    holds: examples that share a source are cut together, so they keep sharing the prefix."""
    clusters: dict[tuple[str, str], list[int]] = {}
    for i in over:
        ex = examples[i]
        if field not in ex.fields:
            raise overflow_error(i, f"; it has no field {field!r} to truncate")
        clusters.setdefault((ex.group, ex.fields[field]), [])
    for i, ex in enumerate(examples):
        key = (ex.group, ex.fields.get(field))
        if key in clusters:
            clusters[key].append(i)
    return clusters


def _cut_to_fit(template: Template, examples: Sequence[Example], members: Sequence[int], source: str,
                scale: ScoreScale, chat: ChatFormat | None, counts: _TokenCounts, limit: int,
                overflow_error: Any) -> tuple[list[RenderedPrompt], int]:
    """The members' prompts with ``source`` cut (on the template's side) until the longest fits,
    and the tokens removed from it."""
    field, tok = template.truncate_field, counts.tok
    source_len = len(tok.encode(source, add_special_tokens=False).ids)
    keep = source_len - (max(counts.n[i] for i in members) - limit)
    while True:
        if keep <= 0:
            worst = max(members, key=lambda i: counts.n[i])
            raise overflow_error(worst, f"; it does not fit even with {field!r} removed")
        cut = truncate_text(tok, source, keep, template.truncate_side)
        trial = [
            _render_fields(template, examples[i].id, examples[i].group, {**examples[i].fields, field: cut}, scale, chat)
            for i in members
        ]
        excess = max(counts.lengths(trial)) - limit
        if excess <= 0:
            return trial, source_len - len(tok.encode(cut, add_special_tokens=False).ids)
        keep -= excess
