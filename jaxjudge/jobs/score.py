"""The score job: candidate log-probabilities of a task's examples, the input of every method."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from jaxjudge.engine import GenerationRoomError, extract, parse_replies
from jaxjudge.jobs.base import ExtractionJob, RunContext, complete
from jaxjudge.prompts import render_all

__all__ = ["ScoreJob"]


@dataclass(frozen=True)
class ScoreJob(ExtractionJob):
    """The task template over the task's examples -> `jaxjudge.engine.extract`, chunked into the
    store as chunks finish (a killed run resumes).

    When the cell's `jaxjudge.jobs.GenerateJob` runs in the same call, is not finished, has
    single-token candidates and renders the same prompts, its replies are decoded from this
    pass's own prefill (``extract(..., generate_tokens=G)``) and handed to it through
    ``RunContext.replies``; both ways give the same store.
    """

    role: ClassVar[str] = "score"
    order: ClassVar[int] = 1
    arrays: ClassVar[Mapping[str, str]] = {
        "example_ids": "[N] str",
        "cand_logprobs": "[N, K] candidate log-probabilities",
        "valid": "[N] bool (optional)",
        "truncated": "[N] bool (optional)",
        "truncated_tokens": "[N] int (optional)",
    }
    what: ClassVar[str] = "score arrays"

    def prompts(self, examples: Sequence[Any], *, chat: Any = None) -> list:
        return list(render_all(self.template(), examples, self.parsed_scale(), chat=chat).prompts)

    def read(self, arrays: Mapping[str, np.ndarray], ids: np.ndarray) -> dict[str, Any]:
        """``logprobs`` `[N, K]` and the optional ``valid``, ``truncated``, ``truncated_tokens``."""
        rows = self.align(arrays, ids)
        out = {"logprobs": self.need(arrays, "cand_logprobs")[rows]}
        for name in ("valid", "truncated", "truncated_tokens"):
            out[name] = arrays[name][rows] if name in arrays else None
        return out

    def run(self, rc: RunContext) -> tuple[bool, int]:
        from jaxjudge.jobs.generate import GenerateJob  # its sibling, whose replies this pass can decode

        scale = self.parsed_scale()
        rendered = render_all(self.template(), rc.examples(self), scale, chat=rc.chat, tokenizer=rc.judge.tokenizer,
                              max_tokens=rc.context, overflow=rc.overflow, reserve_tokens=4)
        where, key = self.folder(rc.root), rc.key(self)
        gen = GenerateJob(self.model, self.task, self.aspect, self.scale, self.given_template)
        out = None
        if gen in rc.jobs:
            gen_where = gen.folder(rc.root)
            if not complete(gen_where, gen.full_key(rc)) and gen.rendered(rc) == list(rendered.prompts):
                try:
                    out = extract(rc.judge, rendered.prompts, scale, rc.engine, store=where, key=key,
                                  progress=rc.progress, generate_tokens=rc.max_new_tokens, claim_lease=rc.claim_lease,
                                  read_back=False)
                except GenerationRoomError:
                    out = None
                # The replies serve only when this pass computed every row (none came from the store).
                if out is not None and len(out) == len(rendered.prompts) and bool(np.all(out.generated_lengths >= 0)):
                    texts, parsed, _ = parse_replies(
                        rc.judge, [r[:k] for r, k in zip(out.generated_ids, out.generated_lengths)], scale)
                    rc.replies[gen_where] = {"example_ids": np.asarray(out.example_ids),
                                             "parsed_scores": np.asarray(parsed, np.float32),
                                             "texts": np.asarray(texts)}
        if out is None:
            out = extract(rc.judge, rendered.prompts, scale, rc.engine, store=where, key=key, progress=rc.progress,
                          claim_lease=rc.claim_lease, read_back=False)
        # The store is the result: no chunk is read back here (the report reads what it needs).
        return bool(out.computed_chunks), len(rendered.prompts)
