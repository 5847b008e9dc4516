"""Parsed generations: the judge's greedy reply, and the contrastive (main - lambda * assistant)
greedy reply; validity is the parse rate."""

from __future__ import annotations

from jaxjudge.jobs import ContrastiveGenerateJob, GenerateJob
from jaxjudge.report.methods.base import Method, Need, Role

FAMILIES = (
    Method("generate", "parsed", parsed=lambda a: a.generated, role=Role.GENERATION, order=10, needs=(
        Need(GenerateJob, into=lambda r: {"generated": r["parsed"]}, has=lambda a: a.generated is not None),)),
    Method("contrastive_generate", "parsed", parsed=lambda a: a.contrastive_generated, order=20, needs=(
        Need(ContrastiveGenerateJob, into=lambda r: {"contrastive_generated": r["parsed"]},
             has=lambda a: a.contrastive_generated is not None),)),
)
