"""Planning an experiment: the extraction jobs its methods need, in a stable order."""

from __future__ import annotations

from jaxjudge.experiment.schema import ExperimentConfig
from jaxjudge.report.stores import ExtractionJob

__all__ = ["extraction_plan"]


def extraction_plan(cfg: ExperimentConfig) -> list[ExtractionJob]:
    """The extractions `report` needs, deduplicated, in a stable order.

    Judges need ``score`` arrays, plus ``random_r`` / ``random_t`` / ``content_free`` /
    ``generate`` as their methods require, and ``contrastive_generate`` (for
    ``contrastive_generate``, judges with an assistant; the job runs both models and belongs
    to the judge). An assistant of a judge needs ``score`` arrays (contrastive decoding) and,
    for ``contrastive_deb_t``, its own ``random_t`` arrays (the prior of the combined judge).
    ``temperature`` (contrastive decoding's matched baseline) reads the judge's ``score``
    arrays alone.
    """
    methods = set(cfg.methods)
    contrastive = bool(methods & {"contrastive", "contrastive_deb_t"})  # the assistant's own arrays
    needs_t = bool(methods & {"deb_t", "contrastive_deb_t"})
    assistants = [a for m, a in cfg.pairs if m in cfg.judge_names] if contrastive else []
    jobs: list[ExtractionJob] = []
    for model in dict.fromkeys(list(cfg.judge_names) + assistants):
        is_judge = model in cfg.judge_names
        for s in cfg.scales:
            if is_judge and "deb_r" in methods:
                jobs.append(ExtractionJob("random_r", model, None, None, s))
            for t in cfg.tasks:
                for a in t.aspects:
                    jobs.append(ExtractionJob("score", model, t.task, a, s))
                    if is_judge and "generate" in methods:
                        jobs.append(ExtractionJob("generate", model, t.task, a, s))
                    if is_judge and "contrastive_generate" in methods and cfg.assistant_of(model) is not None:
                        jobs.append(ExtractionJob("contrastive_generate", model, t.task, a, s))
                    if is_judge and "contextual" in methods:
                        jobs.append(ExtractionJob("content_free", model, t.task, a, s))
                    if (is_judge and needs_t) or (not is_judge and "contrastive_deb_t" in methods):
                        jobs.append(ExtractionJob("random_t", model, t.task, a, s))
    return list(dict.fromkeys(jobs))
