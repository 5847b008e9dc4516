"""Extraction jobs: one typed object per kind of store, shared by the writer and the reader.

Kinds (`ExtractionJob` subclasses, each owning its store key, folder, array schema, reading
and running): `ScoreJob`, `GenerateJob`, `ContrastiveGenerateJob`, `RandomRJob`,
`RandomTJob`, `ContentFreeJob`. `jaxjudge.experiment.run_extractions` runs them into stores;
`jaxjudge.report.stores.load_cells` reads the stores back through the same objects; the
methods of `jaxjudge.report.methods` declare which kinds they need.
"""

from jaxjudge.jobs.base import GENERATE_CHUNK_ROWS, KEYED_ENGINE_OPTIONS, ExtractionJob, RunContext, StoreLookupError
from jaxjudge.jobs.generate import ContrastiveGenerateJob, GenerateJob, contrastive_generate_match
from jaxjudge.jobs.prompt_sets import (
    CONTENT_FREE,
    RANDOM_NLL_SPAN,
    ContentFreeJob,
    RandomRJob,
    RandomTJob,
    content_free_examples,
)
from jaxjudge.jobs.score import ScoreJob
from jaxjudge.jobs.spec import RunSpec

KINDS: tuple[type[ExtractionJob], ...] = (ScoreJob, GenerateJob, ContrastiveGenerateJob, RandomRJob, RandomTJob,
                                          ContentFreeJob)
"""Every job kind, in plan order within a cell."""

__all__ = [
    "CONTENT_FREE",
    "GENERATE_CHUNK_ROWS",
    "KEYED_ENGINE_OPTIONS",
    "KINDS",
    "RANDOM_NLL_SPAN",
    "ContentFreeJob",
    "ContrastiveGenerateJob",
    "ExtractionJob",
    "GenerateJob",
    "RandomRJob",
    "RandomTJob",
    "RunContext",
    "RunSpec",
    "ScoreJob",
    "StoreLookupError",
    "content_free_examples",
    "contrastive_generate_match",
]
