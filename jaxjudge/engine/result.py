"""`Extraction`: what the engine returns per example, and the arrays a store keeps of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from jaxjudge.prompts import ScoreCandidates

__all__ = ["ARRAY_FIELDS", "Extraction"]

# Per-example arrays of an Extraction, in the order they are documented.
ARRAY_FIELDS = (
    "cand_logprobs",
    "log_normaliser",
    "greedy_ids",
    "valid",
    "topk_ids",
    "topk_logprobs",
    "n_prompt_tokens",
    "truncated",
    "extension_logprob",
)


@dataclass(frozen=True)
class Extraction:
    """What the engine returns per example (rows in the order of the prompts given).

    Attributes:
        example_ids: ``[N]`` example ids.
        cand_logprobs: ``[N, K]`` float32, log p(candidate | prompt + extension), normalised
            over the full vocabulary (multi-token candidates: sum of teacher-forced token
            log-probabilities).
        log_normaliser: ``[N]`` float32, logsumexp of the logits at the answer position.
        greedy_ids: ``[N]`` int32, full-vocabulary argmax at the answer position.
        valid: ``[N]`` bool, whether the greedy token is the first token of a candidate.
        topk_ids: ``[N, k]`` int32, the k most likely tokens at the answer position.
        topk_logprobs: ``[N, k]`` float32, their log-probabilities.
        n_prompt_tokens: ``[N]`` int32, tokens of the prompt (after any truncation; without the
            extension).
        truncated: ``[N]`` bool, whether the prompt's source text was cut to fit the context.
        extension_logprob: ``[N]`` float32, log p(extension | prompt) (0 without an
            extension): add it to ``cand_logprobs`` for the probability of the whole answer
            text ``separator + label``.
        candidates: the `ScoreCandidates` the columns of ``cand_logprobs`` refer to.
        computed_chunks: chunks computed by this call (the others came from the store).
        prompt_nll: ``[N]`` float32, each prompt's mean per-token negative log-likelihood
            (its log-perplexity), when `extract` was asked for it (``prompt_nll=True``), else
            None. The mean runs over every token after the first or, for a prompt with an
            ``nll_span``, over the tokens of that span only (each conditioned on everything
            before it, see `jaxjudge.engine.plan.nll_token_span`); NaN when no token counts.
        generated_ids: ``[N, G]`` int32, the greedy reply to each prompt when `extract` was
            asked for one (``generate_tokens=G``), else None; padding after a row's end.
        generated_lengths: ``[N]`` int32, the tokens of each reply (up to and including the
            first end-of-sequence token); -1 for rows this call read from the store instead
            of computing them (the store keeps the scores, not the replies).
        truncated_tokens: ``[N]`` int32, how many tokens of each prompt's source text were cut
            to fit the context (by `render_all` or by the engine; 0 where nothing was cut), or
            None when unknown (rows rebuilt from arrays that do not carry the count).
    """

    example_ids: list[str]
    cand_logprobs: np.ndarray
    log_normaliser: np.ndarray
    greedy_ids: np.ndarray
    valid: np.ndarray
    topk_ids: np.ndarray
    topk_logprobs: np.ndarray
    n_prompt_tokens: np.ndarray
    truncated: np.ndarray
    extension_logprob: np.ndarray
    candidates: ScoreCandidates | None = None
    computed_chunks: tuple[int, ...] = ()
    prompt_nll: np.ndarray | None = None
    generated_ids: np.ndarray | None = None
    generated_lengths: np.ndarray | None = None
    truncated_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.example_ids)

    @property
    def values(self) -> np.ndarray:
        """``[K]`` float32, the score of each candidate column."""
        if self.candidates is None or self.candidates.scale is None:
            raise ValueError("this Extraction carries no score scale (no candidates, or a label set)")
        return self.candidates.scale.values

    @property
    def validity_rate(self) -> float:
        """Share of examples whose greedy token starts a score candidate."""
        return float(np.mean(self.valid)) if len(self) else float("nan")

    def arrays(self) -> dict[str, np.ndarray]:
        """All per-example arrays, ``example_ids`` as a unicode array (the store's format)."""
        out = {"example_ids": np.asarray(self.example_ids, dtype=str)}
        out.update({name: getattr(self, name) for name in ARRAY_FIELDS})
        for name in ("prompt_nll", "truncated_tokens"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], candidates: ScoreCandidates | None = None,
                    computed_chunks: Sequence[int] = ()) -> "Extraction":
        """Rebuilds an Extraction from `arrays` output (e.g. `Store.load`)."""
        missing = [f for f in ("example_ids", *ARRAY_FIELDS) if f not in arrays]
        if missing:
            raise KeyError(f"arrays lack {missing}")
        opt = {f: None if arrays.get(f) is None else np.asarray(arrays[f]) for f in ("prompt_nll", "truncated_tokens")}
        return cls(example_ids=[str(x) for x in arrays["example_ids"]],
                   **{f: np.asarray(arrays[f]) for f in ARRAY_FIELDS},
                   candidates=candidates, computed_chunks=tuple(computed_chunks), **opt)

    def take(self, index: Sequence[int] | np.ndarray) -> "Extraction":
        """The rows ``index`` (in that order)."""
        index = np.asarray(index, np.int64)
        opt = {f: None if getattr(self, f) is None else getattr(self, f)[index]
               for f in ("prompt_nll", "generated_ids", "generated_lengths", "truncated_tokens")}
        return dataclasses.replace(self, example_ids=[self.example_ids[i] for i in index],
                                   **{f: getattr(self, f)[index] for f in ARRAY_FIELDS}, **opt)
