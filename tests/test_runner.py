"""tests/run_by_file.py: a file marked ``pytest.mark.alone`` runs with nothing beside it, found
from the file's own marker (a new file needs no edit of the runner), and the others start
longest first by the last run's record, unknown files before known ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parent / "run_by_file.py"

BODY = """
import time
from pathlib import Path

import pytest
{mark}

def test_it():
    log = Path({log!r})
    with open(log, "a") as f:
        f.write("{name} start %.6f\\n" % time.time())
    time.sleep(1.5)
    with open(log, "a") as f:
        f.write("{name} end %.6f\\n" % time.time())
"""


def _runner():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_by_file", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_marker_is_read_from_the_source(tmp_path):
    rb = _runner()
    cases = {
        "pytestmark = pytest.mark.alone\n": True,
        "pytestmark = [pytest.mark.slow, pytest.mark.alone]\n": True,
        "from pytest import mark\npytestmark = (mark.alone,)\n": True,
        "pytestmark = pytest.mark.slow\n": False,
        "# pytestmark = pytest.mark.alone\n": False,
        "alone = pytest.mark.alone\n": False,  # not the module's marks
        "def f():\n    pytestmark = pytest.mark.alone\n": False,  # not at module level
    }
    for i, (src, want) in enumerate(cases.items()):
        f = tmp_path / f"test_{i}.py"
        f.write_text("import pytest\n" + src)
        assert rb.runs_alone(f) is want, src


def test_order_puts_alone_files_first_then_unknown_then_the_longest(tmp_path):
    rb = _runner()
    names = ["test_a.py", "test_b.py", "test_c.py", "test_d.py", "sub/test_e.py"]
    for n in names:
        (tmp_path / n).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / n).write_text("import pytest\n" + ("pytestmark = pytest.mark.alone\n" if n == "test_d.py" else ""))
    durations = {"test_a.py": 5.0, "test_b.py": 50.0, "sub/test_e.py": 20.0, "test_d.py": 1.0}
    got = rb.order([tmp_path / n for n in names], tmp_path, durations)
    assert [(f.relative_to(tmp_path).as_posix(), alone) for f, alone in got] == [
        ("test_d.py", True), ("test_c.py", False), ("test_b.py", False), ("sub/test_e.py", False),
        ("test_a.py", False)]


def test_short_files_share_processes_up_to_the_batch_budget_and_their_times_are_split(tmp_path):
    rb = _runner()
    names = ["test_long.py", "test_s1.py", "test_s2.py", "test_s3.py", "test_alone.py", "test_new.py"]
    for n in names:
        (tmp_path / n).write_text("import pytest\n" + ("pytestmark = pytest.mark.alone\n" if n == "test_alone.py" else ""))
    # SHORT_S 25, BATCH_S 60: s1 + s2 (24 + 20 = 44) fit one process, s3 (20) would pass 60;
    # the alone file stays alone even when short; the unknown one runs on its own.
    durations = {"test_long.py": 90.0, "test_s1.py": 24.0, "test_s2.py": 20.0, "test_s3.py": 20.0,
                 "test_alone.py": 3.0}
    got = rb.units(rb.order([tmp_path / n for n in names], tmp_path, durations), tmp_path, durations)
    assert [([f.name for f in fs], alone) for fs, alone in got] == [
        (["test_alone.py"], True), (["test_new.py"], False), (["test_long.py"], False),
        (["test_s1.py", "test_s2.py"], False), (["test_s3.py"], False)]
    # a shared process's wall time: each file's tests, then the rest split equally
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite>'
                   '<testcase classname="tests.sub.test_a" name="t1" time="3.0"/>'
                   '<testcase classname="tests.sub.test_a.TestK" name="t2" time="1.0"/>'
                   '<testcase classname="tests.test_b" name="t3" time="2.0"/>'
                   '</testsuite></testsuites>')
    assert rb.split_times(xml, ["sub/test_a.py", "test_b.py"], 10.0) == {"sub/test_a.py": 6.0, "test_b.py": 4.0}
    assert rb.split_times(tmp_path / "missing.xml", ["a.py", "b.py"], 10.0) == {"a.py": 5.0, "b.py": 5.0}


@pytest.mark.slow
def test_a_new_marked_file_runs_with_nothing_beside_it(tmp_path):
    """Three new files, two at a time: the marked one shares no second of its run with the
    others, which overlap each other; the record then holds all three."""
    root, log = tmp_path / "suite", tmp_path / "log.txt"
    root.mkdir()
    for name, mark in (("one", ""), ("lonely", "pytestmark = pytest.mark.alone\n"), ("two", "")):
        (root / f"test_{name}.py").write_text(BODY.format(mark=mark, log=str(log), name=name))
    proc = subprocess.run([sys.executable, str(RUNNER), "--jobs", "2", "--root", str(root)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "3 passed, 0 failed" in proc.stdout
    spans: dict[str, list[float]] = {}
    for line in log.read_text().split("\n"):
        if line:
            name, _, t = line.split()
            spans.setdefault(name, []).append(float(t))

    def overlap(a, b):
        return min(spans[a][1], spans[b][1]) > max(spans[a][0], spans[b][0])

    assert not overlap("lonely", "one") and not overlap("lonely", "two")
    assert overlap("one", "two")  # the unmarked files did run side by side
    record = json.loads((root / "durations.json").read_text())["seconds"]
    assert set(record) == {"test_one.py", "test_lonely.py", "test_two.py"}


def test_xla_flags_keep_the_run_flags_and_replace_the_device_count():
    from tests import run_by_file
    from tests.xla_flags import xla_flags

    flags = "--xla_cpu_use_fusion_emitters=false --xla_force_host_platform_device_count=8 --other=1"
    assert xla_flags(2, flags) == ("--xla_cpu_use_fusion_emitters=false --other=1 "
                                   "--xla_force_host_platform_device_count=2")
    assert xla_flags(None, flags) == "--xla_cpu_use_fusion_emitters=false --other=1"
    assert xla_flags(1, "") == "--xla_force_host_platform_device_count=1"
    assert run_by_file.compile_mode(True, flags) == {}
    fast = run_by_file.compile_mode(False, "--other=1")
    assert fast["XLA_FLAGS"] == "--other=1 " + run_by_file.FAST_XLA_FLAGS
    assert fast["JAXJUDGE_TEST_FAST_COMPILE"] == "1"
