"""Contrastive decoding against score-range bias: a large judge minus a small one.

Main judge Qwen2.5-Coder 1.5B, assistant Qwen2.5-Coder 0.5B (one tokenizer; any pair by
config). The contrastive candidate distribution is
``log_softmax(log_softmax(main / t) - lambda * log_softmax(assistant))`` over the score
candidates, the temperature dividing the main model's logits as in the paper's public code.
The grid lambda in {0.01, 0.1, 0.5, 1} x t in {0.5, 1, 2, 3, 5} (the committed ``stsb``,
``semrel`` and ``summeval`` runs widen it to lambda up to 5 and t from 0.25 to 100, see ``WIDE``, and
the ``stsb`` and ``semrel`` runs further to lambda up to 20 and t from 0.05, ``PAIR_GRIDS``; argument ``"fine"`` adds
lambda 0..1 step 0.05 x t 0.5..5 step 0.25 as ``contrastive_fine``) is searched on the 10
development documents of SummEval (``dev_doc_ids.txt``) and reported on the other 90, per
range 0-4, 1-5, 2-6, 3-7 and aspect. Reported: Spearman (pooled and per document), Pearson,
Kendall with grouped bootstrap 95% intervals; the difference from the main model alone (Δ,
paired interval) and from its matched baseline ``temperature`` (lambda = 0: the main judge
alone with its temperature t chosen over the same grid on the same dev data, so that the
difference is the assistant's effect and not a change of temperature); the greedy generation of the main model (parsed, its validity rate is the
parse rate) for the relative improvement over greedy decoding, and beside it the contrastive
greedy generation (``contrastive_generate``: each token decoded from main minus lambda x
assistant over the full vocabulary among the tokens the main model finds plausible, lambda
0.5, t 1, alpha 0.1, fixed; parsed the same way), whose parse rate shows what contrastive
decoding does to the validity of generated answers.

Run:

    jaxjudge sweep experiments/contrastive.py              # extract + report
    jaxjudge extract experiments/contrastive.py
    jaxjudge report experiments/contrastive.py
    jaxjudge sweep experiments/contrastive.py:fine         # adds the finer grid
    jaxjudge sweep experiments/contrastive.py:quick        # embedded subset, coherence
    jaxjudge sweep experiments/contrastive.py:cpu          # the committed CPU subset run

Arguments of ``get_config``: None, ``"fine"``, ``"quick"`` (the same pair on the embedded
4-document SummEval subset, coherence only, dev = one document: a smoke test, not a result),
``"cpu"`` (coherence on ``CPU_SUMMEVAL_SUBSET``: selection on its 3 dev documents, report on
its 3 test documents; without the 1.5B greedy generations, plain and contrastive, which did
not fit the session's CPU time: the greedy score there is the main judge's greedy candidate.
The committed ``results/contrastive/cpu`` run), ``"stsb"`` (STS-B similarity: selection on a
seeded 200-pair sample of dev, report on a seeded 500-pair sample of test, ``CONTRASTIVE_STSB``)
and ``"semrel"`` (SemRel2024 English relatedness: selection on a seeded sample of whole train
groups, at most 300 pairs, report on all 250 dev pairs, ``CONTRASTIVE_SEMREL``). These two add
Deb-T and contrastive + Deb-T chosen jointly (as ``experiments/combined.py``), with stores in
``results/stores/contrastive_stsb`` and ``results/stores/contrastive_semrel``. ``"stsb"`` also
has the two greedy generations, the main judge's and the contrastive one (on all 700 pairs
of both samples; read on the 500 test pairs): their parse rates test whether contrastive
decoding removes parse failures. ``"semrel"`` reads the score distributions only (the 1.5B
judge's generations did not fit the CPU budget a second time). ``"summeval"`` is the paper's own
protocol on SummEval coherence (all 100 documents, selection on the 10 development documents,
report on the other 90; vanilla, ``temperature`` and ``contrastive`` on the wide grids), with
stores in ``results/stores/summeval_qwen05``, beside the 0.5B judge's of
``random_number_debias.py:summeval``.

    jaxjudge extract experiments/contrastive.py:stsb
    jaxjudge report experiments/contrastive.py:stsb

``"stsb_confirm"`` and ``"semrel_confirm"`` confirm the pair tasks' primary endpoint (contrastive
− ``temperature``, mean over ranges, expected score at T = 1, with a smallest effect of interest
of 0.02 declared with it) on rows no contrastive run has scored: the 879 STS-B test pairs
outside the 500-pair sample (``CONFIRM_STSB``), and a seeded sample of at most 500 SemRel train
pairs from the groups outside the 300-pair selection sample (``CONFIRM_SEMREL``), selection on
the exploratory runs' own dev data. Vanilla, ``temperature`` and ``contrastive`` only, on the
wide grids; stores in ``results/stores/contrastive_stsb_confirm`` and ``..._semrel_confirm``,
whose ``registrations/`` folder holds the analysis plan as `jaxjudge extract` recorded it
before the first forward pass.

    jaxjudge extract experiments/contrastive.py:stsb_confirm
    jaxjudge report experiments/contrastive.py:stsb_confirm

``"mechanism_stsb"`` and ``"mechanism_semrel"`` read the exploratory runs' stores, added after
those runs' results had been read: three controls for what contrastive decoding does, each with
as many tuned values as contrastive decoding on the same grid, chosen the same way on the same
dev data. ``linear_mix`` subtracts the assistant at the level of the score, the main judge's
expected score minus ``w`` times the assistant's (`jaxjudge.debias.linear_mix`; ``w`` over the
lambda values, ``t_main`` over the temperatures); ``contrastive_prior`` replaces the assistant by
the main judge's own content-free prior (the 1.5B judge's content-free jobs); ``contrastive_other``
by SmolLM2-135M, a judge of another family (``control_pairs``; its score jobs on the same rows).
Those two needed extraction (``jaxjudge extract``, about 8 minutes per data set here). Their
primary is contrastive − ``linear_mix`` (mean over ranges, expected score at T = 1, selection
redone in every resample, with the confirmatory runs' smallest effect of interest, 0.02);
``temperature`` is beside all.

    jaxjudge extract experiments/contrastive.py:mechanism_stsb
    jaxjudge report experiments/contrastive.py:mechanism_stsb

``"stsb_confirm2"`` and ``"semrel_confirm2"`` are the second confirmation, registered together
before extraction (issue 56): selection on the same rows as the first, report on pairs no
contrastive run has scored and sharing no sentence with one (``confirm2_plan.py``: 800 STS-B
dev pairs, 800 SemRel train pairs). Registered endpoints, each with the margin 0.02: the
primary (contrastive − ``temperature``), and three secondary ones: contrastive + Deb-T − Deb-T
with tuned temperature (``contrastive_deb_t_tp10`` − ``deb_t_temperature_tp10``, so the
``random_t`` jobs are extracted), contrastive − ``linear_mix``, and contrastive − ``ensemble``
(the least-squares fit of the human score on both judges' expected scores per range, on dev).
Holm: the primary over the two data sets, the secondary endpoints over 3 x 2. The power analysis
(``power_analysis.py``) is part of the registered plan (``ExperimentConfig.confirmation``).

    jaxjudge extract experiments/contrastive.py:stsb_confirm2
    jaxjudge report experiments/contrastive.py:stsb_confirm2
"""

