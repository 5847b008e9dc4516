"""The demo config is part of the package (an installed `jaxjudge demo` runs from any folder);
experiments/demo.py re-exports it. tests/wheel_check.sh installs a wheel and runs it."""

from pathlib import Path

import pytest

import jaxjudge
from jaxjudge.cli import _demo_config_path
from jaxjudge.experiment import load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("arg", [None, "ci", "all"])
def test_the_demo_config_is_a_package_file_equal_to_experiments_demo(arg):
    path = _demo_config_path()
    assert path.is_file() and path.parent == Path(jaxjudge.__file__).resolve().parent / "experiment"
    suffix = f":{arg}" if arg else ""
    assert load_config(f"{path}{suffix}") == load_config(f"{REPO / 'experiments' / 'demo.py'}{suffix}")
