"""The main job: the embedded SmolLM2 judge on the bundled SummEval subset, four ranges.

Every method that needs one model: the vanilla judge (expected score at temperature 0.2 and 1,
greedy candidate), the parsed greedy generation, Deb-R and Deb-T (Tp = 10 and 100 least-
perplexity random-number prompts, lambda 0.1 .. 1.0), contextual, batch and distribution
calibration. Data: the 4 shortest SummEval articles x 16 summaries shipped in the package
(64 examples; see ``jaxjudge/resources/summeval_subset/README.md``), chosen so the demo runs on a
laptop CPU. Splits: 4-fold cross-validation grouped by document (dev = one document, test = the
other three). With 4 documents the intervals are wide: this shows the pipeline, it is not a
result.

Run:

    jaxjudge demo                          # this config
    jaxjudge sweep experiments/demo.py     # the same through the generic path
    jaxjudge sweep experiments/demo.py:ci  # coherence, ranges 1-5 and 3-7 (CI smoke test)
    jaxjudge sweep experiments/demo.py:all # all four SummEval aspects (about four times longer)

The default judges coherence only, so that the main job stays under ten minutes on a
2-core CPU; ``:all`` adds consistency, fluency and relevance.
"""

from jaxjudge.experiment import ExperimentConfig, TaskSpec

from registry import SMOLLM2


def get_config(arg: str | None = None) -> ExperimentConfig:
    if arg not in (None, "ci", "all"):
        raise ValueError(f"demo: unknown argument {arg!r}; use 'ci' or 'all'")
    aspects = ("coherence", "consistency", "fluency", "relevance") if arg == "all" else ("coherence",)
    return ExperimentConfig(
        name="demo",
        description="SmolLM2-135M on the bundled SummEval subset: score-range bias and every one-model debiasing method.",
        models=(SMOLLM2,),
        tasks=(TaskSpec("summeval", aspects, data="embedded", split="kfold", n_folds=4),),
        scales=("1-5", "3-7") if arg == "ci" else ("0-4", "1-5", "2-6", "3-7"),
        methods=("vanilla", "generate", "deb_r", "deb_t", "contextual", "batch", "distribution"),
        temperatures=(0.2, 1.0),
        greedy=True,
        deb_tp=(10, 100),
        lambdas_extended=None,
        n_boot=1000,
    )
