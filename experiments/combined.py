"""Contrastive decoding and Deb-T together (neither paper combines them).

The judge's distribution is first made contrastive (main minus lambda x assistant, main-model
temperature t), then rectified by the Deb-T random-number prior of the combined judge: the
same contrastive combination applied to both models' random-number prompts (prefixed with the
task instruction), averaged over the Tp = 10 prompts of least perplexity under the main judge.
All three strengths (lambda in {0.01, 0.1, 0.5, 1}, t in {0.5, 1, 2, 3, 5}, the Deb-T lambda in
0.1 .. 1.0) are chosen together on the 10 SummEval development documents and reported on the
other 90, next to each part alone (vanilla, Deb-T, contrastive) with paired differences from
the vanilla main judge and, for the contrastive methods, from their matched baseline
``temperature`` (the main judge alone, its t chosen on the same dev documents).

Run:

    jaxjudge sweep experiments/combined.py           # extract + report
    jaxjudge extract experiments/combined.py
    jaxjudge report experiments/combined.py
    jaxjudge sweep experiments/combined.py:quick     # embedded subset, coherence

Arguments of ``get_config``: None, ``"quick"`` (embedded 4-document subset, coherence, dev =
one document: a smoke test, not a result).
"""

from jaxjudge.data import SUMMEVAL_SUBSET_DOC_IDS
from jaxjudge.experiment import ExperimentConfig, TaskSpec, pick_variant

from registry import QWEN_05B, QWEN_15B

BASE = dict(
    name="combined",
    description="Contrastive decoding followed by the Deb-T random-number correction, chosen jointly on dev.",
    models=(QWEN_15B, QWEN_05B),
    pairs=((QWEN_15B.name, QWEN_05B.name),),
    tasks=(TaskSpec("summeval", ("coherence", "consistency", "fluency", "relevance"), split="fixed_docs"),),
    scales=("0-4", "1-5", "2-6", "3-7"),
    methods=("vanilla", "deb_t", "temperature", "contrastive", "contrastive_deb_t"),
    temperatures=(0.2, 1.0),
    greedy=True,
    deb_tp=(10,),
    lambdas_extended=None,
    select_metric="spearman",
)

# The argument of `get_config` -> the fields it changes in BASE.
VARIANTS = {
    None: {},
    "quick": dict(
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="fixed_docs",
                        dev_docs=(SUMMEVAL_SUBSET_DOC_IDS[0],)),),
    ),
}


def get_config(arg: str | None = None) -> ExperimentConfig:
    return ExperimentConfig(**{**BASE, **pick_variant("combined", arg, VARIANTS)})
