"""Methods, metrics, tables and figures of `jaxjudge.report` on simulated judges.

The simulated judge knows the human score up to noise and adds a fixed bonus to the logit of
one candidate ("3"): a latent number bias. Its random-number prompts show the same bonus, so
Deb-R's prior is the bias, and removing it must restore the judge's ranking. Reference values
are recomputed here with scipy / numpy from the same predictions.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.data import to_prompt_range
from jaxjudge import metrics as M
from jaxjudge.debias import expected_score
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import (
    CellArrays,
    MethodOptions,
    RandomPrior,
    Results,
    evaluate_cell,
    flat_rows,
    headline_table,
    make_splits,
    markdown_report,
    read_csv,
    write_csv,
    write_run,
)
from jaxjudge.metrics.fold_stat import fold_arrays, fold_mean_stat
from jaxjudge.metrics.tau_b import pair_matrices, tau_from_sums
from jaxjudge.report import grids as C
from jaxjudge.report.methods import METHODS, Need

SCALE = ScoreScale(1, 5)
LAMS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def simulated_judge(seed=0, n_docs=12, per_doc=16, bias=3.0, bias_at=2, scale=SCALE, p_prompts=20):
    """A judge = Gaussian bump around a noisy reading of the human score + a bonus at `bias_at`."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    groups = np.repeat([f"doc{i}" for i in range(n_docs)], per_doc)
    human = np.round(rng.uniform(1, 5, n) * 3) / 3  # SummEval-like: thirds in [1, 5]
    quality = to_prompt_range(human, scale.lo, scale.hi, src=(1, 5)) + rng.normal(0, 0.5, n)
    values = scale.values
    bonus = np.zeros(scale.size)
    bonus[bias_at] = bias
    logits = -((values[None] - quality[:, None]) ** 2) / (2 * 0.7**2) + bonus
    # Full-vocabulary normalised: a per-row offset the candidates do not sum to one under.
    logprobs = logits - np.log(np.exp(logits).sum(1, keepdims=True)) - rng.uniform(0.1, 1.0, (n, 1))
    random_lp = bonus + rng.normal(0, 0.2, (p_prompts, scale.size)) - 2.0
    nll = rng.uniform(1.0, 3.0, p_prompts)
    return CellArrays(
        scale=scale, logprobs=logprobs, human=human, human_range=(1.0, 5.0), groups=groups,
        valid=rng.uniform(size=n) > 0.1, random={"R": RandomPrior(random_lp, nll)},
        content_free=random_lp[:3], example_ids=np.asarray([f"ex{i}" for i in range(n)]),
    )


OPTIONS = MethodOptions(
    methods=("vanilla", "deb_r", "contextual", "batch", "distribution"),
    temperatures=(0.2,), greedy=True, deb_tp=(10,), lambdas=LAMS, per_group=True, n_boot=200, seed=0,
)


@pytest.fixture(scope="module")
def biased():
    arrays = simulated_judge()
    splits = make_splits("kfold", arrays.groups, n_folds=4, seed=0)
    report = evaluate_cell(arrays, splits, OPTIONS, {"judge": "sim", "task": "summeval", "aspect": "coherence"})
    return arrays, splits, report


def _row(report, method, score):
    rows = [r for r in report.rows if r["method"] == method and r["score"] == score]
    assert len(rows) == 1, (method, score, [(r["method"], r["score"]) for r in report.rows])
    return rows[0]


def test_deb_r_removes_the_number_bias(biased):
    arrays, splits, report = biased
    van = _row(report, "vanilla", "greedy")["metrics"]["spearman"]["estimate"]
    deb = _row(report, "deb_r_tp10", "greedy")
    assert deb["metrics"]["spearman"]["estimate"] > van + 0.15, (van, deb["metrics"]["spearman"])
    # lambda chosen on each fold's dev documents, from the grid
    assert len(deb["hparams"]) == splits.dev.shape[0]
    for hp in deb["hparams"]:
        assert hp["lam"] in LAMS
    # the prior it divides by is the bias: most mass on "3"
    prior = report.aux["priors"]["R"]["tp10"]
    assert int(np.argmax(prior)) == 2 and prior[2] > 0.8
    # the paired delta is the difference of the two estimates
    d = deb["delta"]["spearman"]
    assert d["estimate"] == pytest.approx(deb["metrics"]["spearman"]["estimate"] - van, abs=1e-5)
    assert d["low"] <= d["estimate"] <= d["high"] and d["low"] > 0
    rel = deb["relative"]
    assert rel["metric"] == "spearman" and rel["vs_generate"] is None  # no generation in this cell
    assert rel["vs_vanilla"] == pytest.approx((deb["metrics"]["spearman"]["estimate"] - van) / abs(van))


