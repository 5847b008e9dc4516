"""Per-item scores (items.parquet / items.csv) of a report, checked against scipy.

The rows must be the ones the reported metrics were computed from: recomputing a reported
Spearman from the file with scipy (an independent implementation) must give results.json's
point estimate.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from jaxjudge.data import load_task_data, to_prompt_range
from jaxjudge.experiment import ExperimentConfig, ModelSpec, TaskSpec
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import CellArrays, RandomPrior, report_from_arrays, write_run
from jaxjudge.report.items import COLUMNS
from jaxjudge.report.stores import Cell

METHODS = ("vanilla", "generate", "deb_t", "contextual")


def _config(tmp_path: Path, task: TaskSpec, scales: tuple[str, ...]) -> ExperimentConfig:
    model = tmp_path / "judge.gguf"
    model.write_bytes(b"a file with a sha256")
    return ExperimentConfig(
        name="items", models=(ModelSpec("sim", str(model)),), tasks=(task,), scales=scales,
        methods=METHODS, temperatures=(0.2,), deb_tp=(10,), lambdas_extended=None, n_boot=20,
        store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))


def _arrays(cfg: ExperimentConfig) -> dict[Cell, CellArrays]:
    """A noisy judge biased towards its third candidate, on the embedded SummEval subset."""
    rng = np.random.default_rng(3)
    data = load_task_data(cfg.tasks[0])
    human = data.human("coherence")
    out = {}
    for s in cfg.scales:
        scale = ScoreScale.parse(s)
        bonus = np.where(np.arange(scale.size) == 2, 2.0, 0.0)
        q = to_prompt_range(human, scale.lo, scale.hi, src=(1, 5)) + rng.normal(0, 0.7, len(human))
        lp = -((scale.values[None] - q[:, None]) ** 2) + bonus
        lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
        gen = np.where(rng.uniform(size=len(human)) < 0.1, np.nan, scale.values[np.argmax(lp, 1)])
        rand = {v: RandomPrior(bonus + rng.normal(0, 0.2, (12, scale.size)) - 2, rng.uniform(1, 3, 12)) for v in "RT"}
        out[Cell("sim", "summeval", "coherence", s)] = CellArrays(
            scale=scale, logprobs=lp, human=human, human_range=(1.0, 5.0), groups=data.groups(),
            example_ids=data.ids(), generated=gen, random=rand, content_free=bonus[None] - 1.0,
            split_labels=data.split_labels)
    return out


def _run(tmp_path: Path, task: TaskSpec, scales: tuple[str, ...] = ("1-5", "2-6")):
    cfg = _config(tmp_path, task, scales)
    arrays = _arrays(cfg)
    paths = write_run(report_from_arrays(arrays, cfg), tmp_path / "run")
    results = json.loads(paths["json"].read_text())
    return arrays, results, pd.read_parquet(paths["items"]), paths


def _estimate(results: dict, method: str, scale: str, reading: str = "expected@0.2") -> float:
    row = next(r for r in results["rows"] if (r["method"], r["scale"], r["score"]) == (method, scale, reading))
    return row["metrics"]["spearman"]["estimate"]


def test_kfold_items_are_the_reported_predictions(tmp_path):
    arrays, results, items, paths = _run(tmp_path, TaskSpec("summeval", ("coherence",), data="embedded",
                                                            split="kfold", n_folds=4))
    assert tuple(items.columns) == COLUMNS
    n = next(iter(arrays.values())).n
    # One row per item x range x reading x method: as many as results rows times items.
    assert len(items) == n * len(results["rows"])
    assert not items.duplicated(["model", "task", "aspect", "range", "reading", "method", "item_id"]).any()
    assert set(items["method"]) == {"vanilla", "generate", "deb_t_tp10", "contextual"}
    assert set(items["reading"]) == {"expected@0.2", "greedy", "generate"}
    assert (items["split"] == "test").all() and set(items["fold"]) == {0, 1, 2, 3}
    # A method without hyper-parameters: every fold scores an item the same, and the reported
    # k-fold Spearman is the mean over folds of the Spearman over the other folds' items.
    for scale in ("1-5", "2-6"):
        rows = items[(items["method"] == "vanilla") & (items["range"] == scale) & (items["reading"] == "expected@0.2")]
        per_fold = [stats.spearmanr(r["score"], r["human"])[0] for f in range(4) for r in [rows[rows["fold"] != f]]]
        assert np.mean(per_fold) == pytest.approx(_estimate(results, "vanilla", scale), abs=1e-5)
    two = items[items["range"] == "2-6"]
    np.testing.assert_allclose(two["score_human_scale"], two["score"] - 1.0)
    gen = items[(items["method"] == "generate") & (items["range"] == "1-5")]
    failed = np.isnan(arrays[Cell("sim", "summeval", "coherence", "1-5")].generated)
    assert gen["score"].isna().sum() == failed.sum()
    # The user's one line: join the scores to their own data on its ids.
    mine = pd.DataFrame({"id": load_task_data(TaskSpec("summeval", ("coherence",), data="embedded")).ids()})
    joined = mine.merge(items[items["method"] == "deb_t_tp10"], left_on="id", right_on="item_id")
    assert len(joined) == n * 2 * 2  # two ranges, two readings
    csv = pd.read_csv(paths["items_csv"], dtype={"item_id": str, "group": str})
    assert len(csv) == len(items) and list(csv.columns) == list(COLUMNS)
    np.testing.assert_allclose(csv["score"], items["score"])


def test_fixed_split_items_give_the_reported_spearman_of_a_tuned_method(tmp_path):
    data = load_task_data(TaskSpec("summeval", ("coherence",), data="embedded"))
    dev_doc = sorted(set(data.groups().tolist()))[0]
    _, results, items, _ = _run(tmp_path, TaskSpec("summeval", ("coherence",), data="embedded", split="fixed_docs",
                                                   dev_docs=(dev_doc,)), ("1-5",))
    assert set(items.loc[items["group"] == dev_doc, "split"]) == {"dev"}
    assert set(items.loc[items["group"] != dev_doc, "split"]) == {"test"} and items["fold"].isna().all()
    for method in ("deb_t_tp10", "vanilla", "generate"):
        reading = "generate" if method == "generate" else "expected@0.2"
        test = items[(items["method"] == method) & (items["range"] == "1-5") & (items["reading"] == reading)
                     & (items["split"] == "test")].dropna(subset=["score"])
        rho = stats.spearmanr(test["score"], test["human"])[0]
        assert rho == pytest.approx(_estimate(results, method, "1-5", reading), abs=1e-5)
