"""Power analysis of the second confirmation (experiments/contrastive.py:stsb_confirm2|semrel_confirm2).

For each registered endpoint and data set, a pilot: the committed run whose stores hold both of
the endpoint's rows (``PILOTS``). The registered numbers (``experiments/confirm2/power.json``,
part of the plan) come from the pilot's committed interval of the endpoint (nested where the run
has it: the dev-side choice redone in every resample, as the registered intervals are): with G0
report groups and half-width h0, the per-group standard deviation is
``sigma = sqrt(G0) * h0 / z_0.975`` and at G planned groups the standard error is
``sigma / sqrt(G)``. The ensembling control has no committed run; its sigma is the linear mix's
(the score-level control closest to it), on the same pilot rows. The verdict's one-sided level is
0.025 / k for a Holm family of k (Bonferroni: Holm's first step; Holm is never less powerful).

``--check`` tests that formula on the pilots' own rows: their predictions recomputed from the
stores as the report chose them (`jaxjudge.report.power.pilot_predictions`, point estimate
beside the committed one), sigma by the grouped jackknife (held fixed) and ``sigma / sqrt(m)``
against the standard deviation over draws of m groups with replacement from the pilot's (at G0
and at the planned G); written to ``experiments/confirm2/power_check.json``, not part of the plan.

    python experiments/power_analysis.py              # the registered numbers (seconds)
    python experiments/power_analysis.py --check      # the check (about 10 min a pilot, 2 quiet cores)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from confirm2_plan import POWER_FILE, ROWS_FILE, confirm2_subset  # noqa: E402

CHECK_FILE = POWER_FILE.with_name("power_check.json")

from jaxjudge.data.tasks import load_task_data  # noqa: E402
from jaxjudge.experiment import TaskSpec  # noqa: E402
from jaxjudge.metrics.power import half_width  # noqa: E402
from jaxjudge.report.power import check_sqrt_law, endpoint_statistic, pilot_predictions, pilot_sigma, plan_power  # noqa: E402

MARGIN = 0.02
# The plausible effects every endpoint's power is given at: the first confirmation's primary
# estimates on STS-B and SemRel train, and the owner's exploratory protocol on 250 SemRel test
# pairs no run of this project has read (issue 56).
EFFECTS = {"stsb_confirm": 0.038, "semrel_confirm": 0.066, "semrel_test_owner": 0.127}
# endpoint -> (method row, comparator row, the methods its pilot evaluates, Holm family)
ENDPOINTS = {
    "primary": ("contrastive", "temperature", ("vanilla", "temperature", "contrastive"), "primary"),
    "combination": ("contrastive_deb_t_tp10", "deb_t_temperature_tp10",
                    ("vanilla", "deb_t", "temperature", "contrastive", "deb_t_temperature", "contrastive_deb_t"),
                    "secondary"),
    "mechanism": ("contrastive", "linear_mix", ("vanilla", "temperature", "contrastive", "linear_mix"), "secondary"),
    "ensemble": ("contrastive", "ensemble", ("vanilla", "temperature", "contrastive", "ensemble"), "secondary"),
}
# (endpoint, task) -> the committed run (experiments/contrastive.py variant) that pilots it
PILOTS = {
    ("primary", "stsb"): "stsb_confirm", ("primary", "semrel"): "semrel_confirm",
    ("combination", "stsb"): "stsb", ("combination", "semrel"): "semrel",
    ("mechanism", "stsb"): "mechanism_stsb", ("mechanism", "semrel"): "mechanism_semrel",
    ("ensemble", "stsb"): "stsb_confirm", ("ensemble", "semrel"): "semrel_confirm",
}
FAMILY_SIZE = {"primary": 2, "secondary": 6}  # Holm: the primary over 2 data sets; 3 endpoints x 2


def committed_interval(run: str, method: str, versus: str) -> dict | None:
    """The committed run's interval of mean(method) - mean(versus) over ranges at expected@1:
    nested where it has one, else held fixed (None: not in the run)."""
    res = json.loads((HERE.parent / "results" / "contrastive" / run / "results.json").read_text(encoding="utf-8"))
    for ep in (res.get("endpoints") or {}).get("primary", {}).get("endpoints", []):
        d = ep["description"]
        if (d["method"], d["versus"], d["score"]) == (method, versus, "expected@1"):
            return {**ep["interval"], "nested": d.get("selection") == "nested"}
    for r in res["ranges"]:
        if (r["method"], r["score"], r["metric"]) != (method, "expected@1", "spearman"):
            continue
        for v in r["versus"]:
            if v["baseline"] == versus:
                nested = (v.get("nested") or {}).get("mean_diff")
                return {**(nested or v["mean_diff"]), "nested": nested is not None}
    return None


REPORT_SPLIT = {"stsb": "test", "semrel": "dev"}
# The ensembling control has no committed run: its sigma is the linear mix's (module docstring).
SIGMA_FROM = {"ensemble": "mechanism"}


def report_groups(task_spec) -> tuple[int, int]:
    """(groups, pairs) of a task's report side under its subset."""
    td = load_task_data(task_spec)
    keep = td.split_labels == REPORT_SPLIT[task_spec.task]
    return len({ex.group for ex, k in zip(td.examples, keep) if k}), int(keep.sum())


