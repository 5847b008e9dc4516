"""Checks of an experiment config that look beyond its fields, all before any forward pass.

* `validate_config(cfg)`: the model files, data files and split files exist (optionally with
  their sha256), each (task, aspect) has a template, each scale suits the metrics;
* `check_tokenizer(cfg, model, tokenizer)`: a hook the extraction calls after loading only a
  model's tokenizer; every scale's score candidates must have a token sequence of their own
  after the prompt, and distinct candidates must tokenise differently.
"""

from __future__ import annotations

from typing import Any

from jaxjudge.data.example import DataError
from jaxjudge.data.table import table_columns
from jaxjudge.data.tasks import resolve_data_dir
from jaxjudge.experiment.schema import ConfigError, ExperimentConfig, ModelSpec, TaskSpec, resolve_model_path
from jaxjudge.models.source import content_sha256, is_remote
from jaxjudge.prompts import CandidateTokenizationError, ScoreScale, score_candidates
from jaxjudge.store.location import LocationError, is_bucket

__all__ = ["validate_config", "check_tokenizer"]


def _model_problems(model: ModelSpec, check_sha: bool) -> list[str]:
    try:
        path = resolve_model_path(model)
    except ConfigError as e:
        return [str(e)]
    if not path.exists():
        hint = ""
        if model.path.startswith("gguf:"):
            hint = " (fetch the Qwen judges with ../shared/models/get_models.sh, or set $JAXJUDGE_GGUF_DIR)"
        return [f"model {model.name!r}: file not found: {path}{hint}"]
    if check_sha and model.sha256 is not None and (is_remote(path) or path.is_file()):
        actual = content_sha256(path)
        if actual != model.sha256:
            return [f"model {model.name!r}: {path} has sha256 {actual}, config expects {model.sha256}"]
    return []


def _template_problems(task: TaskSpec) -> list[str]:
    out = []
    for aspect in task.aspects:
        try:
            template = task.template(aspect)
        except ConfigError as e:
            out.append(str(e))
            continue
        if aspect in (task.templates or {}):
            used = {m for m in ("{min}", "{max}") if m in template.raw_text}
            if len(used) < 2:
                out.append(f"task {task.task!r}: template of aspect {aspect!r} lacks "
                           f"{' and '.join(sorted({'{min}', '{max}'} - used))}: the score range must reach the prompt")
    return out


def _file_task_problems(task: TaskSpec) -> list[str]:
    """A user's table: it exists, and every template placeholder names one of its columns."""
    path = task.file
    try:
        columns = table_columns(path)
    except (FileNotFoundError, DataError, LocationError) as e:
        return [f"task {task.task!r}: {e}"]
    lowered = {c.lower() for c in columns}
    chosen = None if task.text_fields is None else {c.lower() for c in task.text_fields}
    out = []
    for aspect in task.aspects:
        for name in task.template(aspect).placeholders():
            if name.lower() not in lowered:
                out.append(f"task {task.task!r}: template of aspect {aspect!r} uses {{{{{name}}}}}, a field {path} "
                           f"lacks (its fields: {', '.join(columns)})")
            elif chosen is not None and name.lower() not in chosen:
                out.append(f"task {task.task!r}: template of aspect {aspect!r} uses {{{{{name}}}}}, not one of "
                           f"TaskSpec.text_fields {list(task.text_fields)}")
    return out