from confirm2_plan import confirm2_subset, confirmation
from jaxjudge.data import SUMMEVAL_SUBSET_DOC_IDS
from jaxjudge.experiment import Endpoint, ExperimentConfig, TaskSpec, pick_variant
from registry import (
    CONFIRM_SEMREL,
    CONFIRM_STSB,
    CONTRASTIVE_SEMREL,
    CONTRASTIVE_STSB,
    CPU_RUN_CHANGES,
    CPU_SUMMEVAL_DEV_DOCS,
    CPU_SUMMEVAL_SUBSET,
    QWEN_05B,
    QWEN_15B,
    SMOLLM2,
)

# The primary endpoint of the exploratory variants (not registered: it was written here on 12-04,
# after the STS-B and SemRel runs' per-range contrastive − temperature differences had been
# committed on 12-03, so for those two runs it is post hoc; only the SummEval run was extracted
# after it existed, also without a record): the contrastive
# effect net of the temperature it also tunes (its difference from the matched baseline
# `temperature`), averaged over the four ranges, on the expected score at temperature 1 (the
# probability-weighted score of the contrastive-decoding paper). Everything else is secondary.
PRIMARY = Endpoint(method="contrastive", versus="temperature", statistic="mean", score="expected@1")

# The confirmatory runs' primary: the same comparison, with the smallest effect of interest
# declared before their extraction (after the exploratory runs were read): 0.02 of Spearman's
# rho, averaged over the four ranges.
CONFIRM_PRIMARY = Endpoint(method="contrastive", versus="temperature", statistic="mean", score="expected@1",
                           margin=0.02)

