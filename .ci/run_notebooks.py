"""Execute every notebook top to bottom with this interpreter's kernel; fail on the first error.

    python .ci/run_notebooks.py notebooks/*.ipynb                 # CI: copies, run in a temp folder
    python .ci/run_notebooks.py --save notebooks/*.ipynb          # refresh the committed outputs

Each notebook runs in a fresh empty folder (so it reads nothing of the checkout it came from and
writes nothing into it), with the kernel of the interpreter running this script: run it with
the Python of the environment under test (CI: a fresh venv holding only the built wheel and the
notebook tools). ``--save`` writes the executed notebook back over the original, outputs
included; the temp folder's path is replaced by ``.`` in the saved outputs and the environment's
folder by ``<venv>``, and a saved output that still holds an absolute path of this machine fails
the run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def _scrub(nb, folder: str) -> list[str]:
    """Replace ``folder`` by ``.`` in every output; return the absolute paths left."""
    home = os.path.expanduser("~")
    leaks = []
    pattern = re.compile("|".join(re.escape(p) for p in {os.path.realpath(folder), folder}))
    # The environment's own folder (where a printed model path may point, even relatively): <venv>.
    venv = re.compile(r"(?:\.\./)*/?" + re.escape(sys.prefix.lstrip("/")))
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for key in ("text", "evalue"):
                if isinstance(out.get(key), str):
                    out[key] = venv.sub("<venv>", pattern.sub(".", out[key]))
            data = out.get("data", {})
            for mime in ("text/plain", "text/html", "text/markdown"):
                if isinstance(data.get(mime), str):
                    data[mime] = venv.sub("<venv>", pattern.sub(".", data[mime]))
            text = str(out.get("text", "")) + str(data.get("text/plain", "")) + str(data.get("text/html", ""))
            for p in (home, str(Path.cwd()), tempfile.gettempdir(), sys.prefix):
                if len(p) > 1 and p in text:
                    line = next(ln for ln in text.splitlines() if p in ln)
                    leaks.append(f"{p} in {line[:160]!r}")
    return leaks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--save", action="store_true", help="write the executed notebooks back, outputs included")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds a cell may take")
    args = parser.parse_args(argv)
    # The environment under test, activated: its commands (`!jaxjudge ...`) first on the PATH.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    # tqdm.auto warns once per kernel where ipywidgets is absent (Colab and JupyterLab have it),
    # naming its own file: a path of this machine in the saved outputs, and no news to a reader.
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"),
                                                           "ignore:IProgress not found"]))
    failed = 0
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory(prefix="nb-") as folder:
            start = time.perf_counter()
            try:
                NotebookClient(nb, timeout=args.timeout, kernel_name="python3",
                               resources={"metadata": {"path": folder}}).execute()
            except Exception as e:  # noqa: BLE001 - report which notebook, then the next one
                print(f"FAIL {path.name} after {time.perf_counter() - start:.0f} s: {type(e).__name__}: "
                      f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}", flush=True)
                failed += 1
                continue
            seconds = time.perf_counter() - start
            leaks = _scrub(nb, folder)
        if leaks:
            print(f"FAIL {path.name}: its outputs name absolute paths of this machine:", *sorted(set(leaks)), sep="\n  ")
            if args.save:
                nbformat.write(nb, Path(tempfile.gettempdir()) / f"leaky-{path.name}")
            failed += 1
            continue
        print(f"ok   {path.name} in {seconds:.0f} s", flush=True)
        if args.save:
            nbformat.write(nb, path)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
