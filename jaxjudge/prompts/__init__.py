"""Prompts: score scales, judge templates (built-in or from files), chat formatting, score
candidates as token sequences, and the context-overflow policy.

A rendered prompt is a shared ``prefix`` (instructions + source document) and a per-example
``suffix`` (judged text + question, ending where the score is written), so the engine can
reuse the prefix's KV cache across the examples of a group.
"""

from jaxjudge.prompts.candidates import (
    DEFAULT_CONTEXT,
    CandidateTokenizationError,
    ScoreCandidates,
    as_tokenizer,
    common_prefix_length,
    encode,
    score_candidates,
    split_token_ids,
)
from jaxjudge.prompts.chat import SENTINEL, ChatFormat, chat_format
from jaxjudge.prompts.library import (
    TEMPLATE_SPECS,
    get_template,
    list_templates,
    load_random_number_paraphrases,
    random_number_prompts,
)
from jaxjudge.prompts.render import ContextOverflowError, RenderResult, render, render_all, truncate_text
from jaxjudge.prompts.scale import SCALE_PRESETS, ScoreScale
from jaxjudge.prompts.template import SPLIT_MARKER, RenderedPrompt, Template, TemplateError

__all__ = [
    "DEFAULT_CONTEXT",
    "SCALE_PRESETS",
    "SENTINEL",
    "SPLIT_MARKER",
    "TEMPLATE_SPECS",
    "CandidateTokenizationError",
    "ChatFormat",
    "ContextOverflowError",
    "RenderResult",
    "RenderedPrompt",
    "ScoreCandidates",
    "ScoreScale",
    "Template",
    "TemplateError",
    "as_tokenizer",
    "chat_format",
    "common_prefix_length",
    "encode",
    "get_template",
    "list_templates",
    "load_random_number_paraphrases",
    "random_number_prompts",
    "render",
    "render_all",
    "score_candidates",
    "split_token_ids",
    "truncate_text",
]
