"""jaxjudge: LLM-as-a-judge scoring and its biases, in JAX.

The pipeline is cut in two (see the README): an expensive, cached extraction of the judge's
log-probabilities over the score candidates, and cheap, pure, jitted debiasing, selection and
metrics on the resulting `[N, K]` arrays.
"""

__version__ = "0.1.0"
