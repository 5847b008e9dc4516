"""Debiasing: pure, jit-compatible functions from `[N, K]` candidate logits to adjusted ones.

Every method is a logit adjustment, `adjusted = log_softmax(logits + sum_c lambda_c * B_c)`,
where each B is a prior correction (random-number, content-free, batch or Beta-fitted human
prior) or an assistant model's log-probabilities (contrastive decoding). The one exception is a
control, not a method: `linear_mix`, the main judge's expected score minus some of the
assistant's, written as a mixture of the two distributions. Strengths and temperatures are
traced arguments, so any of these functions can be vmapped over a grid.
"""

from jaxjudge.debias.adjust import (
    adjust_per_fold,
    combined_adjust,
    contrastive_adjust,
    linear_mix_adjust,
    rectify_adjust,
)
from jaxjudge.debias.calibration import (
    BetaFit,
    batch_calibration,
    batch_prior,
    beta_candidate_prior,
    contextual_calibration,
    contextual_prior,
    distribution_calibration,
    distribution_correction,
    fit_beta,
    human_prior,
    rescale_scores,
)
from jaxjudge.debias.contrastive import contrastive, contrastive_scores
from jaxjudge.debias.linear_mix import linear_mix
from jaxjudge.debias.prior import (
    PRIOR_FLOOR,
    adjust,
    latent_prior,
    least_perplexity,
    prior_correction,
    rectify,
)
from jaxjudge.debias.scores import expected_score, greedy_score, renormalize

__all__ = [
    "BetaFit",
    "PRIOR_FLOOR",
    "adjust",
    "adjust_per_fold",
    "batch_calibration",
    "batch_prior",
    "combined_adjust",
    "beta_candidate_prior",
    "contextual_calibration",
    "contextual_prior",
    "contrastive",
    "contrastive_adjust",
    "contrastive_scores",
    "distribution_calibration",
    "distribution_correction",
    "expected_score",
    "fit_beta",
    "greedy_score",
    "human_prior",
    "latent_prior",
    "least_perplexity",
    "linear_mix",
    "linear_mix_adjust",
    "prior_correction",
    "rectify",
    "rectify_adjust",
    "renormalize",
    "rescale_scores",
]
