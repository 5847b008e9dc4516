"""Prompt templates, their text-file format, and rendering into a shared prefix + a suffix.

Template text
-------------
A template is plain text with three kinds of placeholders:

- ``{min}`` and ``{max}``: the lowest and highest score of the `ScoreScale` (single braces;
  no other single-brace text is touched, so JSON or code in a prompt is safe);
- ``{{Name}}``: a text field of the example, matched case-insensitively (``{{Document}}`` ->
  ``fields["document"]``); a ``field_map`` can rename (``{"Article": "document"}``);
- ``{{/prefix}}``: the prefix/suffix split marker (at most one).

Substitution is one pass, so field text that itself contains ``{{Summary}}`` or ``{max}`` is
inserted verbatim and never expanded.

Prefix and suffix
-----------------
Each rendered prompt is ``prefix + suffix``. The prefix holds what the examples of one group
share (instructions and the source document): the engine computes its KV cache once per group
and runs only the suffix (summary and question) per example. Everything before the marker is
the prefix. When the marker stands alone on a line, that whole line (with its newline) is
removed, so::

    Article:
    {{Document}}
    {{/prefix}}

    Summary: ...

gives a prefix ending in the article's newline and a suffix starting with the blank line. A
file without the marker can name the field where the suffix starts (``split_before=
"Summary"``: the suffix starts at the line holding ``{{Summary}}``); otherwise the whole text is
the suffix (correct, but with no cache reuse). A prefix may only use fields that are equal
across the group; `render_all` checks this.

The answer position
-------------------
A template ends where the judge's answer begins (e.g. ``... Score (1-5):``). The score text is
appended after ``answer_separator`` (a space for raw prompts, so the judge writes ``" 3"``; an
empty string in chat style, where the assistant turn starts with the number).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from jaxjudge.prompts.scale import ScoreScale

__all__ = [
    "SPLIT_MARKER",
    "Template",
    "RenderedPrompt",
    "TemplateError",
]

SPLIT_MARKER = "{{/prefix}}"

_FIELD_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_ANY_RE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}|\{(min|max)\}")
_MARKER_LINE_RE = re.compile(r"^[ \t]*" + re.escape(SPLIT_MARKER) + r"[ \t]*(?:\r?\n|\Z)", re.MULTILINE)


class TemplateError(ValueError):
    """A template that cannot be rendered for an example (unknown placeholder, bad marker)."""


@dataclass(frozen=True)
class RenderedPrompt:
    """One prompt ready to tokenise.

    Attributes:
      prefix: text shared by the examples of the group (instructions + source document); with a
        chat template, everything from the start of the chat up to the per-example part.
      suffix: the per-example rest; ends exactly where the score is written.
      example_id: `Example.id` (or a synthetic id for prompts without an example).
      group: `Example.group`.
      answer_separator: text between ``text`` and the score candidate (see `score_candidates`).
      add_special_tokens: whether the tokenizer should add its special tokens (BOS) when encoding
        ``text``; False for chat-rendered text, whose template already writes them.
      truncated_tokens: how many tokens of the source text were cut to fit the context (0 if none).
      nll_span: ``(start, end)`` character offsets into ``suffix`` of the text whose tokens a
        prompt negative log-likelihood covers (`jaxjudge.engine.extract` with
        ``prompt_nll=True``): every token overlapping ``suffix[start:end]``, each conditioned
        on everything before it. The random-number prompts set it to the request itself, so
        the shared chat and task-instruction text does not enter their perplexity ranking.
        None: every token of the prompt after the first. The suffix is never cut by context
        truncation, so the span survives it.
    """

    prefix: str
    suffix: str
    example_id: str
    group: str
    answer_separator: str = ""
    add_special_tokens: bool = True
    truncated_tokens: int = 0
    nll_span: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.nll_span is not None:
            span = tuple(self.nll_span)
            if (len(span) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in span)
                    or not 0 <= span[0] < span[1] <= len(self.suffix)):
                raise ValueError(f"prompt {self.example_id!r}: nll_span must be (start, end) with "
                                 f"0 <= start < end <= len(suffix)={len(self.suffix)}, got {self.nll_span!r}")
            object.__setattr__(self, "nll_span", span)

    @property
    def text(self) -> str:
        """The full prompt, ``prefix + suffix``."""
        return self.prefix + self.suffix


def _split_text(text: str, split_before: str | None) -> tuple[str, str]:
    count = text.count(SPLIT_MARKER)
    if count > 1:
        raise TemplateError(f"template has {count} split markers {SPLIT_MARKER!r}; at most one is allowed")
    if count == 1:
        m = _MARKER_LINE_RE.search(text)
        if m is not None:
            return text[: m.start()], text[m.end():]
        i = text.index(SPLIT_MARKER)
        return text[:i], text[i + len(SPLIT_MARKER):]
    if split_before is None:
        return "", text
    for m in _FIELD_RE.finditer(text):
        if m.group(1).lower() == split_before.lower():
            line_start = text.rfind("\n", 0, m.start()) + 1
            return text[:line_start], text[line_start:]
    raise TemplateError(f"split_before={split_before!r}: no {{{{{split_before}}}}} placeholder in the template")


@dataclass(frozen=True)
class Template:
    """A judge prompt with a shared prefix part and a per-example suffix part.

    Attributes:
      name: identifier, recorded in store keys (e.g. ``"summeval/coherence"``).
      prefix: raw template text of the shared part (may be empty).
      suffix: raw template text of the per-example part; ends at the answer position.
      truncate_field: the source field that may be shortened when a prompt is longer than the
        context (``"document"`` for SummEval); None means nothing may be cut.
      truncate_side: ``"right"`` keeps the beginning of that field, ``"left"`` keeps its end
        (for conversations, where the last turn matters most).
      answer_separator: text between the prompt and the score in raw (non-chat) style.
      field_map: placeholder name -> example field name, for names that differ from fields.
      instruction: the task instruction alone (used by the random-number Deb-T prompts); None
        derives it: the paragraphs of the prefix before the first one holding a placeholder.
    """

    name: str
    prefix: str
    suffix: str
    truncate_field: str | None = None
    truncate_side: Literal["right", "left"] = "right"
    answer_separator: str = " "
    field_map: Mapping[str, str] = field(default_factory=dict)
    instruction: str | None = None

    def __post_init__(self) -> None:
        if SPLIT_MARKER in self.prefix or SPLIT_MARKER in self.suffix:
            raise TemplateError(f"template {self.name!r}: the split marker belongs in the text given to from_text")
        if self.truncate_side not in ("right", "left"):
            raise TemplateError(f"template {self.name!r}: truncate_side must be 'right' or 'left', got {self.truncate_side!r}")
        if not self.suffix.strip():
            raise TemplateError(f"template {self.name!r}: empty suffix; the per-example part must end with the question")
        object.__setattr__(self, "field_map", dict(self.field_map))

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_text(
        cls,
        text: str,
        *,
        name: str = "custom",
        split_before: str | None = None,
        **kwargs,
    ) -> Template:
        """Build a template from text with placeholders and an optional ``{{/prefix}}`` marker.

        Args:
          text: the template (see the module docstring for the syntax).
          name: recorded in store keys.
          split_before: without a marker, start the suffix at the line holding this field.
          **kwargs: the other `Template` attributes.
        """
        prefix, suffix = _split_text(text, split_before)
        return cls(name=name, prefix=prefix, suffix=suffix, **kwargs)

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, name: str | None = None, **kwargs) -> Template:
        """Load a template from a UTF-8 text file (one trailing newline is dropped).

        This is how the papers' exact prompts are run: save the prompt with ``{{Document}}``-
        style placeholders, add ``{{/prefix}}`` where the per-summary part starts, and load.
        """
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        if text.endswith("\n"):
            text = text[:-2] if text.endswith("\r\n") else text[:-1]
        return cls.from_text(text, name=name or path.stem, **kwargs)

    # -- introspection ------------------------------------------------------------------------

    @property
    def raw_text(self) -> str:
        return self.prefix + self.suffix

    def placeholders(self, part: Literal["prefix", "suffix", "all"] = "all") -> list[str]:
        """Field names used by the template (after `field_map`), in order of first use."""
        text = {"prefix": self.prefix, "suffix": self.suffix, "all": self.raw_text}[part]
        names: list[str] = []
        for m in _FIELD_RE.finditer(text):
            name = self.field_map.get(m.group(1), m.group(1))
            if name not in names:
                names.append(name)
        return names

    def instruction_text(self, scale: ScoreScale) -> str:
        """The task instruction with the range filled in (see `instruction`)."""
        if self.instruction is not None:
            return _fill(self.instruction, {}, scale, self).strip()
        paragraphs = re.split(r"\n[ \t]*\n", self.raw_text)
        kept = []
        for p in paragraphs:
            if _FIELD_RE.search(p):
                break
            kept.append(p)
        text = "\n\n".join(kept).strip()
        if not text:
            raise TemplateError(f"template {self.name!r}: no instruction before the first placeholder; set `instruction`")
        return _fill(text, {}, scale, self).strip()

    def to_key(self) -> dict[str, object]:
        """JSON-able description of everything that changes the rendered text (for store keys)."""
        return {
            "name": self.name,
            "prefix": self.prefix,
            "suffix": self.suffix,
            "answer_separator": self.answer_separator,
            "field_map": dict(sorted(self.field_map.items())),
            "truncate_field": self.truncate_field,
            "truncate_side": self.truncate_side,
        }

    # -- rendering ----------------------------------------------------------------------------

    def render_parts(self, fields: Mapping[str, str], scale: ScoreScale) -> tuple[str, str]:
        """Fill placeholders in the prefix and suffix text (no chat template).

        Args:
          fields: example text fields by name.
          scale: gives ``{min}`` and ``{max}``.

        Returns:
          ``(prefix, suffix)`` strings.
        """
        return _fill(self.prefix, fields, scale, self), _fill(self.suffix, fields, scale, self)


def _fill(text: str, fields: Mapping[str, str], scale: ScoreScale, template: Template) -> str:
    lowered = {k.lower(): k for k in fields}

    def sub(m: re.Match) -> str:
        if m.group(2) is not None:
            return scale.min_label if m.group(2) == "min" else scale.max_label
        placeholder = m.group(1)
        name = template.field_map.get(placeholder, placeholder)
        key = name if name in fields else lowered.get(name.lower())
        if key is None:
            raise TemplateError(
                f"template {template.name!r}: placeholder {{{{{placeholder}}}}} has no matching field; "
                f"the example has {sorted(fields)} (map names with field_map)"
            )
        return fields[key]

    return _ANY_RE.sub(sub, text)