# The mechanism control's primary (declared after the exploratory runs were read, so never
# registered): does contrastive decoding do more than subtracting the assistant's score?
MECHANISM_PRIMARY = Endpoint(method="contrastive", versus="linear_mix", statistic="mean", score="expected@1",
                             margin=0.02)

# Grids of the committed STS-B, SemRel and SummEval runs, widened where the first runs' choices
# sat at an edge: t_main reached 5 (the top) in most `temperature` cells and some contrastive
# ones, contrastive lambda 1 (the top) in some, and Deb-T's lambda 1 (the top of 0.1..1) in every
# expected-score cell of the 1.5B judge; a first widening (lambda to 2, t to 20) left lambda = 2
# and t = 0.5 chosen together for contrastive + Deb-T (the product lambda / t is what moves), so
# both ends moved again. All of them read existing stores (no forward pass).
WIDE = dict(
    contrastive_lams=(0.01, 0.1, 0.5, 1.0, 2.0, 3.0, 5.0),
    contrastive_temps=(0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0),
    lambdas=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0),
)
# The pair tasks' exploratory runs (and the mechanism controls read from their stores) widen t_main
# below 0.25 again: contrastive + Deb-T chose t = 0.25, the edge, in 3 of 4 ranges with its dev
# metric still moving. The confirmatory runs keep WIDE, the grid they registered.
# With t free to go lower the combination's lambda then sat at its top (5) in 3 of 4 ranges on both
# data sets, the dev metric still moving 0.09-0.10 over the last step: lambda adds 7, 10 and 20.
LOW_TEMPS = (0.05, 0.1, 0.15)
HIGH_LAMS = (7.0, 10.0, 20.0)
PAIR_GRIDS = dict(WIDE, contrastive_temps=LOW_TEMPS + WIDE["contrastive_temps"],
                  contrastive_lams=WIDE["contrastive_lams"] + HIGH_LAMS)
WIDE_CHANGES = (
    "grids widened where the previous choices sat at an edge: t_main adds 0.25, 10, 20, 50 and 100 "
    "(temperature, contrastive, contrastive + Deb-T), contrastive lambda adds 2, 3 and 5, Deb-T "
    "lambda adds 1.5, 2, 3, 5 and 10",
)

# What changed in this experiment's committed CPU runs since their previous version.
RUN_CHANGES = (
    "the temperature convention (every distribution tempered before the adjustment) leaves "
    "contrastive decoding's numbers as they were: the per-row normalisers cancel",
)


# Every variant: the 1.5B judge minus the 0.5B assistant, four ranges, selection by Spearman.
COMMON = dict(
    name="contrastive",
    models=(QWEN_15B, QWEN_05B),
    pairs=((QWEN_15B.name, QWEN_05B.name),),
    scales=("0-4", "1-5", "2-6", "3-7"),
    greedy=True,
    select_metric="spearman",
    primary=PRIMARY,
)

