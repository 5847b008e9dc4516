"""Engine: the judge's score log-probabilities for rendered prompts, batched, length-bucketed,
prefix-cached, sharded over devices, written chunk by chunk to a resumable store.

    from jaxjudge import engine, models, prompts, data

    judge = models.load()
    examples = data.load_summeval_subset()
    rendered = prompts.render_all(prompts.get_template("summeval", "coherence"), examples,
                                  prompts.ScoreScale(1, 5))
    out = engine.extract(judge, rendered, prompts.ScoreScale(1, 5), store="runs/coh-1-5")
    out.cand_logprobs  # [N, 5], log p(score | prompt) over the full vocabulary

`generate_scores` is the sampled-text baseline (greedy decoding, first number parsed),
`contrastive_generate_scores` the same with contrastive decoding against an assistant judge
(main minus lambda x assistant over the full vocabulary, with the adaptive plausibility
constraint), and `sequence_nll` the prompt log-perplexity used to rank random-number
paraphrases.
"""

from jaxjudge.engine.extract import (
    ARRAY_FIELDS,
    ENGINE_FORMAT,
    Extraction,
    GenerationRoomError,
    Placement,
    check_generation_room,
    extract,
    extraction_key,
    model_sha256,
    prefill_prefix,
    score_generate_rows,
    score_rows,
)
from jaxjudge.engine.generate import (
    contrastive_decode,
    contrastive_generate,
    contrastive_generate_scores,
    contrastive_token_scores,
    generate_scores,
    parse_replies,
    parse_score,
    sequence_nll,
)
from jaxjudge.engine.plan import (
    Batch,
    CandidatePlan,
    Chunk,
    bucket_length,
    candidate_plan,
    nll_token_span,
    plan_batches,
    plan_chunks,
    resolve_candidates,
    slot_bucket,
    tokenise,
)

__all__ = [
    "ARRAY_FIELDS",
    "ENGINE_FORMAT",
    "Batch",
    "CandidatePlan",
    "Chunk",
    "Extraction",
    "GenerationRoomError",
    "Placement",
    "bucket_length",
    "candidate_plan",
    "check_generation_room",
    "contrastive_decode",
    "contrastive_generate",
    "contrastive_generate_scores",
    "contrastive_token_scores",
    "extract",
    "extraction_key",
    "generate_scores",
    "model_sha256",
    "nll_token_span",
    "parse_replies",
    "parse_score",
    "plan_batches",
    "plan_chunks",
    "prefill_prefix",
    "resolve_candidates",
    "score_generate_rows",
    "score_rows",
    "sequence_nll",
    "slot_bucket",
    "tokenise",
]
