"""Engine: the judge's score log-probabilities for rendered prompts, batched, length-bucketed,
prefix-cached, sharded over devices, written chunk by chunk to a resumable store.

    from jaxjudge import engine, models, prompts, data

    judge = models.load()
    examples = data.load_summeval_subset()
    rendered = prompts.render_all(prompts.get_template("summeval", "coherence"), examples,
                                  prompts.ScoreScale(1, 5))
    out = engine.extract(judge, rendered, prompts.ScoreScale(1, 5), store="runs/coh-1-5")
    out.cand_logprobs  # [N, 5], log p(score | prompt) over the full vocabulary

The candidates may be any label set: ``engine.extract(judge, pairwise_prompts, ("A", "B"))``
reads a pairwise verdict. `generate_scores` is the sampled-text baseline (greedy decoding,
first number parsed), `contrastive_generate_scores` the same with contrastive decoding against
an assistant judge (main minus lambda x assistant over the full vocabulary, with the adaptive
plausibility constraint), and `sequence_nll` the prompt log-perplexity used to rank
random-number paraphrases. All of them walk their prompts with one loop
(`jaxjudge.engine.runner`); host-side planning is in `jaxjudge.engine.plan` and
`jaxjudge.engine.tokens`. Their device work goes through named step objects
(`jaxjudge.engine.step`: the prefill, the row reads, the decoding loop, ...), the same objects
`jaxjudge aot` compiles for a TPU slice.
"""

from jaxjudge.engine import plan, runner, step, tokens
from jaxjudge.engine.extract import GenerationRoomError, extract
from jaxjudge.engine.result import Extraction
from jaxjudge.engine.generate import (
    contrastive_generate,
    contrastive_generate_scores,
    generate_scores,
    parse_replies,
    parse_score,
)
from jaxjudge.engine.store_key import extraction_key
from jaxjudge.engine.options import EngineOptions
from jaxjudge.engine.nll import sequence_nll

__all__ = [
    "EngineOptions",
    "Extraction",
    "GenerationRoomError",
    "contrastive_generate",
    "contrastive_generate_scores",
    "extract",
    "extraction_key",
    "generate_scores",
    "parse_replies",
    "parse_score",
    "plan",
    "runner",
    "sequence_nll",
    "step",
    "tokens",
]