# The SummEval protocol across the four aspects (the default, "fine", "quick" and "cpu").
SUMMEVAL_ASPECTS = dict(
    COMMON,
    description="Contrastive decoding (main judge minus a smaller assistant of the same family) across score ranges.",
    tasks=(TaskSpec("summeval", ("coherence", "consistency", "fluency", "relevance"), split="fixed_docs"),),
    methods=("vanilla", "generate", "temperature", "contrastive", "contrastive_generate"),
    temperatures=(1.0,),
    contrastive_fine=False,
    run=None,
    changes=(),
    store_root="stores",
)

# The pair tasks ("stsb", "semrel"): wide grids, Deb-T and contrastive + Deb-T beside them.
PAIR_TASKS = dict(
    COMMON,
    description="Contrastive decoding (main judge minus a smaller assistant of the same family) "
    "across score ranges, alone and with the Deb-T correction.",
    methods=("vanilla", "deb_t", "temperature", "contrastive", "deb_t_temperature", "contrastive_deb_t"),
    temperatures=(1.0, 0.2),
    deb_tp=(10,),
    lambdas_extended=None,
    # Kendall's tau costs O(N^2) per resample: its point estimate only.
    ci_metrics=("pearson", "spearman", "mse", "sdd", "validity"),
    # Method against method, beside the defaults (vanilla, matched baseline): does the
    # assistant add to Deb-T, and does contrastive generation beat plain generation?
    comparisons=(("contrastive_deb_t_tp10", "deb_t_tp10"),),
    # The combination and its matched baseline are bootstrapped with the selection redone in every
    # resample too, so that the combination claim reads a nested interval.
    nested_rows=("contrastive_deb_t_tp10", "deb_t_temperature_tp10"),
    changes=WIDE_CHANGES + (
        "deb_t_temperature (Deb-T with the main judge's temperature tuned on the same grid: contrastive + "
        "Deb-T at lambda = 0) added as contrastive + Deb-T's matched baseline; before, the combination "
        "was compared with `temperature`, which has no Deb-T, and with `deb_t_tp10`, which has no "
        "temperature",
        "t_main adds 0.05, 0.1 and 0.15 (contrastive + Deb-T chose 0.25, the grid's edge, in 3 of 4 ranges), "
        "then contrastive lambda adds 7, 10 and 20 (with t free, contrastive + Deb-T chose lambda 5, the top, "
        "in 3 of 4 ranges); contrastive + Deb-T and Deb-T with tuned temperature get nested intervals "
        "(selection redone in every resample) beside the held-fixed ones",),
    **PAIR_GRIDS,
)

# The confirmatory variants ("stsb_confirm", "semrel_confirm"): the primary family only.
CONFIRM = dict(PAIR_TASKS, methods=("vanilla", "temperature", "contrastive"), temperatures=(1.0,), comparisons=(),
               changes=(), primary=CONFIRM_PRIMARY, nested_rows=(), **WIDE)

# The mechanism control ("mechanism_stsb", "mechanism_semrel"): read from the exploratory runs'
# stores on the expected score at T = 1 (the reading the mix is defined on and the primaries use).
# Three controls, each against contrastive decoding: the score-level linear mix (report only), the
# assistant replaced by the main judge's own content-free prior (the 1.5B judge's content-free
# jobs), and by SmolLM2-135M, a judge of another family (its score jobs on the same rows). The
# last two were added, and their stores extracted, after the first control's results were read.
MECHANISM = dict(PAIR_TASKS, models=(QWEN_15B, QWEN_05B, SMOLLM2), control_pairs=((QWEN_15B.name, SMOLLM2.name),),
                 methods=("vanilla", "temperature", "contrastive", "linear_mix", "contrastive_prior",
                          "contrastive_other"),
                 temperatures=(1.0,), greedy=False,
                 comparisons=(("contrastive", "linear_mix"), ("contrastive", "contrastive_prior"),
                              ("contrastive", "contrastive_other")), nested_rows=(),
                 changes=("two controls added beside the linear mix: contrastive decoding with the main judge's "
                          "own content-free prior as its assistant (contrastive_prior), and with SmolLM2-135M, "
                          "a judge of another family, as its assistant (contrastive_other); their stores were "
                          "extracted after the linear mix's results had been read",),
                 primary=MECHANISM_PRIMARY)

