"""A pilot's per-group variance of a registered endpoint, and the power it gives a planned n.

An endpoint here is ``mean over ranges of [metric(method) - metric(versus)]`` on one reading,
the form of every confirmatory endpoint (`jaxjudge.experiment.Endpoint` with statistic
``"mean"``). A pilot is a committed run: its rows' predictions are recomputed from its stores
exactly as its report chose them (`pilot_predictions`), and `endpoint_statistic` evaluates the
endpoint under any row weights, so that the grouped jackknife (`jaxjudge.metrics.power.per_group_sd`)
and the group resampling (`resampled_se`) read the same statistic the report reads (held at
the chosen hyper-parameters). `plan_power` turns the per-group standard deviation into the
planned interval's half-width, the effect 80% power reaches and the power at given effects,
with ``inflation`` for what the held-fixed statistic leaves out (the registered interval redoes
the dev-side choice in every resample: the pilot's own nested interval is that much wider).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.data.tasks import load_task_data, task_dev_docs
from jaxjudge.metrics import encode_groups, get_metric
from jaxjudge.metrics.power import detectable_effect, half_width, per_group_sd, power_at, resampled_se
from jaxjudge.report.cell import evaluate_cell
from jaxjudge.report.cell_inputs import MethodOptions
from jaxjudge.report.pipeline import _splits_for
from jaxjudge.report.stores import StoreIndex, cells, load_cells, store_match

__all__ = ["PilotRows", "check_sqrt_law", "endpoint_statistic", "pilot_predictions", "pilot_sigma", "plan_power",
           "power_words", "secondary_power_lines"]


@dataclass(frozen=True)
class PilotRows:
    """A pilot's test rows: per range the two rows' predictions, the human scores, the groups."""

    method: np.ndarray  # [S, N] predictions of the method, per range
    versus: np.ndarray  # [S, N] of its comparator
    human: np.ndarray  # [N]
    codes: np.ndarray  # [N] group codes 0..G-1
    num_groups: int
    n_rows: int


def endpoint_statistic(rows: PilotRows, metric: str = "spearman") -> Callable[[np.ndarray], np.ndarray]:
    """``weights [B, N] -> [B]``: the mean over ranges of metric(method) - metric(versus)."""
    fn = get_metric(metric)
    a, b = jnp.asarray(rows.method, jnp.float32), jnp.asarray(rows.versus, jnp.float32)
    y = jnp.asarray(rows.human, jnp.float32)

    def one(w, a, b, y):  # [N] -> scalar (the arrays are arguments: no constant folding)
        per_range = jax.vmap(lambda x_a, x_b: fn(x_a, y, weights=w) - fn(x_b, y, weights=w))(a, b)  # [S]
        return jnp.mean(per_range)

    batched = jax.jit(jax.vmap(one, in_axes=(0, None, None, None)))
    return lambda weights: np.asarray(batched(jnp.asarray(weights, jnp.float32), a, b, y))


def pilot_predictions(cfg: Any, method: str, versus: str, score: str = "expected@1",
                      store_root: str | None = None) -> PilotRows:
    """The test rows' predictions of two rows of a committed run, per range, from its stores.

    ``cfg`` is the run's config; only the methods the two rows need are evaluated, with the
    bootstrap cut to one resample (the choice on dev, which is what the predictions depend on,
    is the report's own).
    """
    if len(cfg.tasks) != 1 or len(cfg.judge_names) != 1:
        raise ValueError("pilot_predictions reads a run with one task and one judge")
    light = dataclasses.replace(cfg, n_boot=1, primary=None, nested_rows=(), comparisons=(), ci_metrics=("spearman",))
    task = light.tasks[0]
    data = {task.task: load_task_data(task)}
    arrays = load_cells(light, StoreIndex(store_root or cfg.store_root, store_match), data, check_model=False)
    options = MethodOptions.from_config(light, task)
    per_scale, test, human, groups = {}, None, None, None
    for cell in cells(light):
        a = arrays[cell]
        splits = _splits_for(task, a, task_dev_docs(task))
        preds: dict = {}
        evaluate_cell(a, splits, options, {"judge": cell.judge, "task": cell.task, "aspect": cell.aspect},
                      predictions=preds)
        per_scale[cell.scale] = (preds[(method, score)][0], preds[(versus, score)][0])
        test, human, groups = np.asarray(splits.test[0], bool), np.asarray(a.human), np.asarray(a.groups)
    scales = list(per_scale)
    codes = encode_groups(groups[test])
    return PilotRows(method=np.stack([per_scale[s][0][test] for s in scales]),
                     versus=np.stack([per_scale[s][1][test] for s in scales]), human=human[test],
                     codes=np.asarray(codes.codes), num_groups=int(codes.num_groups), n_rows=int(test.sum()))


def plan_power(sigma: float, n_groups: int, margin: float, effects: Mapping[str, float], *, alpha: float = 0.025,
               inflation: float = 1.0, power: float = 0.8) -> dict[str, Any]:
    """The planned interval and power of an endpoint with per-group sd ``sigma`` at ``n_groups``.

    Args:
      sigma: per-group standard deviation of the endpoint (`per_group_sd`).
      n_groups: groups of the planned report side.
      margin: the registered margin (the effect must clear it).
      effects: label -> plausible true effect, each given its power.
      alpha: one-sided level of the verdict (0.025: the 95% interval's lower end; a Holm family
        of k plans at 0.025 / k).
      inflation: the planned standard error's factor for the dev-side choice redone per resample.

    Returns:
      ``{"se", "half_width", "detectable", "power": {label: power}}`` (half-width at the level
      the verdict is read at).
    """
    se = inflation * sigma / np.sqrt(n_groups)
    return {"se": float(se), "half_width": half_width(se, alpha), "detectable": detectable_effect(se, margin, alpha, power),
            "power": {k: power_at(v, se, margin, alpha) for k, v in effects.items()}}


def check_sqrt_law(stat: Callable[[np.ndarray], np.ndarray], rows: PilotRows, sigma: float,
                   ms: Sequence[int], n_draws: int = 200, seed: int = 0) -> list[dict[str, float]]:
    """``sigma / sqrt(m)`` beside the standard deviation of the statistic over draws of ``m``
    groups with replacement from the pilot's (the simulation the formula is checked by)."""
    return [{"m": int(m), "formula": float(sigma / np.sqrt(m)),
             "simulated": resampled_se(stat, rows.codes, rows.num_groups, int(m), n_draws=n_draws, seed=seed)}
            for m in ms]


def pilot_sigma(rows: PilotRows, metric: str = "spearman") -> tuple[float, float]:
    """(point estimate on the pilot's rows, per-group sd by the grouped jackknife)."""
    stat = endpoint_statistic(rows, metric)
    estimate = float(stat(np.ones((1, rows.n_rows)))[0])
    return estimate, per_group_sd(stat, rows.codes, rows.num_groups)


def power_words(registration: Mapping[str, Any] | None, method: str, versus: str | None) -> str:
    """``"; registered power: ..."`` for the endpoint ``method − versus`` of a run whose
    registration record holds a power analysis (`jaxjudge.store.registration.registration_status`),
    else empty."""
    for p in (registration or {}).get("power") or []:
        if (p["method"], p["versus"]) != (method, versus):
            continue
        effects = p.get("effects") or {}
        at = ", ".join(f"{v:.2f} at {effects[k]:+.3f} ({k})" if k in effects else f"{v:.2f} at {k}"
                       for k, v in p["power"].items())
        return (f"; registered power ({p['family']} family, one-sided level {p['alpha_one_sided']:.4g}, "
                f"{p['planned_pairs']} pairs in {p['planned_groups']} groups): planned half-width "
                f"{p['half_width']:.3f}, 80% power from {p['detectable_80']:+.3f}; power {at}")
    return ""


def secondary_power_lines(registration: Mapping[str, Any] | None) -> list[str]:
    """One Markdown bullet per registered secondary endpoint with its power (empty: none)."""
    return [f"- {p['method']} − {p['versus']}{power_words(registration, p['method'], p['versus'])}"
            for p in (registration or {}).get("power") or [] if p.get("family") == "secondary"]