def test_vanilla_metrics_match_scipy(biased):
    arrays, splits, report = biased
    human = arrays.human
    # The predictions are the library's float32 ones (at T = 0.2 many are tied in float32);
    # the metrics on them are recomputed independently.
    probs = np.asarray(jax.nn.softmax(jnp.asarray(arrays.logprobs) / 0.2, -1), np.float64)
    expected = np.asarray(expected_score(jnp.asarray(arrays.logprobs), SCALE.values, 0.2), np.float64)
    greedy = SCALE.values[np.argmax(arrays.logprobs, 1)]
    for score, pred in (("expected@0.2", expected), ("greedy", greedy)):
        row = _row(report, "vanilla", score)
        ref = {name: [] for name in ("pearson", "spearman", "kendall", "mse", "spearman_doc", "validity", "sdd")}
        for test in splits.test:
            x, y = pred[test], human[test]
            ref["pearson"].append(st.pearsonr(x, y).statistic)
            ref["spearman"].append(st.spearmanr(x, y).statistic)
            ref["kendall"].append(st.kendalltau(x, y, variant="b").statistic)
            ref["mse"].append(np.mean((x - y) ** 2))
            ref["validity"].append(np.mean(arrays.valid[test]))
            docs = [st.spearmanr(x[arrays.groups[test] == g], y[arrays.groups[test] == g]).statistic
                    for g in np.unique(arrays.groups[test])]
            ref["spearman_doc"].append(np.nanmean(docs))
            # SDD by hand: the human score split over its two integer neighbours, KL(Q || P)
            p = probs[test]  # no floor (jaxjudge.metrics.sdd computes the exact KL)
            lo = np.floor(y).astype(int)
            frac = y - lo
            kl = []
            for i in range(len(y)):
                q = np.zeros(5)
                q[lo[i] - 1] += 1 - frac[i]
                if frac[i] > 0:
                    q[lo[i]] += frac[i]
                nz = q > 0
                kl.append(np.sum(q[nz] * np.log(q[nz] / p[i][nz])))
            ref["sdd"].append(np.mean(kl))
        for name, vals in ref.items():
            got = row["metrics"][name]
            if name == "sdd" and score == "greedy":
                assert got["estimate"] is None  # SDD needs a distribution
                continue
            assert got["estimate"] == pytest.approx(np.mean(vals), abs=2e-5), (score, name)
            assert got["low"] <= got["estimate"] + 1e-6 and got["estimate"] - 1e-6 <= got["high"], (score, name)
        assert row["n_test"] == arrays.n and row["n_folds"] == 4


