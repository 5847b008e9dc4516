"""Score-range bias: the same judge asked for scores on 0-4, 1-5, 2-6 and 3-7.

SummEval (coherence, consistency, fluency, relevance) and STS-B test, read two ways: the
greedy generation parsed into a number (up to 24 new tokens; parse failures counted and
reported as the validity rate) and the judge's candidate distribution (expected score at
temperature 1 and 0.2, greedy candidate). Pearson, Spearman and Kendall per range, pooled and
per document, with grouped bootstrap 95% intervals. The predicted-score distribution per range
is drawn in ``figures/score_distribution_*.png``.

Splits: there is nothing to tune, so the split only fixes the reported side. SummEval is
reported on the 90 test documents of the contrastive-decoding paper's split (its 10 dev
documents, ``dev_doc_ids.txt``, are left out so the numbers line up with
``experiments/contrastive.py``); STS-B on its test split.

Run (extract once, then report from the store as often as needed, no forward pass):

    jaxjudge sweep experiments/score_range_bias.py            # extract + report
    jaxjudge extract experiments/score_range_bias.py
    jaxjudge report experiments/score_range_bias.py
    jaxjudge sweep experiments/score_range_bias.py:qwen15     # the 1.5B judge too
    jaxjudge sweep experiments/score_range_bias.py:quick      # SmolLM2, embedded subset
    jaxjudge sweep experiments/score_range_bias.py:cpu        # committed CPU run: SummEval subset
    jaxjudge sweep experiments/score_range_bias.py:cpu_stsb   # committed CPU run: STS-B subset
    jaxjudge sweep experiments/score_range_bias.py:stsb       # committed: STS-B, whole test split
    jaxjudge sweep experiments/score_range_bias.py:semrel     # committed: SemRel2024 English dev
    jaxjudge sweep experiments/score_range_bias.py:summeval   # committed: SummEval coherence, 90 test documents
    jaxjudge sweep experiments/score_range_bias.py:gemma3     # Gemma-3-270M (base), raw prompts
    jaxjudge sweep experiments/score_range_bias.py:stsb_smollm2   # committed: SmolLM2 on the STS-B test split
    jaxjudge sweep experiments/score_range_bias.py:stsb_gemma3    # committed: Gemma-3-270M on the STS-B test split
    jaxjudge sweep experiments/score_range_bias.py:stsb_qwen15    # committed: Qwen2.5-Coder 1.5B and 0.5B, 500 STS-B test pairs

Arguments of ``get_config``: None (Qwen2.5-Coder 0.5B), ``"qwen15"`` (0.5B and 1.5B),
``"smollm2"`` (the embedded default judge on the full data), ``"quick"`` (SmolLM2 on the
embedded 4-document SummEval subset, coherence only: a smoke test, not a result), ``"cpu"``
(Qwen2.5-Coder 0.5B on the documented CPU subset ``CPU_SUMMEVAL_SUBSET``, coherence, reported
on its 3 test documents: the committed ``results/score_range_bias/cpu`` run), ``"cpu_stsb"``
(the same judge on ``CPU_STSB_SUBSET``, reported on its 120 test pairs, read from the score
distribution only: greedy generation over 160 prompts x 4 ranges did not fit the run's CPU
budget, so the greedy reading there is the greedy candidate; the committed
``results/score_range_bias/cpu_stsb`` run), ``"stsb"`` (the same judge on the whole STS-B test
split, 1,379 pairs, read from the score distribution; it shares its committed stores in
``results/stores/stsb_qwen05`` with ``random_number_debias.py:stsb``), ``"semrel"`` (the same
judge on SemRel2024 English, reported on its dev split, 250 pairs; stores shared with
``random_number_debias.py:semrel``), ``"summeval"`` (the same judge on SummEval coherence, all
100 documents extracted, reported on the 90 test documents, with the greedy generation parsed;
stores in ``results/stores/summeval_qwen05``, shared with ``random_number_debias.py:summeval``),
``"gemma3"`` (Gemma-3-270M, a base model without a chat template, prompted completion-style on
the full data; not run yet), ``"stsb_smollm2"`` and ``"stsb_gemma3"`` (SmolLM2-135M-Instruct, and
Gemma-3-270M with raw prompts, on the same STS-B data as ``"stsb"``: the judge families side by
side; stores in ``results/stores/stsb_smollm2`` and ``results/stores/stsb_gemma3``), and
``"stsb_qwen15"`` (Qwen2.5-Coder 1.5B beside the 0.5B on the seeded 500-pair sample of the STS-B
test split that ``contrastive.py:stsb`` extracts, ``CONTRASTIVE_STSB``: the 1.5B reads about
45 prompt tokens a second on two cores, so the whole test split did not fit; both judges are
read from that run's stores in ``results/stores/contrastive_stsb``).
"""

from jaxjudge.experiment import Endpoint, ExperimentConfig, TaskSpec, pick_variant

