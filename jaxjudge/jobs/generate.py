"""Generation jobs: the judge's greedy reply parsed into a score, alone or contrasted with its
assistant's, written in chunks of `GENERATE_CHUNK_ROWS` prompts (a killed run resumes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from jaxjudge.engine import contrastive_generate_scores, generate_scores
from jaxjudge.jobs.base import ExtractionJob, RunContext, row_chunks
from jaxjudge.prompts import render_all

__all__ = ["ContrastiveGenerateJob", "GenerateJob", "contrastive_generate_match"]

_PARSED = {
    "example_ids": "[N] str",
    "parsed_scores": "[N] float (NaN = parse failure)",
    "texts": "[N] str, the replies",
}


def contrastive_generate_match(cfg: Any, judge: str) -> dict[str, Any]:
    """The key entries, beyond `ExtractionJob.store_match`, of a judge's contrastive generation
    store: the assistant's name and the config's fixed lambda, temperatures and plausibility alpha."""
    return {
        "assistant": cfg.assistant_of(judge),
        "lam": float(cfg.contrastive_generate_lam),
        "t_main": float(cfg.contrastive_generate_t_main),
        "t_asst": float(cfg.contrastive_generate_t_asst),
        "alpha": float(cfg.contrastive_generate_alpha),
    }


@dataclass(frozen=True)
class GenerateJob(ExtractionJob):
    """Greedy generation parsed into a number (`jaxjudge.engine.generate_scores`), or the replies
    its `jaxjudge.jobs.ScoreJob` decoded from its own prefill (the same store either way)."""

    role: ClassVar[str] = "generate"
    decodes: ClassVar[bool] = True  # contrastive generation too (a subclass)
    order: ClassVar[int] = 2
    arrays: ClassVar[Mapping[str, str]] = _PARSED
    what: ClassVar[str] = "parsed generations"

    def prompts(self, examples: Sequence[Any], *, chat: Any = None) -> list:
        return list(render_all(self.template(), examples, self.parsed_scale(), chat=chat).prompts)

    def read(self, arrays: Mapping[str, np.ndarray], ids: np.ndarray) -> dict[str, Any]:
        """``parsed`` `[N]` float32 scores (NaN where the reply did not parse)."""
        return {"parsed": self.need(arrays, "parsed_scores")[self.align(arrays, ids)]}

    def full_key(self, rc: RunContext) -> dict[str, Any]:
        return {**rc.key(self), "model_sha256": rc.judge.sha256, "max_new_tokens": rc.max_new_tokens}

    def rendered(self, rc: RunContext, context: int | None = None) -> list:
        """The prompts as the engine reads them: room left for the reply in ``context``."""
        return list(render_all(self.template(), rc.examples(self), self.parsed_scale(), chat=rc.chat,
                               tokenizer=rc.judge.tokenizer, max_tokens=(context or rc.context) - rc.max_new_tokens,
                               overflow=rc.overflow).prompts)

    def run(self, rc: RunContext) -> tuple[bool, int]:
        where, scale = self.folder(rc.root), self.parsed_scale()
        prompts = self.rendered(rc)

        def make(lo: int, hi: int) -> dict[str, np.ndarray]:
            if where in rc.replies:  # decoded in the score pass
                return {k: v[lo:hi] for k, v in rc.replies[where].items()}
            texts, parsed, _ = generate_scores(rc.judge, prompts[lo:hi], scale, max_new_tokens=rc.max_new_tokens,
                                               progress=rc.progress, overflow=rc.overflow)
            return {"example_ids": np.asarray([p.example_id for p in prompts[lo:hi]]),
                    "parsed_scores": np.asarray(parsed, np.float32), "texts": np.asarray(texts)}

        done = row_chunks(where, self.full_key(rc), len(prompts), make, rc.claim_lease, spmd=rc.spmd)
        rc.replies.pop(where, None)
        return done


@dataclass(frozen=True)
class ContrastiveGenerateJob(GenerateJob):
    """Greedy contrastive generation of the judge against its assistant in ``pairs``
    (`jaxjudge.engine.contrastive_generate_scores`, both models loaded; the config's fixed lambda,
    temperatures and alpha), parsed and chunked like `GenerateJob`; keyed also by the
    assistant, its sha256 and those settings. The job belongs to the judge."""

    role: ClassVar[str] = "contrastive_generate"
    order: ClassVar[int] = 3
    what: ClassVar[str] = "parsed contrastive generations"
    uses_assistant: ClassVar[bool] = True

    def key_extra(self, cfg: Any) -> dict[str, Any]:
        return contrastive_generate_match(cfg, self.model)

    def read(self, arrays: Mapping[str, np.ndarray], ids: np.ndarray) -> dict[str, Any]:
        """``parsed`` `[N]` float64 scores (NaN where the reply did not parse)."""
        return {"parsed": np.asarray(self.need(arrays, "parsed_scores"), np.float64)[self.align(arrays, ids)]}

    def applies(self, cfg: Any) -> bool:
        return cfg.assistant_of(self.model) is not None

    def companions(self, cfg: Any) -> tuple[str, ...]:
        return (cfg.assistant_of(self.model),)

    def run(self, rc: RunContext) -> tuple[bool, int]:
        match = contrastive_generate_match(rc.cfg, self.model)
        # The assistant's hash as `models.load` gives it, without loading it for a finished job.
        key = {**self.full_key(rc), "assistant_sha256": rc.assistant_sha256(match["assistant"])}
        scale = self.parsed_scale()
        rendered: list = []  # for the smaller context, once the assistant is loaded

        def make(lo: int, hi: int) -> dict[str, np.ndarray]:
            assistant = rc.load_assistant(match["assistant"])
            # Both judges read the same tokens, so the prompts fit the smaller context.
            context = min(rc.context, int(assistant.config.max_position_embeddings))
            if not rendered:
                rendered.extend(self.rendered(rc, context))
            prompts = rendered[lo:hi]
            texts, parsed, _ = contrastive_generate_scores(
                rc.judge, assistant, prompts, scale, rc.max_new_tokens, lam=match["lam"], t_main=match["t_main"],
                t_asst=match["t_asst"], alpha=match["alpha"], progress=rc.progress, overflow=rc.overflow,
                context_length=context)
            return {"example_ids": np.asarray([p.example_id for p in prompts]),
                    "parsed_scores": np.asarray(parsed, np.float32), "texts": np.asarray(texts)}

        return row_chunks(self.folder(rc.root), key, len(rc.examples(self)), make, rc.claim_lease, spmd=rc.spmd)
