"""Chat templates: wrap a judge prompt in a model's chat format, keeping the prefix/suffix split.

A chat template is the Jinja string a tokenizer (``tokenizer_config.json``) or a GGUF file
(``tokenizer.chat_template``) carries. It is rendered here the way Hugging Face tokenizers
render it (sandboxed Jinja, ``trim_blocks``/``lstrip_blocks``, ``raise_exception``) with
``add_generation_prompt=True``, so the text ends where the assistant's reply begins and the
reply's first token is the score.

Finding the split. The template is free to add text around each message, so the prefix of the
rendered chat cannot be computed from the prefix text alone. Instead the user message is
rendered once as ``prefix_text + SENTINEL + suffix_text``; the chat text before the sentinel is
the rendered prefix and the text after it the rendered suffix. The split is accepted only if
the same chat rendered without the sentinel equals ``rendered_prefix + rendered_suffix``
exactly (a template that edits message content, e.g. strips or escapes it, raises instead of
silently changing the prompt). Everything before the sentinel depends only on the system text
and the prefix text, so examples sharing a prefix share the rendered prefix too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from jaxjudge.prompts.template import TemplateError

__all__ = ["ChatFormat", "SENTINEL", "chat_environment", "chat_format", "render_chat_template"]

# Private-use characters: never produced by a tokenizer's normaliser or found in the data sets.
SENTINEL = "\ue000jaxjudge-split\ue001"


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # transformers' filter: plain json.dumps keeping non-ASCII text (Jinja's own escapes HTML).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.cache
def chat_environment() -> ImmutableSandboxedEnvironment:
    """The one Jinja environment chat templates are compiled in, set up as transformers does.

    Sandboxed, ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson``
    filter that keeps non-ASCII text, and the ``raise_exception`` (raising `TemplateError`)
    and ``strftime_now`` globals that published templates call.
    """
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def render_chat_template(template: str, messages: Sequence[Mapping[str, Any]], *,
                         add_generation_prompt: bool = True, **variables: Any) -> str:
    """Renders a Hugging Face chat template in `chat_environment`.

    Args:
        template: the Jinja source.
        messages: ``[{"role": "system"|"user"|"assistant", "content": str}, ...]``.
        add_generation_prompt: append the assistant turn opener.
        **variables: further template variables (``bos_token``, ``eos_token``, ``tools``, ...).

    Returns:
        The rendered prompt text (special tokens as text).
    """
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ValueError(f"message {i} must be a mapping with a 'role' (and 'content')")
    return chat_environment().from_string(template).render(
        messages=list(messages), add_generation_prompt=add_generation_prompt, **variables)


def chat_format(judge: Any) -> "ChatFormat":
    """The `ChatFormat` of a loaded judge: its own chat template and BOS/EOS strings.

    Args:
        judge: a `jaxjudge.models.Judge` (anything with ``chat_template``, ``special_tokens``
            and ``source``).

    Raises:
        ValueError: the judge has no chat template (use raw prompts).
    """
    if not judge.chat_template:
        raise ValueError(f"the model {judge.source} has no chat template; use raw prompts")
    special = judge.special_tokens or {}
    return ChatFormat(judge.chat_template, bos_token=special.get("bos_token") or "",
                      eos_token=special.get("eos_token") or "")


@dataclass(frozen=True)
class ChatFormat:
    """A chat template and how the judge prompt is placed in it.

    Attributes:
      template: the Jinja chat template string.
      system: optional system message (None: no system turn; some templates then insert their
        own default, which is kept).
      bos_token, eos_token: values of the template's ``bos_token``/``eos_token`` variables.
      assistant_prefill: text written at the start of the assistant turn before the score
        (e.g. ``"Score:"``); empty means the reply starts with the score.
      answer_separator: text between the prompt and the score; defaults to ``" "`` after a
        prefill and ``""`` otherwise.
      extra_context: more template variables (e.g. ``{"enable_thinking": False}``).
    """

    template: str
    system: str | None = None
    bos_token: str = ""
    eos_token: str = ""
    assistant_prefill: str = ""
    answer_separator: str | None = None
    extra_context: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.template, str) or not self.template.strip():
            raise TypeError("ChatFormat.template must be a non-empty Jinja string")
        self._compiled  # noqa: B018  (compile now so a broken template fails at construction)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, **kwargs) -> ChatFormat:
        """Take the template and BOS/EOS strings from a `transformers` tokenizer."""
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise ValueError("the tokenizer has no chat_template")
        return cls(
            template=template,
            bos_token=getattr(tokenizer, "bos_token", None) or "",
            eos_token=getattr(tokenizer, "eos_token", None) or "",
            **kwargs,
        )

    @cached_property
    def _compiled(self) -> Any:
        try:
            return chat_environment().from_string(self.template)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"chat template does not compile (line {e.lineno}): {e.message}") from None

    @property
    def separator(self) -> str:
        if self.answer_separator is not None:
            return self.answer_separator
        return " " if self.assistant_prefill else ""

    def messages(self, user_content: str) -> list[dict[str, str]]:
        msgs = [] if self.system is None else [{"role": "system", "content": self.system}]
        msgs.append({"role": "user", "content": user_content})
        return msgs

    def render_text(self, user_content: str) -> str:
        """The whole chat for one user message, ending at the start of the assistant reply."""
        text = self._compiled.render(
            messages=self.messages(user_content),
            add_generation_prompt=True,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            **self.extra_context,
        )
        return text + self.assistant_prefill

    def render(self, prefix_text: str, suffix_text: str) -> tuple[str, str]:
        """Wrap a prompt in the chat and split the result into a shared prefix and a suffix.

        Args:
          prefix_text: the judge prompt's prefix (instructions + source).
          suffix_text: its per-example part.

        Returns:
          ``(chat_prefix, chat_suffix)`` with ``chat_prefix + chat_suffix`` equal to the chat
          rendered for ``prefix_text + suffix_text``.

        Raises:
          TemplateError: the template edits message content so no exact split exists.
        """
        if SENTINEL in prefix_text or SENTINEL in suffix_text:
            raise TemplateError("prompt text contains the chat split sentinel")
        marked = self.render_text(prefix_text + SENTINEL + suffix_text)
        if marked.count(SENTINEL) != 1:
            raise TemplateError(
                f"chat template rendered the user message {marked.count(SENTINEL)} times; cannot split it"
            )
        head, tail = marked.split(SENTINEL)
        full = self.render_text(prefix_text + suffix_text)
        if head + tail != full:
            raise TemplateError(
                "chat template changes the message text (e.g. strips or escapes it), so the prompt "
                "cannot be split into a shared prefix and a suffix exactly; render without the split "
                "(prefix_text='') or use a raw prompt"
            )
        return head, tail

    def to_key(self) -> dict[str, Any]:
        """JSON-able description for store keys."""
        return {
            "template": self.template,
            "system": self.system,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "assistant_prefill": self.assistant_prefill,
            "answer_separator": self.separator,
            "extra_context": {k: self.extra_context[k] for k in sorted(self.extra_context)},
        }