def _task_problems(task: TaskSpec) -> list[str]:
    out = _template_problems(task)
    if out:
        return out
    if task.file is not None:
        return _file_task_problems(task)
    if task.data == "embedded":
        if task.split == "fixed_docs" and task.dev_docs is None:
            out.append(
                f"task {task.task!r}: the embedded subset does not hold the 10 SummEval dev documents; "
                "set TaskSpec.dev_docs (e.g. one of jaxjudge.data.SUMMEVAL_SUBSET_DOC_IDS)"
            )
        return out
    try:
        folder = resolve_data_dir(task)
    except LocationError as e:  # $JAXJUDGE_DATA_DIR mistyped, or a scheme nothing installed serves
        return out + [f"task {task.task!r}: {e}"]
    if task.task == "summeval" and is_bucket(folder):
        return out + [f"task {task.task!r}: data folder {folder}: SummEval's files are read from a local folder "
                      "(a bucket serves STS-B and SemRel)"]
    if not folder.is_dir():
        where = "set $JAXJUDGE_DATA_DIR or TaskSpec.data" if task.data == "shared" else "TaskSpec.data"
        return out + [f"task {task.task!r}: data folder not found: {folder} ({where})"]
    for name in task.source().files:
        if not (folder / name).is_file():
            out.append(f"task {task.task!r}: data file not found: {folder / name}")
    if task.split == "fixed_docs" and task.dev_docs is None and not (folder / "dev_doc_ids.txt").is_file():
        out.append(f"task {task.task!r}: split 'fixed_docs' needs {folder / 'dev_doc_ids.txt'} (file not found)")
    return out


def validate_config(cfg: ExperimentConfig, *, check_files: bool = True, check_sha: bool = False) -> None:
    """Check that a config can run, before any model is loaded.

    Args:
      cfg: the config (already type-checked by construction).
      check_files: check that model files and data files exist.
      check_sha: also hash model files against ``ModelSpec.sha256`` where given.

    Raises:
      ConfigError: listing every problem found, each naming the model, task, field or file.
    """
    problems: list[str] = []
    if check_files:
        for m in cfg.models:
            problems += _model_problems(m, check_sha)
        for t in cfg.tasks:
            problems += _task_problems(t)
    for s in cfg.scales:
        scale = ScoreScale.parse(s)
        if "sdd" in cfg.metrics and scale.step != 1:
            problems.append(f"scale {s!r}: the SDD metric needs integer scores (step 1)")
    for t in cfg.tasks:
        if t.split == "kfold" and t.subset is not None and t.subset.doc_ids is not None:
            if len(t.subset.doc_ids) < t.n_folds:
                problems.append(
                    f"task {t.task!r}: subset keeps {len(t.subset.doc_ids)} documents, fewer than n_folds={t.n_folds}"
                )
    if len(problems) == 1:  # one problem, one line
        raise ConfigError(f"config {cfg.name!r}: {problems[0]}")
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"config {cfg.name!r}: {len(problems)} problem(s):\n{lines}")


def _template_context(task: TaskSpec, aspect: str, scale) -> tuple[str, str]:
    """The last line of a template's rendered suffix (where the score follows) and its separator."""
    template = task.template(aspect)
    fields = {name: "x" for name in template.placeholders("all")}
    _, suffix = template.render_parts(fields, scale)
    lines = [line for line in suffix.splitlines() if line.strip()]
    return (lines[-1] if lines else suffix), template.answer_separator


def check_tokenizer(
    cfg: ExperimentConfig, model: str, tokenizer: Any, *, separator: str | None = None
) -> None:
    """Check that a model's tokenizer can express every scale of the config.

    Call it after loading only the tokenizer, before any forward pass. For every task, aspect
    and scale, the K candidates must each start at a clean token boundary after the template's
    final line and tokenise differently (see `jaxjudge.prompts.score_candidates`).

    Args:
      cfg: the config.
      model: the model's name in ``cfg.models``.
      tokenizer: its `tokenizers.Tokenizer` (or a fast transformers tokenizer).
      separator: text between the prompt and the score (None: the template's
        ``answer_separator``; a chat template's assistant header usually needs ``""``).

    Raises:
      ConfigError: naming the model, scale, task and aspect, with the tokenizer's reason.
    """
    cfg.model(model)
    for t in cfg.tasks:
        for aspect in t.aspects:
            for s in cfg.scales:
                scale = ScoreScale.parse(s)
                context, sep = _template_context(t, aspect, scale)
                try:
                    score_candidates(tokenizer, scale, context=context, separator=sep if separator is None else separator)
                except CandidateTokenizationError as e:
                    raise ConfigError(
                        f"model {model!r} cannot express scale {s!r} (task {t.task!r}, aspect {aspect!r}): {e}"
                    ) from None
