"""The main job end to end (reduced): `jaxjudge demo --ci`, `report` again from its stores, and
the notebooks executed top to bottom against them.

The plumbing (the table, the run folder, resume from the stores, a store of another model, the
notebooks) runs on the tiny random judge with SmolLM2's tokenizer (tests/tiny_judge.py, as a
Hugging Face folder): what it checks does not depend on the judge's weights. One smoke test runs
`jaxjudge demo` on the real embedded SmolLM2 file, reduced to one range.
"""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["XLA_FLAGS"] = xla_flags()  # one device, as a user's run
    return subprocess.run([sys.executable, "-m", "jaxjudge.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)


# The tiny judge's folder is named so that tpu_colab.ipynb, which names a judge by its folder,
# gives it the name the demo run stored it under.
TINY = "tiny-judge"


@pytest.fixture(scope="module")
def tiny_folder(tiny_hf):
    assert tiny_hf.name == TINY
    return tiny_hf


def _tiny_models(folder, sha256=None) -> tuple[str, str, str]:
    """``--set`` arguments that put the tiny judge in the demo's place, with 200 resamples
    (a fifth of the demo's: the report's cost, not what these tests check)."""
    spec = f"'name': '{TINY}', 'path': '{folder}'" + (f", 'sha256': '{sha256}'" if sha256 else "")
    return f"models=[{{{spec}}}]", "--set", "n_boot=200"


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory, tiny_folder):
    """experiments/demo.py:ci with the tiny judge in place of SmolLM2, as a config file (the
    notebooks take a config by name, not overrides)."""
    path = tmp_path_factory.mktemp("config") / "demo_tiny.py"
    path.write_text(
        "from jaxjudge.experiment import load_config, with_overrides\n\n\n"
        "def get_config(arg=None):\n"
        f"    cfg = load_config({str(REPO / 'experiments' / 'demo.py:ci')!r})\n"
        f"    return with_overrides(cfg, {{'models': [{{'name': {TINY!r}, 'path': {str(tiny_folder)!r}}}], "
        "'n_boot': 200})\n")
    return path


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, tiny_folder):
    work = tmp_path_factory.mktemp("demo")
    from jaxjudge.models.weights_cache import source_sha256

    sha = source_sha256(tiny_folder, verify=True)
    proc = _cli("demo", "--ci", "--quiet", "--set", *_tiny_models(tiny_folder, sha), "--stores", str(work / "stores"),
                "--results", str(work / "results"), "--run", "first", cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return work, proc.stdout, sha


@pytest.mark.optimized
def test_demo_on_the_embedded_judge(tmp_path):
    """`jaxjudge demo` as a user runs it, on the real SmolLM2 file, reduced: one range, 10 of the
    16 documents (the fewest that still give the grouped bootstrap its interval), contextual
    calibration beside vanilla (its three content-free prompts cost little; Deb-R's 100
    random-number prompts on real weights are checked by test_engine's SmolLM2 random-number
    test), 200 resamples: the embedded judge's numbers come out, under its file's sha256."""
    from jaxjudge.models import default_model_path

    task = ("tasks=[{'task': 'summeval', 'aspects': ['coherence'], 'data': 'embedded_wide', 'split': 'kfold', "
            "'n_folds': 4, 'subset': {'reason': 'smoke test', 'n_docs': 10}}]")
    proc = _cli("demo", "--ci", "--quiet", "--set", task, "--set", "scales=['1-5']",
                "--set", "methods=['vanilla', 'contextual']", "--set", "temperatures=[0.2]", "--set", "n_boot=200",
                "--set", "primary={'method': 'contextual', 'versus': 'vanilla', 'statistic': '1-5', "
                "'score': 'expected@0.2'}", "--stores", str(tmp_path / "stores"),
                "--results", str(tmp_path / "results"), "--run", "smoke", cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert "smollm2-135m, summeval coherence: spearman by score range, reading expected@0.2 (95% intervals)" in out
    assert re.search(r"Primary endpoint \(registered before extraction, plan [0-9a-f]{12} of \S+; 95% interval, "
                     r"unadjusted\): contextual − vanilla", " ".join(out.split()))
    meta = json.loads((tmp_path / "results" / "demo" / "smoke" / "metadata.json").read_text())
    assert meta["models"]["smollm2-135m"]["sha256"] == hashlib.sha256(default_model_path().read_bytes()).hexdigest()
    rows = json.loads((tmp_path / "results" / "demo" / "smoke" / "results.json").read_text())["rows"]
    assert {r["method"] for r in rows} >= {"vanilla", "contextual"}
    vanilla = next(r for r in rows if r["method"] == "vanilla" and r["scale"] == "1-5" and r["score"] == "expected@0.2")
    assert vanilla["n"] == 40, vanilla["n"]  # 10 documents x 4 summaries, each reported once
    sp = vanilla["metrics"]["spearman"]
    assert sp["low"] <= sp["estimate"] <= sp["high"]


def test_demo_prints_the_table_and_writes_a_run(demo_run, tiny_folder):
    work, out, sha = demo_run
    lines = out.splitlines()
    assert re.search(r"Primary endpoint \(registered before extraction, plan [0-9a-f]{12} of \S+; 95% interval, "
                     r"unadjusted\): deb_t_tp10 − vanilla", " ".join(out.split()))
    assert f"{TINY}, summeval coherence: spearman by score range, reading expected@0.2 (95% intervals)" in out
    head = next(line for line in lines if line.startswith("method ") and "1-5" in line)
    assert head.split() == ["method", "1-5", "3-7"]
    # Fits a 100-column terminal; 16 documents give intervals in most cells (a cell without one
    # carries a footnote mark instead, explained once below the table).
    # The run folder's path (the caller's --results, a long temporary path here) is printed on a
    # line of its own and is the one line allowed to be wider.
    folder = str(work / "results" / "demo" / "first")
    assert lines[-1] == folder and lines[-2].startswith("report: ")
    assert max(len(line) for line in lines if line != folder) <= 100, [l for l in lines if len(l) > 100]
    table = lines[lines.index(head) + 1:]
    table = table[:next(i for i, line in enumerate(table) if not line.strip())]
    cells = [c for line in table for c in line.split("  ")[1:] if c.strip()]
    assert len(table) == 9 and sum("[" in c for c in cells) > len(cells) / 2, table
    run = work / "results" / "demo" / "first"
    for name in ("results.json", "results.csv", "results.md", "metadata.json"):
        assert (run / name).is_file(), name
    assert list((run / "figures").glob("*.png"))
    meta = json.loads((run / "metadata.json").read_text())
    assert meta["command"].startswith("python -m jaxjudge") or "demo" in meta["command"]
    assert meta["models"][TINY]["sha256"] == sha
    rows = json.loads((run / "results.json").read_text())["rows"]
    methods = {r["method"] for r in rows}
    assert {"vanilla", "generate", "deb_r_tp10", "deb_t_tp10", "contextual", "batch", "distribution"} <= methods


def test_report_recomputes_from_the_stores_without_a_forward_pass(demo_run, tiny_folder):
    work, _, _ = demo_run
    # A second extract finds every job in the store; report then reproduces the numbers.
    again = _cli("extract", str(REPO / "experiments" / "demo.py:ci"), "--quiet", "--set", *_tiny_models(tiny_folder),
                 "--stores", str(work / "stores"), cwd=REPO)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "computed " not in again.stdout and again.stdout.count("cached") >= 10
    rep = _cli("report", str(REPO / "experiments" / "demo.py:ci"), "--set", *_tiny_models(tiny_folder),
               "--stores", str(work / "stores"), "--results", str(work / "results"), "--run", "second", cwd=REPO)
    assert rep.returncode == 0, rep.stderr[-4000:]
    first = json.loads((work / "results" / "demo" / "first" / "results.json").read_text())["rows"]
    second = json.loads((work / "results" / "demo" / "second" / "results.json").read_text())["rows"]
    assert first == second


def test_a_store_from_another_model_is_refused(demo_run, tiny_folder, tmp_path):
    work, _, _ = demo_run
    rep = _cli("report", str(REPO / "experiments" / "demo.py:ci"), "--set", *_tiny_models(tiny_folder, "0" * 64),
               "--stores", str(work / "stores"), "--results", str(tmp_path), cwd=REPO)
    assert rep.returncode != 0
    assert "another model" in rep.stderr or "sha256" in rep.stderr


def _run_notebook(name: str, env: dict[str, str], folder: Path):
    """Runs a notebook in ``folder`` (what it writes stays there), the committed stores read from
    this checkout (JAXJUDGE_REPO_DIR) and this environment's commands first on the PATH (``!jaxjudge``)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    env = {"JAXJUDGE_REPO_DIR": str(REPO), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           **env}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
        nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def test_ablation_notebook_reads_the_committed_stores_by_default(tmp_path):
    """No model and no environment: the committed STS-B stores, tables with intervals and two
    inline figures (no forced backend)."""
    nb = _run_notebook("score_range_ablation.ipynb", {}, tmp_path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs)
    assert "Spearman stsb similarity vanilla" in printed and "[" in printed
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2
    assert "matplotlib.use" not in "".join(c.source for c in nb.cells)


def test_ablation_notebook_without_the_data_shows_the_committed_report(tmp_path):
    """A runtime without the human scores (a fresh Colab): the notebook says so and shows the
    committed report of the same stores, with its intervals and both figures."""
    (tmp_path / "data").mkdir()
    nb = _run_notebook("score_range_ablation.ipynb", {"JAXJUDGE_DATA_DIR": str(tmp_path / "data")}, tmp_path)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs)
    assert "No human scores for stsb" in printed
    assert "results/score_range_bias/stsb/results.json" in printed
    committed = json.loads((REPO / "results" / "score_range_bias" / "stsb" / "results.json").read_text())
    row = next(r for r in committed["rows"] if r["method"] == "vanilla" and r["scale"] == "1-5"
               and r["score"] == "expected@0.2")
    sp = row["metrics"]["spearman"]
    assert f"1-5 {sp['estimate']:+.3f} [{sp['low']:+.3f}, {sp['high']:+.3f}]" in printed
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2


@pytest.mark.parametrize("name", ["quickstart.ipynb", "score_range_ablation.ipynb", "tpu_colab.ipynb"])
def test_notebook_runs_top_to_bottom(demo_run, tiny_folder, tiny_config, name, tmp_path):
    """Each notebook in an empty folder, its judge the tiny one (the quickstart's user CSV through
    the one command and the library; the others against the demo run's stores); its figures
    shown inline (no notebook forces a matplotlib backend)."""
    work, _, _ = demo_run
    nb = _run_notebook(name, {"JAXJUDGE_STORES": str(work / "stores"), "JAXJUDGE_NB_JUDGE": str(tiny_folder),
                              "JAXJUDGE_CONFIG": str(tiny_config),
                              "XLA_FLAGS": xla_flags(1)}, tmp_path)  # one device, as a user's
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs)
    assert "spearman" in printed.lower() or "vanilla=" in printed
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert "matplotlib.use" not in "".join(c.source for c in nb.cells)
    if name == "tpu_colab.ipynb":
        # On this CPU: the judge on a one-device mesh; every job read from the demo's stores.
        assert "cpu: 1 device(s)" in printed and "mesh: {'data': 1, 'model': 1}" in printed
        assert "0 computed now" in printed and "Primary endpoint" in printed
        assert sum("image/png" in o.get("data", {}) for o in outputs) >= 2