def planned(task: str) -> tuple[int, int]:
    aspect = {"stsb": "similarity", "semrel": "relatedness"}[task]
    return report_groups(TaskSpec(task, (aspect,), split="original", subset=confirm2_subset(task)))


def registered(endpoint: str, task: str) -> dict:
    """The registered power entry of one endpoint on one data set (from the committed interval)."""
    from contrastive import get_config

    method, versus, _, family = ENDPOINTS[endpoint]
    source = SIGMA_FROM.get(endpoint, endpoint)
    run = PILOTS[(source, task)]
    iv = committed_interval(run, *ENDPOINTS[source][:2])
    g0, n0 = report_groups(get_config(run).tasks[0])
    sigma = (g0 ** 0.5) * (iv["high"] - iv["low"]) / 2 / half_width(1.0)
    g_plan, n_plan = planned(task)
    alpha = 0.025 / FAMILY_SIZE[family]
    effects = dict(EFFECTS, pilot_estimate=iv["estimate"]) if source == endpoint else dict(EFFECTS)
    plan = plan_power(sigma, g_plan, MARGIN, effects, alpha=alpha)
    return {
        "endpoint": endpoint, "task": task, "method": method, "versus": versus, "family": family,
        "pilot": run + ("" if source == endpoint else f" ({ENDPOINTS[source][0]} − {ENDPOINTS[source][1]}, as a proxy)"),
        "pilot_groups": g0, "pilot_pairs": n0, "committed": iv, "sigma": round(sigma, 6), "inflation": 1.0,
        "planned_groups": g_plan, "planned_pairs": n_plan, "margin": MARGIN, "alpha_one_sided": alpha,
        "se": round(plan["se"], 6), "half_width": round(plan["half_width"], 6),
        "half_width_95": round(half_width(plan["se"]), 6), "detectable_80": round(plan["detectable"], 6),
        "power": {k: round(v, 4) for k, v in plan["power"].items()},
        "effects": {k: round(v, 6) for k, v in effects.items()},
    }