from registry import (
    CPU_RUN_CHANGES,
    CPU_STSB_SUBSET,
    CPU_SUMMEVAL_DEV_DOCS,
    CPU_SUMMEVAL_SUBSET,
    CONTRASTIVE_STSB,
    GEMMA3_270M,
    QWEN_05B,
    QWEN_15B,
    SEMREL_SELECTION,
    SMOLLM2,
    STSB_SELECTION,
)


BASE = dict(
    name="score_range_bias",
    description="Score-range bias of LLM judges: one judge, four score ranges, greedy generation vs the score distribution.",
    models=(QWEN_05B,),
    tasks=(
        TaskSpec("summeval", ("coherence", "consistency", "fluency", "relevance"), split="fixed_docs"),
        TaskSpec("stsb", ("similarity",), split="original"),
    ),
    scales=("0-4", "1-5", "2-6", "3-7"),
    methods=("vanilla", "generate"),
    temperatures=(1.0, 0.2),
    greedy=True,
    generation_max_new_tokens=24,
    ci_metrics=None,
    run=None,
    changes=(),
    # The bias itself: how far the vanilla judge's expected score (temperature 1) moves across
    # the four ranges (the spread: the standard deviation of its Spearman correlation's true
    # values over the ranges, the noise taken out; until 2026-12-06 it was max - min, which noise
    # alone pushes up). A spread is never below 0, so its interval describes the size of the bias; its lower
    # bound reaches 0 when the data cannot tell the ranges apart.
    primary=Endpoint(method="vanilla", versus=None, statistic="spread", score="expected@1"),
    prompt_style="chat",
    store_root="stores",
)

# A base model: the prompt is the completion's beginning, no chat template.
RAW = dict(prompt_style="raw")

# The pair tasks read from the score distribution only, with intervals on every metric but
# Kendall's tau (O(N^2) per resample: on 1,379 STS-B pairs its point estimate only).
DISTRIBUTION_ONLY = dict(methods=("vanilla",), ci_metrics=("pearson", "spearman", "mse", "sdd", "validity"))
STSB_SELECTED = (TaskSpec("stsb", ("similarity",), split="original", subset=STSB_SELECTION),)

# The argument of `get_config` -> the fields it changes in BASE.
VARIANTS = {
    None: {},
    "qwen15": dict(models=(QWEN_05B, QWEN_15B)),
    "smollm2": dict(models=(SMOLLM2,)),
    "quick": dict(
        models=(SMOLLM2,),
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=4),),
    ),
    "cpu": dict(
        tasks=(TaskSpec("summeval", ("coherence",), split="fixed_docs", dev_docs=CPU_SUMMEVAL_DEV_DOCS,
                        subset=CPU_SUMMEVAL_SUBSET),),
        run="cpu",
        changes=CPU_RUN_CHANGES,
        store_root="results/stores/cpu_qwen",
    ),
    "cpu_stsb": dict(
        tasks=(TaskSpec("stsb", ("similarity",), split="original", subset=CPU_STSB_SUBSET),),
        methods=("vanilla",),
        run="cpu_stsb",
        changes=CPU_RUN_CHANGES,
        store_root="results/stores/cpu_qwen",
    ),
    "stsb": dict(DISTRIBUTION_ONLY, tasks=STSB_SELECTED, run="stsb", store_root="results/stores/stsb_qwen05"),
    "semrel": dict(
        DISTRIBUTION_ONLY,
        tasks=(TaskSpec("semrel", ("relatedness",), split="original", subset=SEMREL_SELECTION),),
        run="semrel",
        store_root="results/stores/semrel_qwen05",
    ),
    "summeval": dict(
        tasks=(TaskSpec("summeval", ("coherence",), split="fixed_docs"),),
        run="summeval",
        store_root="results/stores/summeval_qwen05",
    ),
    "gemma3": dict(RAW, models=(GEMMA3_270M,)),
    "stsb_smollm2": dict(
        DISTRIBUTION_ONLY, models=(SMOLLM2,), tasks=STSB_SELECTED, run="stsb_smollm2",
        store_root="results/stores/stsb_smollm2",
    ),
    "stsb_gemma3": dict(
        DISTRIBUTION_ONLY, **RAW, models=(GEMMA3_270M,), tasks=STSB_SELECTED, run="stsb_gemma3",
        store_root="results/stores/stsb_gemma3",
    ),
    "stsb_qwen15": dict(
        DISTRIBUTION_ONLY,
        models=(QWEN_15B, QWEN_05B),
        tasks=(TaskSpec("stsb", ("similarity",), split="original", subset=CONTRASTIVE_STSB),),
        run="stsb_qwen15",
        store_root="results/stores/contrastive_stsb",
    ),
}


def get_config(arg: str | None = None) -> ExperimentConfig:
    return ExperimentConfig(**{**BASE, **pick_variant("score_range_bias", arg, VARIANTS)})
