"""Dev/test splits for hyper-parameter selection, grouped by source document.

Examples that share a source document (the 16 summaries of one SummEval article, the
responses to one HelpSteer2 prompt) are strongly correlated, so a split that puts some of them
in dev and others in test leaks. Every split here keeps each group whole.

A split is a pair of boolean masks `[F, N]`: for fold f, the hyper-parameter is chosen where
`dev[f]` is True and reported where `test[f]` is True.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxjudge.metrics.groups import encode_groups


class Splits(NamedTuple):
    """Dev/test masks over N examples for F folds.

    Attributes:
        dev: `[F, N]` bool, examples on which the hyper-parameters are chosen.
        test: `[F, N]` bool, examples on which the chosen value is evaluated.
        fold_ids: `[N]` int fold of each example for k-fold splits, None for a fixed split.
    """

    dev: np.ndarray
    test: np.ndarray
    fold_ids: np.ndarray | None


def group_kfold(groups, n_folds: int = 5, seed: int = 0) -> np.ndarray:
    """Assign whole groups to `n_folds` folds of nearly equal size, deterministically.

    Groups are shuffled with `seed`, then, largest first (a stable sort, so equal-sized groups
    keep their shuffled order), each is given to the fold that currently holds the fewest
    examples (the lowest fold index on ties). With equal group sizes this deals groups out
    round-robin in a seeded random order.

    Args:
        groups: `[N]` group id (source document) of each example; any sortable dtype.
        n_folds: number of folds, `2 <= n_folds <= number of groups`.
        seed: seed of the shuffle; the same seed and groups always give the same folds.

    Returns:
        `[N]` int32 fold id in `[0, n_folds)` of each example.
    """
    codes, _, uniq = encode_groups(groups, name="groups")
    n_groups = uniq.shape[0]
    if not isinstance(n_folds, (int, np.integer)) or n_folds < 2:
        raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
    if n_groups < n_folds:
        raise ValueError(
            f"n_folds={n_folds} exceeds the number of groups ({n_groups}): "
            "some fold would be empty"
        )
    sizes = np.bincount(codes, minlength=n_groups)
    order = np.random.default_rng(seed).permutation(n_groups)
    order = order[np.argsort(-sizes[order], kind="stable")]
    fold_of_group = np.empty(n_groups, dtype=np.int32)
    load = np.zeros(n_folds, dtype=np.int64)
    for g in order:
        f = int(np.argmin(load))
        fold_of_group[g] = f
        load[f] += sizes[g]
    return fold_of_group[codes]


def kfold_splits(
    groups, n_folds: int = 5, seed: int = 0, *, train_on_rest: bool = False
) -> Splits:
    """Grouped k-fold dev/test masks.

    Default direction (the random-number debiasing paper): for each fold f, fold f is the dev
    set and the other `n_folds - 1` folds are the test set, i.e. dev:test = 1:4 with 5 folds.
    Hyper-parameters are chosen on little data and reported on much, which is the honest
    setting when the point is that the method needs almost no labels.

    With `train_on_rest=True` the conventional direction is used instead: the other
    `n_folds - 1` folds are the dev set and fold f is the test set (dev:test = 4:1), so that
    the test folds partition the data.

    Args:
        groups: `[N]` group id (source document) of each example.
        n_folds: number of folds.
        seed: seed of the group shuffle (see `group_kfold`).
        train_on_rest: False for dev = one fold (1:k-1), True for dev = the other folds (k-1:1).

    Returns:
        `Splits` with `[n_folds, N]` masks and the `[N]` fold ids.
    """
    fold_ids = group_kfold(groups, n_folds, seed)
    one = fold_ids[None, :] == np.arange(n_folds)[:, None]  # [F, N]
    dev, test = (~one, one) if train_on_rest else (one, ~one)
    return Splits(dev=dev, test=test, fold_ids=fold_ids)


def fixed_split(groups=None, dev_groups=None, *, dev_mask=None) -> Splits:
    """A single dev/test split, given by dev group ids or by a dev mask.

    Args:
        groups: `[N]` group id of each example (with `dev_groups`).
        dev_groups: group ids forming the dev set; every other example is test. Groups are never
            split by construction.
        dev_mask: `[N]` bool alternative to `groups`/`dev_groups`; if `groups` is also given,
            the mask must not split any group.

    Returns:
        `Splits` with `[1, N]` masks and `fold_ids=None`.
    """
    if dev_mask is None:
        if groups is None or dev_groups is None:
            raise ValueError("fixed_split: pass either dev_mask, or both groups and dev_groups")
        codes, _, uniq = encode_groups(groups, name="groups")
        wanted = np.asarray(dev_groups).reshape(-1)
        missing = wanted[~np.isin(wanted, uniq)]
        if missing.size:
            raise ValueError(
                f"fixed_split: dev_groups not found in groups: {missing[:5].tolist()}"
            )
        dev = np.isin(np.asarray(groups), wanted)
    else:
        if dev_groups is not None:
            raise ValueError("fixed_split: pass dev_mask or dev_groups, not both")
        dev = np.asarray(dev_mask)
        if dev.ndim != 1 or dev.dtype != np.bool_:
            raise ValueError(
                f"fixed_split: dev_mask must be a [N] bool array, got {dev.dtype} {dev.shape}"
            )
        if groups is not None:
            codes, _, uniq = encode_groups(groups, name="groups")
            if codes.shape != dev.shape:
                raise ValueError(
                    f"fixed_split: groups has {codes.shape[0]} rows, dev_mask {dev.shape[0]}"
                )
            dev_frac = np.bincount(codes, weights=dev, minlength=uniq.shape[0])
            split = np.flatnonzero((dev_frac > 0) & (dev_frac < np.bincount(codes)))
            if split.size:
                raise ValueError(f"fixed_split: dev_mask splits group {uniq[split[0]].item()!r}")
    if not dev.any():
        raise ValueError("fixed_split: the dev set is empty")
    if dev.all():
        raise ValueError("fixed_split: the test set is empty (every example is in dev)")
    return Splits(dev=dev[None, :], test=~dev[None, :], fold_ids=None)