def check(endpoint: str, task: str, draws: int) -> dict:
    """The jackknife sigma (held fixed) and the sqrt law on the pilot's own rows, and the plan
    those would give (the committed nested interval over the held-fixed one as ``inflation``)."""
    import dataclasses

    from contrastive import get_config

    method, versus, methods, family = ENDPOINTS[endpoint]
    run = PILOTS[(endpoint, task)]
    cfg = dataclasses.replace(get_config(run), methods=methods, temperatures=(1.0,), greedy=False, primary=None,
                              comparisons=(), nested_rows=())
    rows = pilot_predictions(cfg, method, versus)
    estimate, sigma = pilot_sigma(rows)
    g_plan, n_plan = planned(task)
    law = check_sqrt_law(endpoint_statistic(rows), rows, sigma, (rows.num_groups, g_plan), n_draws=draws)
    held_hw = half_width(sigma / rows.num_groups ** 0.5)
    committed = committed_interval(run, method, versus)
    inflation = 1.0
    if committed and committed["nested"] and committed.get("low") is not None:
        inflation = max(1.0, (committed["high"] - committed["low"]) / 2 / held_hw)
    alpha = 0.025 / FAMILY_SIZE[family]
    effects = dict(EFFECTS, pilot_estimate=estimate)
    plan = plan_power(sigma, g_plan, MARGIN, effects, alpha=alpha, inflation=inflation)
    return {
        "endpoint": endpoint, "task": task, "method": method, "versus": versus, "family": family, "pilot": run,
        "pilot_groups": rows.num_groups, "pilot_pairs": rows.n_rows, "pilot_estimate": round(estimate, 6),
        "committed": committed, "sigma": round(sigma, 6), "pilot_half_width_held_fixed": round(held_hw, 6),
        "inflation": round(inflation, 4), "sqrt_law": law, "planned_groups": g_plan, "planned_pairs": n_plan,
        "margin": MARGIN, "alpha_one_sided": alpha, "se": round(plan["se"], 6),
        "half_width": round(plan["half_width"], 6), "half_width_95": round(half_width(plan["se"]), 6),
        "detectable_80": round(plan["detectable"], 6), "power": {k: round(v, 4) for k, v in plan["power"].items()},
        "effects": {k: round(v, 6) for k, v in effects.items()},
    }


def _line(r: dict) -> str:
    return (f"{r['endpoint']:11s} {r['task']:6s} sigma {r['sigma']:.3f} (pilot {r['pilot']}, {r['pilot_pairs']} pairs / "
            f"{r['pilot_groups']} groups); planned {r['planned_pairs']} pairs / {r['planned_groups']} groups: se "
            f"{r['se']:.4f}, half-width {r['half_width']:.4f} at one-sided {r['alpha_one_sided']:.4f} "
            f"({r['half_width_95']:.4f} at 95%), 80% power from {r['detectable_80']:+.4f}; power {r['power']}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="the jackknife and resampling check (slow)")
    ap.add_argument("--draws", type=int, default=200, help="group draws per simulated n (--check)")
    ap.add_argument("--only", nargs="*", help="endpoint:task pairs (default all; --check, written nowhere)")
    ap.add_argument("--cache", help="--check: a folder keeping each pilot's result, so that a rerun skips it")
    args = ap.parse_args(argv)
    if not args.check:
        out = [registered(e, t) for e, t in PILOTS]
        for r in out:
            print(_line(r))
        POWER_FILE.parent.mkdir(parents=True, exist_ok=True)
        POWER_FILE.write_text(json.dumps({"rows_file": ROWS_FILE.name, "margin": MARGIN, "effects": EFFECTS,
                                          "family_size": FAMILY_SIZE, "endpoints": out}, indent=1) + "\n",
                              encoding="utf-8")
        return
    keys = [tuple(k.split(":")) for k in args.only] if args.only else [k for k in PILOTS]
    out = []
    for e, t in keys:
        cached = Path(args.cache) / f"{e}-{t}.json" if args.cache else None
        if cached is not None and cached.is_file():
            r = json.loads(cached.read_text(encoding="utf-8"))
        else:
            r = check(e, t, args.draws)
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(json.dumps(r), encoding="utf-8")
        out.append(r)
        print(json.dumps(r), flush=True)
    if not args.only:
        CHECK_FILE.write_text(json.dumps({"endpoints": out}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
