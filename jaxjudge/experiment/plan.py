"""Planning an experiment: the extraction jobs its methods need, in a stable order."""

from __future__ import annotations

from jaxjudge.experiment.schema import ExperimentConfig
from jaxjudge.jobs import ExtractionJob
from jaxjudge.report.methods import cell_needs
from jaxjudge.report.stores import cells

__all__ = ["extraction_plan"]


def extraction_plan(cfg: ExperimentConfig) -> list[ExtractionJob]:
    """The extractions `report` needs, deduplicated, in a stable order.

    The union over the grid's cells of what the configured methods need
    (`jaxjudge.report.methods.cell_needs`: the judge's score arrays, and each method's declared
    `Need`s, some of them jobs of the judge's assistant in ``pairs``). Ordered model by model
    (judges, then assistants, then other-family assistants), then by scale, task and aspect (a task-free job first), then by
    job kind (``order``).
    """
    needs = cell_needs(cfg.methods)
    jobs = {}
    for cell in cells(cfg):
        for need in needs:
            job = need.job(cfg, cell.judge, cell.task, cell.aspect, cell.scale)
            if job is not None:
                jobs[job] = None
    models = list(dict.fromkeys([*cfg.judge_names, *(a for _, a in (*cfg.pairs, *cfg.control_pairs))]))
    scales = list(cfg.scales)
    places = {(t.task, a): (i, j) for i, t in enumerate(cfg.tasks) for j, a in enumerate(t.aspects)}

    def place(job: ExtractionJob) -> tuple:
        where = places[(job.task, job.aspect)] if job.per_task else (-1, -1)
        return models.index(job.model), scales.index(job.scale), *where, job.order

    return sorted(jobs, key=place)