# The second confirmation ("stsb_confirm2", "semrel_confirm2"): every registered endpoint's rows,
# on the grids the exploratory pair runs ended with (PAIR_GRIDS: the combination's and the
# mechanism control's estimates were read on them). The subset and the power analysis are read
# from experiments/confirm2/ in `get_config` (`confirm2_plan`).
CONFIRM2_SECONDARY = (
    Endpoint(method="contrastive_deb_t_tp10", versus="deb_t_temperature_tp10", statistic="mean", score="expected@1",
             margin=0.02),
    Endpoint(method="contrastive", versus="linear_mix", statistic="mean", score="expected@1", margin=0.02),
    Endpoint(method="contrastive", versus="ensemble", statistic="mean", score="expected@1", margin=0.02),
)
CONFIRM2_RUNS = ("stsb_confirm2", "semrel_confirm2")
CONFIRM2 = dict(
    PAIR_TASKS,
    methods=("vanilla", "deb_t", "temperature", "contrastive", "deb_t_temperature", "contrastive_deb_t", "linear_mix",
             "ensemble"),
    temperatures=(1.0,),
    comparisons=(("contrastive", "linear_mix"), ("contrastive", "ensemble")),
    nested_rows=("contrastive_deb_t_tp10", "deb_t_temperature_tp10", "linear_mix"),
    changes=(),
    primary=CONFIRM_PRIMARY,
    # Store chunks of 64 rows, not 256: at this CPU's rate (0.04-0.4 rows/s for the 1.5B judge) a
    # killed run loses at most one chunk, and finished chunks can be committed every half hour.
    # Logistics, not plan: `engine` is outside the registered analysis plan.
    engine={"chunk_size": 64},
)
CONFIRM2_TASKS = {"stsb_confirm2": ("stsb", "similarity"), "semrel_confirm2": ("semrel", "relatedness")}

