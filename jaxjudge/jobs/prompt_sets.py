"""Jobs over fixed prompt sets, one chunk each: the random-number requests (Deb-R, Deb-T) and the
content-free inputs (contextual calibration)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from jaxjudge.data import Example
from jaxjudge.engine import extract
from jaxjudge.jobs.base import ExtractionJob, RunContext, one_chunk
from jaxjudge.prompts import random_number_prompts, render_all

__all__ = ["CONTENT_FREE", "RANDOM_NLL_SPAN", "ContentFreeJob", "RandomRJob", "RandomTJob", "content_free_examples"]

# What the NLL of a random-number store covers: the request's own tokens (`RenderedPrompt.nll_span`).
RANDOM_NLL_SPAN = "request"

# Content-free fillers for contextual calibration (Zhao et al. use "N/A", "[MASK]" and "").
# An empty text is refused by the data layer, so a lone space stands in for it.
CONTENT_FREE = ("N/A", "[MASK]", " ")


def content_free_examples(template: Any) -> list:
    """One example per `CONTENT_FREE` filler, every placeholder of ``template`` filled with it."""
    names = template.placeholders("all")
    return [Example(id=f"content_free/{i}", group=f"content_free/{i}", fields={n: text for n in names}, scores={})
            for i, text in enumerate(CONTENT_FREE)]


class _OneChunk(ExtractionJob):
    """A prompt set small enough for one chunk, keyed also by the model file's sha256."""

    prompt_set: ClassVar[bool] = True

    def run(self, rc: RunContext) -> tuple[bool, int]:
        prompts = self.prompts(rc.examples(self), chat=rc.chat)
        return one_chunk(self.folder(rc.root), {**rc.key(self), "model_sha256": rc.judge.sha256}, len(prompts),
                         lambda: self.extract(rc, prompts), rc.claim_lease, spmd=rc.spmd)

    def extract(self, rc: RunContext, prompts: list) -> dict[str, np.ndarray]:
        ex = extract(rc.judge, prompts, self.parsed_scale(), rc.engine, progress=False, local=True)
        return {"example_ids": np.asarray(ex.example_ids), "cand_logprobs": ex.cand_logprobs}


@dataclass(frozen=True)
class RandomRJob(_OneChunk):
    """The 100 random-number paraphrases, raw (Deb-R): candidate log-probs and the mean NLL of
    each paraphrase's own tokens, in one pass; keyed with ``nll_span: "request"``. Task-free."""

    role: ClassVar[str] = "random_r"
    per_task: ClassVar[bool] = False
    order: ClassVar[int] = 0
    arrays: ClassVar[Mapping[str, str]] = {
        "example_ids": "[P] str",
        "cand_logprobs": "[P, K] candidate log-probabilities",
        "sequence_nll": "[P] mean NLL of the request's own tokens",
    }
    what: ClassVar[str] = "random-number arrays"

    def store_match(self) -> dict[str, Any]:
        return {**super().store_match(), "nll_span": RANDOM_NLL_SPAN}

    def prompts(self, examples: Sequence[Any], *, chat: Any = None) -> list:
        return random_number_prompts(self.parsed_scale(), chat=chat, task_template=self.template())

    def extract(self, rc: RunContext, prompts: list) -> dict[str, np.ndarray]:
        # One pass gives both the candidate log-probs and each prompt's NLL.
        ex = extract(rc.judge, prompts, self.parsed_scale(), rc.engine, progress=False, prompt_nll=True,
                     local=True)
        return {"example_ids": np.asarray(ex.example_ids), "cand_logprobs": ex.cand_logprobs,
                "sequence_nll": ex.prompt_nll}

    def read(self, arrays: Mapping[str, np.ndarray], ids: np.ndarray) -> dict[str, Any]:
        """``logprobs`` `[P, K]` and ``nll`` `[P]` (not aligned with the data: prompts, not examples)."""
        return {"logprobs": self.need(arrays, "cand_logprobs"), "nll": self.need(arrays, "sequence_nll")}


@dataclass(frozen=True)
class RandomTJob(RandomRJob):
    """The random-number paraphrases after the task's instruction (Deb-T)."""

    role: ClassVar[str] = "random_t"
    per_task: ClassVar[bool] = True
    order: ClassVar[int] = 5


@dataclass(frozen=True)
class ContentFreeJob(_OneChunk):
    """The task template filled with content-free strings (`CONTENT_FREE`)."""

    role: ClassVar[str] = "content_free"
    order: ClassVar[int] = 4
    arrays: ClassVar[Mapping[str, str]] = {"example_ids": "[M] str", "cand_logprobs": "[M, K]"}
    what: ClassVar[str] = "content-free arrays"

    def prompts(self, examples: Sequence[Any], *, chat: Any = None) -> list:
        template = self.template()
        return list(render_all(template, content_free_examples(template), self.parsed_scale(), chat=chat).prompts)

    def read(self, arrays: Mapping[str, np.ndarray], ids: np.ndarray) -> dict[str, Any]:
        """``logprobs`` `[M, K]`, one row per filler."""
        return {"logprobs": self.need(arrays, "cand_logprobs")}
