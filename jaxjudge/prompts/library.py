"""The project's own judge templates, and the random-number prompts used for the number prior.

Templates live as text files in ``jaxjudge/resources/templates/`` (the same format users load
the papers' prompts from, see `Template.from_file`), one per task and aspect:

==========  ==============================================================  ==================
task        aspects                                                         truncated on overflow
==========  ==============================================================  ==================
summeval    coherence, consistency, fluency, relevance                      the article (end cut)
stsb        similarity                                                      nothing
semrel      relatedness                                                     nothing
helpsteer2  helpfulness, correctness, coherence, complexity, verbosity       the conversation (start cut)
==========  ==============================================================  ==================

Every template puts the instructions and the source (article, conversation) in the shared
prefix, the judged text and the question in the suffix, and ends with ``... ({min}-{max}):`` so
the score is the next token.

Random-number prompts. ``random_number_prompts.txt`` holds 100 of the project's own
paraphrases of "generate a random integer between {min} and {max}". Reading the judge's
distribution over the score candidates after such a prompt estimates its prior preference for
each number, independent of any content. The Deb-T variant prepends the judge template's task
instruction, so the prior is measured in the task's framing. The Tp least-perplexity prompts
are kept; each prompt's ``nll_span`` marks the request itself, so their perplexity is that of
the request's own tokens given the text before it (chat markup, task instruction), which is
the same for all 100 and would otherwise dominate the ranking.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from jaxjudge.prompts.chat import ChatFormat
from jaxjudge.prompts.scale import ScoreScale
from jaxjudge.prompts.template import RenderedPrompt, Template, TemplateError

__all__ = [
    "TEMPLATE_SPECS",
    "get_template",
    "list_templates",
    "load_random_number_paraphrases",
    "random_number_prompts",
    "resource_path",
    "template_from_config",
]

# (task, aspect) -> (file name, truncate_field, truncate_side)
TEMPLATE_SPECS: dict[tuple[str, str], tuple[str, str | None, str]] = {
    **{("summeval", a): (f"summeval_{a}.txt", "document", "right") for a in ("coherence", "consistency", "fluency", "relevance")},
    ("stsb", "similarity"): ("stsb_similarity.txt", None, "right"),
    ("semrel", "relatedness"): ("semrel_relatedness.txt", None, "right"),
    **{
        ("helpsteer2", a): (f"helpsteer2_{a}.txt", "prompt", "left")
        for a in ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
    },
}


def resource_path(*parts: str) -> Path:
    """Path of a file shipped in ``jaxjudge/resources``."""
    return Path(str(resources.files("jaxjudge").joinpath("resources", *parts)))


def list_templates() -> list[tuple[str, str]]:
    """All ``(task, aspect)`` pairs with a built-in template."""
    return sorted(TEMPLATE_SPECS)


def get_template(task: str, aspect: str) -> Template:
    """The project's template for a task and aspect (e.g. ``get_template("summeval", "coherence")``).

    Raises:
      KeyError: no template for that pair (the message lists the available ones).
    """
    key = (task, aspect)
    if key not in TEMPLATE_SPECS:
        known = ", ".join(f"{t}/{a}" for t, a in list_templates())
        raise KeyError(f"no built-in template for task {task!r}, aspect {aspect!r}; available: {known}")
    file, truncate_field, side = TEMPLATE_SPECS[key]
    return Template.from_file(
        resource_path("templates", file), name=f"{task}/{aspect}", truncate_field=truncate_field, truncate_side=side
    )


def template_from_config(given: str, *, name: str) -> Template:
    """A template a config gives as text or as a file path.

    A value holding a ``{{`` placeholder or a line break is the template text itself (a path
    holds neither); anything else is a UTF-8 file (``~`` expanded, relative to the working
    directory), read with `Template.from_file`.

    Raises:
      FileNotFoundError: no such file (the message names the path and says how text is told
        from a path).
      TemplateError: a malformed template.
    """
    if "{{" in given or "\n" in given:
        return Template.from_text(given, name=name)
    path = Path(given).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"template file not found: {path} (a template given as text must hold a "
                                "{{Field}} placeholder or a line break)")
    return Template.from_file(path, name=name)


def load_random_number_paraphrases() -> list[str]:
    """The 100 raw paraphrases, each with ``{min}`` and ``{max}``."""
    lines = resource_path("random_number_prompts.txt").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()]


def random_number_prompts(
    scale: ScoreScale,
    *,
    task_template: Template | None = None,
    chat: ChatFormat | None = None,
    answer_cue: str | None = "Answer:",
    paraphrases: list[str] | None = None,
) -> list[RenderedPrompt]:
    """Random-number prompts for a scale, ready for the engine.

    Args:
      scale: fills ``{min}``/``{max}``.
      task_template: if given, the Deb-T variant: its task instruction (`Template.
        instruction_text`) is the shared prefix of every prompt.
      chat: wrap in this chat template (None: raw text).
      answer_cue: a line after the request that the number follows (raw prompts need one so
        the number is the natural next token); None for none.
      paraphrases: override the built-in 100 (each must contain ``{min}`` and ``{max}``).

    Returns:
      One `RenderedPrompt` per paraphrase, ids ``"random/000"``..., group ``"random"``. Each
      prompt's ``nll_span`` is the request itself (the filled paraphrase, without the answer
      cue, the chat markup or the task instruction), so a prompt NLL ranks the paraphrases
      by how natural the judge finds the request in its context, not by the shared text.
    """
    texts = load_random_number_paraphrases() if paraphrases is None else list(paraphrases)
    for i, t in enumerate(texts):
        if "{min}" not in t or "{max}" not in t:
            raise ValueError(f"random-number paraphrase {i} lacks {{min}} or {{max}}: {t!r}")
    prefix = "" if task_template is None else task_template.instruction_text(scale) + "\n\n"
    prompts = []
    for i, t in enumerate(texts):
        body = t.replace("{min}", scale.min_label).replace("{max}", scale.max_label)
        suffix = body if answer_cue is None else f"{body}\n{answer_cue}"
        pid = f"random/{i:03d}"
        span = (0, len(body))  # the request opens the suffix, also inside a chat turn
        if chat is None:
            prompts.append(RenderedPrompt(prefix, suffix, pid, "random", " ", True, nll_span=span))
        else:
            head, tail = chat.render(prefix, suffix)
            if not tail.startswith(body):
                raise TemplateError(f"chat template does not start the user text after the split with the "
                                    f"random-number request (paraphrase {i}); cannot locate its tokens")
            prompts.append(RenderedPrompt(head, tail, pid, "random", chat.separator, False, nll_span=span))
    return prompts
