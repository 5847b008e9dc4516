"""Judge-bias diagnostics and honest reporting.

- `pairwise`: position bias of pairwise judging (same-document pair builder, consistency /
  first-slot rate / tie-aware agreement with humans); `position_prompts`: its prompt (as data)
  in both orders.
- `length`: length bias (correlation with length, length-controlled comparisons).
- `agreement`: Cohen's kappa, unweighted / linear / quadratic.
- `corrected`: bias-corrected accuracy of pass/fail judging with intervals that carry the
  calibration-set uncertainty; `calibration_budget`: the calibration budget's allocation.
- `paired`: two judges or methods on the same items, standard errors clustered by document.
- `rates`: Wilson score intervals for rates in [0, 1], plain and document-clustered.
- `run`: the position-bias protocol run on a model (chat prompts for both orders, answer-token
  log-probabilities through the engine's prefix cache, intervals, report files).

Apart from `run`, these are float64 numpy functions rather than jitted JAX: each diagnostic
is a few vector reductions evaluated once per report, so compilation would cost more than it
saves, and the project runs JAX with x64 disabled while intervals and worked examples here
need double precision. No function returns NaN: undefined statistics raise ValueError with the reason.
"""

from jaxjudge.diagnostics.agreement import cohen_kappa, confusion_matrix, to_integer_scale
from jaxjudge.diagnostics.calibration_budget import allocate_calibration
from jaxjudge.diagnostics.corrected import (
    CalibrationRates,
    CorrectedAccuracy,
    bias_corrected_accuracy,
    calibration_rates,
    corrected_accuracy,
    corrected_accuracy_ci,
    corrected_accuracy_se,
)
from jaxjudge.diagnostics.length import (
    LengthBias,
    LengthControlledDifference,
    length_bias,
    length_controlled_difference,
    length_residuals,
)
from jaxjudge.diagnostics.paired import (
    CorrelationDifference,
    PairedDifference,
    clustered_mean_se,
    paired_correlation_difference,
    paired_difference,
)
from jaxjudge.diagnostics.pairwise import (
    Pairs,
    PositionBias,
    build_pairs,
    pairs_from_examples,
    position_bias,
    slot_verdicts,
)
from jaxjudge.diagnostics.rates import RateInterval, clustered_wilson_interval, wilson_interval
from jaxjudge.diagnostics.position_files import rescore_position_bias_run, write_position_bias
from jaxjudge.diagnostics.position_prompts import (
    ASPECT_DEFINITIONS,
    SUMMARY_PAIRWISE,
    PairwiseTemplate,
    answer_token_ids,
    pairwise_chat_prompts,
    render_pair_prompts,
)
from jaxjudge.diagnostics.run import (
    ChoiceScores,
    PositionBiasRun,
    choice_logprobs,
    pair_length_bias,
    position_bias_table,
    run_position_bias,
)

__all__ = [
    "ASPECT_DEFINITIONS",
    "CalibrationRates",
    "ChoiceScores",
    "CorrectedAccuracy",
    "CorrelationDifference",
    "LengthBias",
    "LengthControlledDifference",
    "PairedDifference",
    "Pairs",
    "PairwiseTemplate",
    "PositionBias",
    "PositionBiasRun",
    "RateInterval",
    "SUMMARY_PAIRWISE",
    "allocate_calibration",
    "answer_token_ids",
    "bias_corrected_accuracy",
    "build_pairs",
    "calibration_rates",
    "choice_logprobs",
    "clustered_mean_se",
    "clustered_wilson_interval",
    "cohen_kappa",
    "confusion_matrix",
    "corrected_accuracy",
    "corrected_accuracy_ci",
    "corrected_accuracy_se",
    "length_bias",
    "length_controlled_difference",
    "length_residuals",
    "pair_length_bias",
    "paired_correlation_difference",
    "paired_difference",
    "pairs_from_examples",
    "pairwise_chat_prompts",
    "position_bias",
    "position_bias_table",
    "render_pair_prompts",
    "rescore_position_bias_run",
    "run_position_bias",
    "slot_verdicts",
    "to_integer_scale",
    "wilson_interval",
    "write_position_bias",
]