def test_kendall_group_quadratic_form_matches_metrics_and_scipy():
    """tau-b of a grouped resample read from the [G, G] reduced pair sums (c^T A^T S A c)
    against scipy on the literally repeated rows and against the weighted metric."""
    rng = np.random.default_rng(3)
    n, g = 90, 9
    x = rng.integers(0, 5, n).astype(float)  # many ties
    y = np.round(rng.uniform(1, 5, n) * 3) / 3
    group = np.repeat(np.arange(g), n // g)
    fixed = np.ones(n, np.float32)
    fixed[[4, 50]] = 0  # parse failures: weight 0 in every resample
    c = rng.integers(0, 3, g).astype(np.float32)  # a resample's group multiplicities
    w = c[group] * fixed
    a = np.eye(g, dtype=np.float32)[group] * fixed[:, None]  # [N, G]
    sums = [float(c @ (a.T @ np.asarray(s) @ a) @ c) for s in pair_matrices(x, y)]
    got = float(tau_from_sums(*sums))
    keep = w > 0
    literal = st.kendalltau(np.repeat(x[keep], w[keep].astype(int)), np.repeat(y[keep], w[keep].astype(int)))
    assert got == pytest.approx(literal.statistic, abs=1e-6)
    assert got == pytest.approx(float(M.kendall(x, y, weights=w)), abs=1e-6)
    assert np.isnan(float(tau_from_sums(1.0, 0.0, 4.0)))  # x constant: undefined


@pytest.mark.parametrize("by_group", [True, False])
def test_cell_statistic_per_fold_layout_equals_literal_resample(by_group, monkeypatch):
    """One bootstrap resample of the cell statistic (folds of unequal size, parse failures,
    a delta) against scipy on the literally repeated test rows of each fold; the pooled
    Spearman's ranks and Kendall's pair sums reduced to groups, and from the rows."""
    from jaxjudge.metrics import fold_stat

    monkeypatch.setattr(fold_stat, "RANK_MATRIX_ROWS_PER_GROUP", 0 if by_group else 10**9)
    monkeypatch.setattr(fold_stat, "SUM_ROWS_PER_GROUP", 0 if by_group else 10**9)
    if not by_group:
        monkeypatch.setattr(fold_stat, "_kendall_by_group", lambda *args: False)
    jax.clear_caches()  # the choice is made at trace time: no compiled statistic is reused
    rng = np.random.default_rng(5)
    per, n_groups = 5, 12
    n = per * n_groups
    group = np.repeat(np.arange(n_groups), per)
    fold_of_group = np.array([0] * 5 + [1] * 4 + [2] * 3)  # fold sizes 25, 20, 15: padding
    test = (fold_of_group[group][:, None] == np.arange(3)[None]).astype(np.float32)  # [N, F]
    pred = rng.integers(1, 6, (n, 3)).astype(np.float32)  # many ties
    base = pred + rng.normal(0, 1, (n, 3)).astype(np.float32)
    human = (np.round(rng.uniform(1, 5, n) * 3) / 3).astype(np.float32)
    ok = np.ones(n, np.float32)
    ok[[3, 31]] = 0  # parse failures: weight 0 wherever they are
    valid = ok.copy()
    drawn = np.array([0, 0, 2, 3, 5, 6, 6, 7, 9, 10, 11, 11])  # groups 1, 4, 8 left out, some twice
    w = np.bincount(drawn, minlength=n_groups)[group].astype(np.float32)  # one resample
    names = ("pearson", "spearman", "kendall", "mse", "sdd", "validity", "spearman_doc", "kendall_doc",
             "delta_spearman", "delta_pearson")
    logits = rng.normal(0, 2, (n, 3, 5))
    logp = (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)
    hrel = np.clip(human - 1, 0, 4)
    arrays = fold_arrays(pred, base, human, hrel, logp, test, ok, valid, group)
    got = np.asarray(jax.jit(fold_mean_stat(names, n_groups))(arrays, jnp.asarray(w)))

    def rep(v, sel):
        return np.repeat(v[sel], w[sel].astype(int))

    want = {k: [] for k in names}
    for f in range(3):
        sel = (test[:, f] > 0) & (w > 0) & (ok > 0)
        x, y, xb = rep(pred[:, f], sel), rep(human, sel), rep(base[:, f], sel)
        want["pearson"].append(st.pearsonr(x, y).statistic)
        want["delta_pearson"].append(st.pearsonr(x, y).statistic - st.pearsonr(xb, y).statistic)
        q = np.zeros((n, 5))  # the human score split over its two neighbours, by hand
        lower = np.floor(hrel).astype(int)
        q[np.arange(n), lower] = 1 - (hrel - lower)
        q[np.arange(n), np.minimum(lower + 1, 4)] += hrel - lower
        kl = np.sum(np.where(q > 0, q * (np.log(np.where(q > 0, q, 1)) - logp[:, f]), 0), -1)
        want["sdd"].append(np.mean(rep(kl, sel)))
        want["spearman"].append(st.spearmanr(x, y).statistic)
        want["kendall"].append(st.kendalltau(x, y).statistic)
        want["mse"].append(np.mean((x - y) ** 2))
        rows = test[:, f] * w
        want["validity"].append(np.sum(rows * valid) / np.sum(rows))
        want["delta_spearman"].append(st.spearmanr(x, y).statistic - st.spearmanr(xb, y).statistic)
        for name, fn in (("spearman_doc", st.spearmanr), ("kendall_doc", st.kendalltau)):
            vals, wts = [], []
            for g in np.unique(group[sel]):
                in_g = sel & (group == g)
                xg, yg = rep(pred[:, f], in_g), rep(human, in_g)
                if np.unique(xg).size > 1 and np.unique(yg).size > 1:
                    vals.append(fn(xg, yg).statistic)
                    wts.append(w[in_g].mean())
            want[name].append(np.average(vals, weights=wts))
    for i, name in enumerate(names):
        assert got[i] == pytest.approx(np.mean(want[name]), abs=1e-5), name


def test_distribution_calibration_fits_dev_labels_only(biased):
    arrays, splits, report = biased
    opts = MethodOptions(**{**OPTIONS.__dict__, "methods": ("distribution",), "greedy": False})
    q = [hp["q"] for hp in _row(report, "distribution", "expected@0.2")["hparams"]]
    assert all(abs(sum(qf) - 1) < 1e-4 for qf in q)
    dev0 = splits.dev[0]
    # Moving every human score outside fold 0's dev documents leaves fold 0's fit unchanged...
    moved = CellArrays(**{**arrays.__dict__, "human": np.where(dev0, arrays.human, 6.0 - arrays.human)})
    q_moved = [hp["q"] for hp in evaluate_cell(moved, splits, opts).rows[0]["hparams"]]
    assert q_moved[0] == q[0]
    assert q_moved[1] != q[1]  # ...while the folds whose dev documents moved refit


def test_contrastive_recovers_from_an_assistant_sharing_the_bias(biased):
    arrays, splits, _ = biased
    rng = np.random.default_rng(5)
    bonus = np.zeros(5)
    bonus[2] = 3.0
    # The small model shares the bias but not the judgement.
    asst = bonus + rng.normal(0, 0.3, arrays.logprobs.shape)
    arrays = CellArrays(**{**arrays.__dict__, "assistant": asst})
    opts = MethodOptions(**{**OPTIONS.__dict__, "methods": ("vanilla", "contrastive"), "temperatures": ()})
    rep = evaluate_cell(arrays, splits, opts)
    van = _row(rep, "vanilla", "greedy")["metrics"]["spearman"]["estimate"]
    con = _row(rep, "contrastive", "greedy")
    assert con["metrics"]["spearman"]["estimate"] > van + 0.15
    for hp in con["hparams"]:
        assert hp["lam"] in (0.01, 0.1, 0.5, 1.0) and hp["t_main"] in (0.5, 1.0, 2.0, 3.0, 5.0)
    grid = rep.aux["grids"]["contrastive|greedy"]
    assert len(grid["dev"]) == 20 and len(grid["params"]["lam"]) == 20


def _results(report):
    return Results(experiment="unit", rows=report.rows, aux=[report.aux], notes=["a documented note"])


def test_tables_round_trip(biased, tmp_path):
    _, _, report = biased
    res = _results(report)
    path = res.save_json(tmp_path / "r.json")
    again = Results.load_json(path)
    assert again.rows == res.rows and again.aux == res.aux and again.notes == res.notes
    columns, flat = flat_rows(res)
    write_csv(res, tmp_path / "r.csv")
    back = read_csv(tmp_path / "r.csv")
    assert back == [{c: r[c] for c in columns} for r in flat]
    assert {"spearman", "spearman_low", "spearman_high", "spearman_doc", "delta_spearman", "hparams"} <= set(columns)
    deb = _row(report, "deb_r_tp10", "greedy")
    csv_row = next(r for r in back if r["method"] == "deb_r_tp10" and r["score"] == "greedy")
    assert csv_row["spearman"] == deb["metrics"]["spearman"]["estimate"]
    assert json.loads(csv_row["hparams"]) == deb["hparams"]
    md = markdown_report(res, {"command": "jaxjudge report x.py"})
    est = deb["metrics"]["spearman"]
    assert f"{est['estimate']:.3f} [{est['low']:.3f}, {est['high']:.3f}]" in md
    assert "a documented note" in md and "jaxjudge report x.py" in md
    table = headline_table(res, "spearman")
    assert len(table.splitlines()) == 2 + 2  # header, rule, one line per reading (expected@0.2, greedy)
    assert "deb_r_tp10" in table.splitlines()[0]


def test_write_run_writes_valid_pngs_and_metadata(biased, tmp_path):
    _, _, report = biased
    res = _results(report)
    paths = write_run(res, tmp_path / "run", {"command": "jaxjudge report experiments/demo.py", "seed": 0})
    figures = [p for k, p in paths.items() if k.startswith("figure:")]
    names = sorted(p.name for p in figures)
    assert any(n.startswith("score_distribution_") for n in names)
    assert any(n.startswith("latent_prior_") for n in names)
    assert any(n.startswith("lambda_curve_") for n in names)
    import matplotlib.image as mpimg

    for p in figures:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        img = mpimg.imread(p)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        assert img[..., :3].std() > 0.01  # not a blank canvas
    meta = json.loads(paths["metadata"].read_text())
    assert meta["command"] == "jaxjudge report experiments/demo.py"
    assert set(meta["files"]) >= {"results.json", "results.csv", "results.md"}
    assert Results.load_json(paths["json"]).rows == res.rows


def test_headline_table_says_why_generation_has_no_correlation():
    label = dict(experiment="x", judge="j", task="summeval", aspect="coherence", scale="1-5")
    iv = {"estimate": 0.25, "low": 0.1, "high": 0.4}
    rows = [
        {**label, "method": "vanilla", "score": "expected@0.2", "n": 64, "metrics": {"spearman": iv}},
        # Every parsed reply says "1": the correlation is undefined, and the cell says why.
        {**label, "method": "generate", "score": "generate", "n": 64, "parse_failures": 41,
         "n_distinct_parsed": 1, "metrics": {"spearman": {"estimate": None, "low": None, "high": None}}},
    ]
    line = headline_table(Results("x", rows), "spearman").splitlines()[2]
    assert line.endswith("| 0.250 [0.100, 0.400] | - (23/64 parsed, all equal) |")
    rows[1].update(parse_failures=4, n_distinct_parsed=5, metrics={"spearman": iv})
    line = headline_table(Results("x", rows), "spearman").splitlines()[2]
    assert line.endswith("| 0.250 [0.100, 0.400] (60/64 parsed) |")
    # Replies that differ overall but not within one fold's test side: undefined there too.
    rows[1].update(n_distinct_parsed=3, n_distinct_parsed_test=1, metrics={"spearman": {"estimate": None}})
    line = headline_table(Results("x", rows), "spearman").splitlines()[2]
    assert line.endswith("| - (60/64 parsed, all equal on a test side) |")
    # Where the row counts its reported rows apart, the note reads those (as validity does).
    rows[1].update(n_test=48, parse_failures_test=3, n_distinct_parsed_test=4, metrics={"spearman": iv})
    line = headline_table(Results("x", rows), "spearman").splitlines()[2]
    assert line.endswith("| 0.250 [0.100, 0.400] (45/48 parsed) |")


def test_portable_path_keeps_machine_folders_out_of_metadata(tmp_path, monkeypatch):
    from jaxjudge.experiment import portable_path

    home = tmp_path / "home"
    repo = home / "work" / "projects" / "repo"
    for d in (repo / "stores", home / "work" / "projects" / "shared" / "data", home / "models", tmp_path / "elsewhere"):
        d.mkdir(parents=True)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("HOME", str(home))
    assert portable_path(repo / "stores") == "stores"
    assert portable_path("relative/as/given") == "relative/as/given"
    # A data folder next to the checkout: relative, as the experiment configs name it.
    assert portable_path(home / "work" / "projects" / "shared" / "data") == "../shared/data"
    # Three or more levels up: under the home folder written with "~", else absolute.
    assert portable_path(home / "models") == "~/models"
    assert portable_path(tmp_path / "elsewhere") == str((tmp_path / "elsewhere").resolve())


def test_command_line_names_the_module_run_with_python_m():
    from pathlib import Path

    import jaxjudge.cli
    from jaxjudge.experiment import command_line

    cli = str(Path(jaxjudge.cli.__file__).resolve())
    assert command_line([cli, "report", "experiments/demo.py:ci"]) == "python -m jaxjudge.cli report experiments/demo.py:ci"
    assert command_line(["/usr/local/bin/jaxjudge", "demo", "--ci"]) == "jaxjudge demo --ci"


def test_method_registry_covers_the_config_methods_and_names_missing_arrays():
    assert set(METHODS) == set(C.METHODS)
    assert all(isinstance(need, Need) for m in METHODS.values() for need in m.needs)
    # The fine contrastive grids are the options' defaults (the config does not set them).
    assert MethodOptions().contrastive_lams_fine == C.CONTRASTIVE_LAMS_FINE
    assert MethodOptions().contrastive_temps_fine == C.CONTRASTIVE_TEMPS_FINE
    arrays = simulated_judge(n_docs=4, per_doc=4)
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    opts = MethodOptions(methods=("vanilla", "deb_t"), temperatures=(1.0,), greedy=False, n_boot=10)
    with pytest.raises(ValueError, match=r"method 'deb_t' needs random-number arrays \(random_t store\)"):
        evaluate_cell(arrays, splits, opts)
