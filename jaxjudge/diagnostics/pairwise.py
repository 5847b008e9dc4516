"""Position bias in pairwise judging: pair construction and verdict analysis (the prompts:
`jaxjudge.diagnostics.position_prompts`).

Protocol. For each pair of items (first, second) of one source document the judge is asked
twice: in the *forward* order `first` fills slot A and `second` slot B; in the *swapped* order
`second` fills slot A and `first` slot B. The engine reads the log-probabilities of the two
answer tokens (`choices`, "A" and "B") at the answer position, giving two `[P, 2]` arrays whose
columns are always (log p("A"), log p("B")), i.e. slot order, not item order.

Verdicts. In one order the judge picks slot A when log p(A) > log p(B) + margin, slot B when
log p(B) > log p(A) + margin, and is tied otherwise (margin defaults to 0, so ties are exact
equalities). In item terms (+1 = `first` preferred, -1 = `second` preferred, 0 = tie):
forward verdict = slot verdict; swapped verdict = minus the slot verdict.

Reported by `position_bias`:
- consistency: fraction of pairs whose two item verdicts agree and are not ties;
- first_slot_rate: fraction of the 2P judgements that pick slot A (ties count half); 0.5 is
  position-neutral;
- combined verdict: the consistent verdict, or a tie (0) when the two orders disagree or either
  is tied;
- prob_first: the order-averaged probability that `first` wins, each order's two answer
  probabilities renormalised to sum to one (a soft, position-debiased verdict);
- with human preferences: accuracy of the combined verdict counting ties as half correct
  (`accuracy`), the tie rate, and the accuracy among decisive (non-tie) pairs reported
  separately (`accuracy_decisive`), so both conventions can be quoted; plus per-order and
  soft (prob_first) accuracies.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from jaxjudge.diagnostics.paired import clustered_mean_se
from jaxjudge.metrics._checks import as_float_vector, as_logprob_pairs, same_length
from jaxjudge.metrics.groups import encode_groups

# --------------------------------------------------------------------------------------------
# Pair construction.

# Human scores such as SummEval's means of three ratings are multiples of 1/3, so a gap of
# "one point" can be 0.9999999999999996 in floating point.
_GAP_TOL = 1e-9


@dataclass(frozen=True)
class Pairs:
    """Same-document item pairs with a human preference.

    Attributes (all length P):
      group: source-document id of each pair.
      first: index (into the arrays given to `build_pairs`) of the item shown in slot A in the
        forward order.
      second: index of the other item.
      first_id, second_id: their item ids.
      human_pref: +1 where humans scored `first` higher, -1 where `second` (never 0).
      gap: absolute human score difference.
    """

    group: np.ndarray
    first: np.ndarray
    second: np.ndarray
    first_id: np.ndarray
    second_id: np.ndarray
    human_pref: np.ndarray
    gap: np.ndarray

    def __len__(self) -> int:
        return int(self.first.shape[0])


def build_pairs(groups: Sequence, item_ids: Sequence, human_scores, *, min_gap: float = 1.0,
                n_pairs: int | None = None, seed: int = 0) -> Pairs:
    """All same-group item pairs whose human scores differ by at least `min_gap`.

    Which item of a pair is `first` (slot A in the forward order) is drawn at random, so that
    the human-preferred item is not always in the same slot; a subsample of `n_pairs` pairs is
    then drawn uniformly without replacement. Both use one `numpy.random.default_rng(seed)`
    and the candidate list is enumerated in input order (groups by first appearance, then
    items i < j), so the result is a deterministic function of the inputs and the seed. The
    returned pairs keep candidate order.

    Args:
      groups: source-document id of each item [N].
      item_ids: item id [N] (unique within a group), e.g. SummEval's model_id.
      human_scores: human score [N].
      min_gap: smallest absolute score difference kept (a tolerance of 1e-9 absorbs rounding of
        fractional scores). Pairs with equal human scores are never kept, even with min_gap=0,
        since they carry no preference.
      n_pairs: number of pairs to return; None for all candidates.
      seed: random seed for orientation and subsampling.

    Returns:
      Pairs; empty (length 0) when no pair qualifies and n_pairs is None.

    Raises:
      ValueError: mismatched lengths, non-finite scores, duplicate (group, item id), negative
        min_gap, or n_pairs larger than the number of qualifying pairs (the message gives it).
    """
    scores = as_float_vector(human_scores, "human_scores")
    n = same_length(groups=groups, item_ids=item_ids, human_scores=scores)
    if not np.isfinite(min_gap) or min_gap < 0:
        raise ValueError(f"min_gap must be a finite number >= 0, got {min_gap}")
    codes, n_groups = encode_groups(groups, order="first", name="groups", n=n)[:2]
    group_list = list(groups)
    id_list = list(item_ids)
    seen: set = set()
    for i, (g, it) in enumerate(zip(group_list, id_list)):
        if (g, it) in seen:
            raise ValueError(f"duplicate item id {it!r} in group {g!r} (row {i})")
        seen.add((g, it))

    firsts, seconds = [], []
    members = [np.flatnonzero(codes == c) for c in range(n_groups)]
    for idx in members:
        s = scores[idx]
        gap = np.abs(s[:, None] - s[None, :])  # [n_g, n_g]
        ii, jj = np.nonzero(np.triu((gap >= min_gap - _GAP_TOL) & (gap > _GAP_TOL), k=1))
        firsts.append(idx[ii])
        seconds.append(idx[jj])
    first = np.concatenate(firsts) if firsts else np.zeros(0, dtype=np.int64)
    second = np.concatenate(seconds) if seconds else np.zeros(0, dtype=np.int64)

    rng = np.random.default_rng(seed)
    flip = rng.random(first.shape[0]) < 0.5
    first, second = np.where(flip, second, first), np.where(flip, first, second)
    if n_pairs is not None:
        if int(n_pairs) != n_pairs or n_pairs < 0:
            raise ValueError(f"n_pairs must be a non-negative integer, got {n_pairs!r}")
        if n_pairs > first.shape[0]:
            raise ValueError(
                f"n_pairs={n_pairs} requested but only {first.shape[0]} pairs have a human score gap "
                f">= {min_gap}"
            )
        keep = np.sort(rng.choice(first.shape[0], size=int(n_pairs), replace=False))
        first, second = first[keep], second[keep]

    ids = np.asarray(id_list, dtype=object)
    group_arr = np.asarray(group_list, dtype=object)
    diff = scores[first] - scores[second]
    return Pairs(
        group=group_arr[first],
        first=first.astype(np.int64),
        second=second.astype(np.int64),
        first_id=ids[first],
        second_id=ids[second],
        human_pref=np.sign(diff).astype(np.int64),
        gap=np.abs(diff),
    )


def pairs_from_examples(examples: Iterable, aspect: str, *, min_gap: float = 1.0,
                        n_pairs: int | None = None, seed: int = 0) -> Pairs:
    """`build_pairs` over example records with `.group`, `.id` and a `.scores` mapping.

    `first` and `second` index into `list(examples)`.

    Args:
      examples: records such as `jaxjudge.data.Example` (SummEval: group = article).
      aspect: which human score to compare, e.g. "coherence".
      min_gap, n_pairs, seed: as in `build_pairs`.

    Returns:
      Pairs.
    """
    exs = list(examples)
    scores = []
    for i, ex in enumerate(exs):
        if aspect not in ex.scores:
            raise ValueError(f"example {i} ({ex.id!r}) has no human score {aspect!r}; has {sorted(ex.scores)}")
        scores.append(ex.scores[aspect])
    return build_pairs([ex.group for ex in exs], [ex.id for ex in exs], scores,
                       min_gap=min_gap, n_pairs=n_pairs, seed=seed)


# --------------------------------------------------------------------------------------------
# Verdict analysis.


def slot_verdicts(logp_ab, *, margin: float = 0.0) -> np.ndarray:
    """Per-order verdicts from answer-token log-probabilities.

    Args:
      logp_ab: [P, 2] log-probabilities of ("A", "B").
      margin: a log-probability difference of at most `margin` is a tie.

    Returns:
      int64 [P]: +1 slot A chosen, -1 slot B chosen, 0 tie.
    """
    lp = as_logprob_pairs(logp_ab, "logp_ab")
    if not np.isfinite(margin) or margin < 0:
        raise ValueError(f"margin must be a finite number >= 0, got {margin}")
    return _slot_verdicts(lp, margin)


def _slot_verdicts(lp: np.ndarray, margin: float) -> np.ndarray:
    # Differences of log-probs with one -inf entry are +-inf, never NaN (both -inf is rejected).
    d = lp[:, 0] - lp[:, 1]  # [P]
    return np.where(d > margin, 1, np.where(d < -margin, -1, 0)).astype(np.int64)


def _prob_a(lp: np.ndarray) -> np.ndarray:
    """P(A) after renormalising over the two answers: sigmoid(log p(A) - log p(B))."""
    d = lp[:, 0] - lp[:, 1]
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-d))


@dataclass(frozen=True)
class PositionBias:
    """Position-bias diagnostics for P pairs judged in both orders (see module docstring).

    Attributes:
      n_pairs: P.
      consistency: fraction of pairs with the same, non-tied item verdict in both orders.
      first_slot_rate: fraction of the 2P judgements choosing slot A (ties half).
      n_inconsistent_first: inconsistent pairs where slot A won in both orders.
      n_inconsistent_second: inconsistent pairs where slot B won in both orders.
      answer_mass: mean total probability of the two answer tokens over both orders; only
        meaningful when the log-probabilities are normalised over the full vocabulary.
      verdict_forward, verdict_swapped: item verdicts [P] (+1 first, -1 second, 0 tie).
      combined: [P] consistent verdict, else 0.
      prob_first: [P] order-averaged renormalised probability that `first` wins.
      accuracy: agreement of `combined` with the human preference, ties counted as 1/2.
      accuracy_se: its standard error, clustered by `groups` when given (see
        `clustered_mean_se`), else the i.i.d. standard error of a mean.
      tie_rate: fraction of pairs whose combined verdict is a tie.
      accuracy_decisive: accuracy among non-tied combined verdicts; None if all are ties.
      accuracy_forward, accuracy_swapped: single-order accuracies (ties 1/2), i.e. what one
        would report without swapping.
      accuracy_soft: accuracy of sign(prob_first - 1/2) (exact 1/2 counts 1/2).
      (The human-agreement fields are None without human preferences.)
    """

    n_pairs: int
    consistency: float
    first_slot_rate: float
    n_inconsistent_first: int
    n_inconsistent_second: int
    answer_mass: float
    verdict_forward: np.ndarray
    verdict_swapped: np.ndarray
    combined: np.ndarray
    prob_first: np.ndarray
    accuracy: float | None = None
    accuracy_se: float | None = None
    tie_rate: float | None = None
    accuracy_decisive: float | None = None
    accuracy_forward: float | None = None
    accuracy_swapped: float | None = None
    accuracy_soft: float | None = None

    def summary(self) -> dict[str, float | int | None]:
        """The scalar fields, for tables and JSON."""
        return {k: v for k, v in self.__dict__.items() if not isinstance(v, np.ndarray)}


def _agreement(verdict: np.ndarray, human: np.ndarray) -> np.ndarray:
    """Per-pair credit: 1 correct, 0 wrong, 1/2 tie."""
    return np.where(verdict == 0, 0.5, (verdict == human).astype(np.float64))


def position_bias(logp_forward, logp_swapped, human_pref=None, *, groups: Sequence | None = None,
                  margin: float = 0.0) -> PositionBias:
    """Consistency, first-slot preference and human agreement of a pairwise judge.

    Args:
      logp_forward: [P, 2] log-probabilities of ("A", "B") with the pair's `first` in slot A.
      logp_swapped: [P, 2] log-probabilities of ("A", "B") with the pair's `second` in slot A.
      human_pref: optional [P], +1 where humans prefer `first`, -1 where `second`
        (`Pairs.human_pref`).
      groups: optional [P] source-document ids, for a document-clustered `accuracy_se`.
      margin: log-probability difference at or below which one order's verdict is a tie.

    Returns:
      PositionBias.

    Raises:
      ValueError: zero pairs, wrong shapes, NaN/+inf or both answers at -inf in a row, human
        preferences other than +-1, or mismatched lengths.
    """
    lf = as_logprob_pairs(logp_forward, "logp_forward")
    ls = as_logprob_pairs(logp_swapped, "logp_swapped")
    p = same_length(logp_forward=lf, logp_swapped=ls)
    if p == 0:
        raise ValueError("position_bias needs at least one pair, got 0")
    if not np.isfinite(margin) or margin < 0:
        raise ValueError(f"margin must be a finite number >= 0, got {margin}")
    sf = _slot_verdicts(lf, margin)  # [P] slot verdicts, forward
    ss = _slot_verdicts(ls, margin)  # [P] slot verdicts, swapped
    vf, vs = sf, -ss  # item verdicts
    consistent = (vf != 0) & (vf == vs)
    combined = np.where(consistent, vf, 0)
    chose_a = np.concatenate([(sf + 1) / 2.0, (ss + 1) / 2.0])  # ties -> 1/2
    inconsistent_decisive = (sf != 0) & (ss != 0) & ~consistent
    prob_first = 0.5 * (_prob_a(lf) + (1.0 - _prob_a(ls)))
    mass = np.concatenate([np.exp(lf).sum(axis=1), np.exp(ls).sum(axis=1)])
    out = dict(
        n_pairs=p,
        consistency=float(consistent.mean()),
        first_slot_rate=float(chose_a.mean()),
        n_inconsistent_first=int(np.sum(inconsistent_decisive & (sf == 1))),
        n_inconsistent_second=int(np.sum(inconsistent_decisive & (sf == -1))),
        answer_mass=float(mass.mean()),
        verdict_forward=vf,
        verdict_swapped=vs,
        combined=combined,
        prob_first=prob_first,
    )
    if human_pref is not None:
        h = as_float_vector(human_pref, "human_pref")
        same_length(logp_forward=lf, human_pref=h)
        if not np.all(np.abs(h) == 1.0):
            row = int(np.argmax(np.abs(h) != 1.0))
            raise ValueError(f"human_pref must be +1 or -1; row {row} is {h[row]} (tied pairs carry no preference)")
        h = h.astype(np.int64)
        credit = _agreement(combined, h)  # [P]
        decisive = combined != 0
        soft = np.sign(prob_first - 0.5).astype(np.int64)
        if groups is not None:
            _, se = clustered_mean_se(credit, groups)
        else:
            se = float(credit.std(ddof=1) / np.sqrt(p)) if p > 1 else 0.0
        out.update(
            accuracy=float(credit.mean()),
            accuracy_se=se,
            tie_rate=float(1.0 - decisive.mean()),
            accuracy_decisive=float((combined[decisive] == h[decisive]).mean()) if decisive.any() else None,
            accuracy_forward=float(_agreement(vf, h).mean()),
            accuracy_swapped=float(_agreement(vs, h).mean()),
            accuracy_soft=float(_agreement(soft, h).mean()),
        )
    return PositionBias(**out)
