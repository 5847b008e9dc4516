#!/usr/bin/env bash
# CI: the notebooks executed from the built wheel. tests/wheel_check.sh builds a wheel of this
# checkout, installs it into a fresh virtual environment in an empty folder (with
# constraints.txt's versions) and runs `jaxjudge demo --ci` there; its environment is kept
# (KEEP=1), the notebook tools are added to it (ipykernel, nbclient, nbformat, at
# constraints.txt's versions), and every notebook runs top to bottom with that environment's
# kernel in an empty folder of its own (.ci/run_notebooks.py), with the empty home of the wheel
# check: the checkout is on no path. Only score_range_ablation.ipynb reads the checkout, for
# its committed stores (JAXJUDGE_REPO_DIR). Fails when any notebook stops on an error.
#
#   bash .ci/notebooks.sh [WORK]     # WORK: a new, empty folder (default: a temporary one)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/jaxjudge-notebooks.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
t0=$(date +%s)

KEEP=1 bash "$repo/tests/wheel_check.sh" "$work/wheel"
venv="$work/wheel/user/venv"
"$venv/bin/pip" install -q -c "$repo/constraints.txt" ipykernel nbclient nbformat
echo "notebooks: tools installed ($(($(date +%s) - t0)) s since the start)"

mkdir -p "$work/run"
cd "$work/run"
env -u PYTHONPATH HOME="$work/wheel/user/home" JAXJUDGE_GGUF_DIR="$work/wheel/user/home/gguf" \
  JAXJUDGE_REPO_DIR="$repo" "$venv/bin/python" "$repo/.ci/run_notebooks.py" "$repo"/notebooks/*.ipynb
echo "notebooks: ok ($(($(date +%s) - t0)) s in all, the wheel check included)"
