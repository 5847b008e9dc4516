"""The one-command run on a data set unlike the built-in ones: its own field names, a human score
on 0-10, a group column and a template written for it, run from an empty folder; a template
naming a field the data lacks stops before any forward pass. Also: ``--help`` imports no jax,
and ``list``."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxjudge.cli import main

TEMPLATE = """You grade answers to quiz questions. Rate how correct the answer is, from {min} (wrong) to {max} (right).
{{/prefix}}

Question: {{Question}}
Answer: {{Answer}}

Correctness ({min}-{max}):
"""
FLAGS = ["--judge", "default", "--human", "rating", "--human-range", "0-10", "--group", "topic",
         "--ranges", "1-5,3-7", "--methods", "vanilla,deb_r", "--results", "out", "--stores", "st"]


def _folder(tmp_path: Path, n_topics: int = 11) -> Path:
    """An empty folder holding only qa.csv (2 answers per topic, a good one and a bad one) and qa.txt."""
    folder = tmp_path / "u1"
    folder.mkdir()
    with (folder / "qa.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question", "answer", "rating", "topic"])
        for i in range(n_topics):
            w.writerow([f"What is {i} plus {i}?", f"It is {2 * i}.", 10, f"topic{i}"])
            w.writerow([f"What is {i} plus {i}?", f"It is {2 * i + 7}, roughly.", i % 3, f"topic{i}"])
    (folder / "qa.txt").write_text(TEMPLATE)
    return folder


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAXJUDGE_XLA_CACHE", "JAXJUDGE_CACHE", "HF_HUB_CACHE", "HF_HOME", "MPLCONFIGDIR",
                        "XDG_CACHE_HOME", "XDG_CONFIG_HOME")}
    return {**env, "HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def test_help_imports_no_jax_and_list_names_what_is_built_in():
    code = ("import sys; from jaxjudge.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('jax imported:', 'jax' in sys.modules); main(['list', 'tasks']); main(['list', 'templates'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "examples:" in out and "jaxjudge sweep --data" in out
    assert "jax imported: False" in out
    assert "summeval" in out and "stsb_similarity.txt" in out


def test_list_methods_and_judges(capsys):
    assert main(["list", "methods"]) == 0 and main(["list", "judges"]) == 0
    out = capsys.readouterr().out
    assert "deb_r" in out and "vanilla" in out and "default" in out and "Hub id" in out


def test_a_field_the_data_lacks_is_one_line_before_any_forward_pass(tmp_path, monkeypatch, capsys):
    folder = _folder(tmp_path)
    (folder / "bad.txt").write_text(TEMPLATE.replace("{{Answer}}", "{{Reply}}"))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("JAXJUDGE_XLA_CACHE", "")  # see tests/cli/test_cli_errors.py
    assert main(["sweep", "--data", "qa.csv", "--template", "bad.txt", *FLAGS]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "{{Reply}}" in line and "qa.csv" in line, line
    assert sorted(p.name for p in folder.iterdir()) == ["bad.txt", "qa.csv", "qa.txt"]  # nothing written


def test_the_data_flags_are_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(_folder(tmp_path))
    with pytest.raises(SystemExit) as e:
        main(["sweep", "--data", "qa.csv", "--template", "qa.txt"])
    assert e.value.code == 2 and "also give --judge, --human, --human-range, --results, --stores" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "experiments/demo.py", "--data", "qa.csv"])
    monkeypatch.setenv("JAXJUDGE_XLA_CACHE", "")
    bad_range = [*FLAGS]
    bad_range[bad_range.index("0-10")] = "0-5"  # the human scores reach 10
    assert main(["sweep", "--data", "qa.csv", "--template", "qa.txt", *bad_range]) == 2
    assert "qa.csv, line 2, field 'rating': score 10 outside [0, 5]" in capsys.readouterr().err


@pytest.mark.slow
def test_the_one_command_writes_only_its_two_folders(tmp_path):
    folder, home = _folder(tmp_path), tmp_path / "home"
    home.mkdir()
    # batch calibration: a debiasing method that needs no extraction beyond the judge's scores
    flags = [*FLAGS]
    flags[flags.index("vanilla,deb_r")] = "vanilla,batch"
    cmd = [sys.executable, "-m", "jaxjudge.cli", "sweep", "--data", "qa.csv", "--template", "qa.txt", "--quiet", *flags,
           "--set", "n_boot=200"]
    run = subprocess.run(cmd, cwd=folder, env=_env(home), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == ["out", "qa.csv", "qa.txt", "st"]
    assert list(home.iterdir()) == []
    (results,) = (folder / "out").rglob("results.json")
    rows = json.loads(results.read_text())["rows"]
    for scale in ("1-5", "3-7"):
        (row,) = [r for r in rows if r["scale"] == scale and r["method"] == "vanilla" and r["score"] == "expected@0.2"]
        spearman = row["metrics"]["spearman"]
        assert spearman["low"] <= spearman["estimate"] <= spearman["high"] and spearman["low"] < spearman["high"]
    assert {r["method"] for r in rows} == {"vanilla", "batch"} and {r["task"] for r in rows} == {"qa"}
    # items.parquet: one row per item, range, reading and method, joinable to the data by item_id
    import pyarrow.parquet as pq

    items = pq.read_table(results.parent / "items.parquet").to_pylist()
    cells = {(r["scale"], r["score"], r["method"]) for r in rows}
    assert {(i["range"], i["reading"], i["method"]) for i in items} == cells
    assert len(items) == len({(i["range"], i["reading"], i["method"], i["item_id"]) for i in items}) == 22 * len(cells)
    with (folder / "qa.csv").open() as f:
        topics = {str(n): row["topic"] for n, row in enumerate(csv.DictReader(f), start=1)}
    assert {(i["item_id"], i["group"]) for i in items} == set(topics.items())