# The argument of `get_config` -> the fields of its `ExperimentConfig`.
VARIANTS = {
    None: SUMMEVAL_ASPECTS,
    "fine": dict(SUMMEVAL_ASPECTS, contrastive_fine=True),
    "quick": dict(
        SUMMEVAL_ASPECTS,
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="fixed_docs",
                        dev_docs=(SUMMEVAL_SUBSET_DOC_IDS[0],)),),
    ),
    "cpu": dict(
        SUMMEVAL_ASPECTS,
        tasks=(TaskSpec("summeval", ("coherence",), split="fixed_docs", dev_docs=CPU_SUMMEVAL_DEV_DOCS,
                        subset=CPU_SUMMEVAL_SUBSET),),
        methods=("vanilla", "temperature", "contrastive"),
        run="cpu",
        changes=(*RUN_CHANGES, *CPU_RUN_CHANGES),
        store_root="results/stores/cpu_qwen",
    ),
    "stsb": dict(
        PAIR_TASKS,
        tasks=(TaskSpec("stsb", ("similarity",), split="original", subset=CONTRASTIVE_STSB),),
        methods=PAIR_TASKS["methods"] + ("generate", "contrastive_generate"),
        run="stsb",
        comparisons=PAIR_TASKS["comparisons"] + (("contrastive_generate", "generate"),),
        store_root="results/stores/contrastive_stsb",
    ),
    "semrel": dict(
        PAIR_TASKS,
        tasks=(TaskSpec("semrel", ("relatedness",), split="original", subset=CONTRASTIVE_SEMREL),),
        run="semrel",
        store_root="results/stores/contrastive_semrel",
    ),
    # Confirmations of the pair tasks' primary endpoint (see the module docstring): the primary
    # family only, on the exploratory runs' wide grids. Whether each plan was registered before
    # extraction is what its report prints, from the store root's record.
    "stsb_confirm": dict(
        CONFIRM,
        description="Confirmation of contrastive decoding against its matched temperature baseline on "
        "STS-B pairs no contrastive run has scored.",
        tasks=(TaskSpec("stsb", ("similarity",), split="original", subset=CONFIRM_STSB),),
        run="stsb_confirm",
        store_root="results/stores/contrastive_stsb_confirm",
    ),
    "semrel_confirm": dict(
        CONFIRM,
        description="Confirmation of contrastive decoding against its matched temperature baseline on "
        "SemRel2024 train groups no contrastive run has scored.",
        tasks=(TaskSpec("semrel", ("relatedness",), split="original", subset=CONFIRM_SEMREL),),
        run="semrel_confirm",
        store_root="results/stores/contrastive_semrel_confirm",
    ),
    # The second confirmation (see CONFIRM2): tasks and confirmation are added by `get_config`.
    "stsb_confirm2": dict(
        CONFIRM2,
        description="Second confirmation on STS-B dev pairs no contrastive run has scored: contrastive decoding "
        "against its matched temperature baseline, with the combination, the linear mix and an ensembling control.",
        run="stsb_confirm2",
        store_root="results/stores/contrastive_stsb_confirm2",
    ),
    "semrel_confirm2": dict(
        CONFIRM2,
        description="Second confirmation on SemRel2024 train groups no contrastive run has scored: contrastive "
        "decoding against its matched temperature baseline, with the combination, the linear mix and an ensembling "
        "control.",
        run="semrel_confirm2",
        store_root="results/stores/contrastive_semrel_confirm2",
    ),
    "mechanism_stsb": dict(
        MECHANISM,
        description="Contrastive decoding against a score-level linear mix of the same two judges "
        "(main − w · assistant, as many tuned values), on the STS-B run's stores.",
        tasks=(TaskSpec("stsb", ("similarity",), split="original", subset=CONTRASTIVE_STSB),),
        run="mechanism_stsb",
        store_root="results/stores/contrastive_stsb",
    ),
    "mechanism_semrel": dict(
        MECHANISM,
        description="Contrastive decoding against a score-level linear mix of the same two judges "
        "(main − w · assistant, as many tuned values), on the SemRel2024 run's stores.",
        tasks=(TaskSpec("semrel", ("relatedness",), split="original", subset=CONTRASTIVE_SEMREL),),
        run="mechanism_semrel",
        store_root="results/stores/contrastive_semrel",
    ),
    "summeval": dict(
        COMMON,
        description="Contrastive decoding on the paper's own protocol: SummEval coherence, all 100 "
        "documents, selection on its 10 development documents, report on the other 90.",
        tasks=(TaskSpec("summeval", ("coherence",), split="fixed_docs"),),
        methods=("vanilla", "temperature", "contrastive"),
        temperatures=(1.0,),
        run="summeval",
        **WIDE,
        # The 0.5B judge's score stores are those of random_number_debias.py:summeval.
        store_root="results/stores/summeval_qwen05",
    ),
}


def get_config(arg: str | None = None) -> ExperimentConfig:
    fields = pick_variant("contrastive", arg, VARIANTS)
    if arg in CONFIRM2_TASKS:  # its rows and power analysis, from experiments/confirm2/
        task, aspect = CONFIRM2_TASKS[arg]
        fields = dict(fields, tasks=(TaskSpec(task, (aspect,), split="original", subset=confirm2_subset(task)),),
                      confirmation=confirmation(task, CONFIRM2_RUNS, CONFIRM2_SECONDARY))
    return ExperimentConfig(**fields)
