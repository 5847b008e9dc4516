"""The walk of a run's config through the package, issue #58's acceptance line: "following the
run's config from its entry point through the calls that pass it on: at most 2 climbs back up
to a higher layer, no module entered more than twice".

Measured on a real run in this process: ``jaxjudge sweep`` (extract, then report) of the tiny
random judge (tests/tiny_judge.py) on six STS-B pairs, one score, one generation and one
random-number job, under ``sys.setprofile`` (and ``threading.setprofile``). The run's config is
the `ExperimentConfig` that `jaxjudge.cli._config_of` returns, followed by identity: a config
derived from it (``dataclasses.replace``) is another object and is not followed.

A *config call* is a call of a function of the package that receives that object, as the issue's
measure says: as an argument (positional, keyword, inside ``*args`` / ``**kwargs``; ``self`` too,
so the config's own methods, ``cfg.task(name)``, count: their code is the experiment layer's) or
as the attribute ``cfg`` of its ``self`` (a `RunContext`'s methods). Recorded beside them and
printed, not counted: calls receiving an object whose ``cfg`` is the config as another argument
(``job.run(ctx)``). A call's *caller* is the innermost frame of the package below it (frames of
other code, ``functools`` or jax's tracing, skipped).

The walk is the set of distinct edges ``caller function -> called function`` of the config calls,
in the order first made: a loop handing the config to one function forty times is one step, as
are two call sites of one function calling the same function. Units are tests/test_layers.py's
stages (``cli``, ``experiment``, ``report``, ``jobs``, ...):

- a *climb* is an edge from a stage into a stage of a higher layer (``LAYERS``' order);
- an *entry* into a stage is an edge into it from another stage.

The same figures per module (``jaxjudge.jobs.base``) are printed, for the record.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.test_layers import _layer_of, _stage

PACKAGE = str(Path(__file__).resolve().parents[1] / "jaxjudge")
MAX_CLIMBS = 2  # issue #58
MAX_ENTRIES = 2  # issue #58
COUNTED = ("arg", "own", "self.cfg")  # the hand-overs the measure counts (see `_hand_over`)
PAIRS = [("A man is playing a guitar.", "A man plays the guitar.", 4.6),
         ("A woman is slicing an onion.", "A cat sleeps on the sofa.", 0.2),
         ("Two dogs run in a field.", "Dogs are running outside.", 3.8),
         ("The child reads a book.", "A kid is reading.", 4.2),
         ("A plane is taking off.", "The stock market fell today.", 0.0),
         ("Someone is cooking pasta.", "A person makes spaghetti.", 3.9)]


@dataclasses.dataclass(frozen=True)
class Edge:
    """One step of the walk: ``caller`` (module, function) hands the config to ``callee``."""

    caller: tuple[str, str] | None
    callee: tuple[str, str]

    def text(self) -> str:
        src = f"{self.caller[0]}:{self.caller[1]}" if self.caller else "(entry)"
        return f"{src} -> {self.callee[0]}:{self.callee[1]}"


def _arguments(frame) -> list:
    """The values of a frame's arguments at its call (``*args`` and ``**kwargs`` unpacked)."""
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    star, starstar = bool(code.co_flags & 0x04), bool(code.co_flags & 0x08)
    names = code.co_varnames[:n + star + starstar]
    local = frame.f_locals
    values = [local.get(name) for name in names[:n]]
    if star:
        values += list(local.get(names[n], ()))
    if starstar:
        values += list(local.get(names[n + star], {}).values())
    return values


def _hand_over(frame, cfg) -> str | None:
    """How the call of ``frame`` receives ``cfg``: ``"own"`` (``self`` is the config: one of its
    methods), ``"arg"`` (another argument is), ``"self.cfg"``, ``"holder"`` (another argument's
    ``cfg`` is the config, as a `RunContext`'s), or None."""
    values = _arguments(frame)
    if not values:
        return None
    is_method = frame.f_code.co_varnames[0] == "self"
    if is_method and values[0] is cfg:
        return "own"
    if any(v is cfg for v in values):
        return "arg"
    held = [getattr(v, "__dict__", {}).get("cfg") is cfg for v in values]
    if is_method and held[0]:
        return "self.cfg"
    return "holder" if any(held) else None


def _place(frame) -> tuple[str, str]:
    return frame.f_globals.get("__name__", "?"), frame.f_code.co_qualname


class Walk:
    """A profiler hook recording the config calls of the code under ``root``, from the return of
    a function named ``_config_of`` (`jaxjudge.cli._config_of`: ``(config, file)``) on."""

    def __init__(self, root: str = PACKAGE):
        self.root = root
        self.cfg = None
        # (edge, how) -> times made, in first-made order; ``how`` as `_hand_over` says
        self.calls: dict[tuple[Edge, str], int] = {}

    def __call__(self, frame, event, arg):
        if event not in ("call", "return") or not frame.f_code.co_filename.startswith(self.root):
            return
        if self.cfg is None:
            if event == "return" and frame.f_code.co_name == "_config_of" and isinstance(arg, tuple):
                self.cfg = arg[0]
            return
        if event == "call" and (how := _hand_over(frame, self.cfg)):
            key = (Edge(self._caller(frame), _place(frame)), how)
            self.calls[key] = self.calls.get(key, 0) + 1

    def _caller(self, frame) -> tuple[str, str] | None:
        """The innermost frame under ``root`` below ``frame`` (other code's frames skipped)."""
        f = frame.f_back
        while f is not None and not f.f_code.co_filename.startswith(self.root):
            f = f.f_back
        return _place(f) if f is not None else None

    def edges(self, kinds=COUNTED) -> list[Edge]:
        """The walk: the distinct edges of the config calls handing the config over as ``kinds``."""
        return list(dict.fromkeys(e for (e, how) in self.calls if how in kinds))


def _stage_of(module: str) -> str:
    return _stage(module) or "(package)"


def climbs(edges: list[Edge]) -> list[Edge]:
    """The edges from a stage into a stage of a higher layer."""
    return [e for e in edges if e.caller is not None
            and _layer_of(_stage_of(e.callee[0])) < _layer_of(_stage_of(e.caller[0]))]


def entries(edges: list[Edge], unit=_stage_of) -> Counter:
    """Per unit (a stage; with ``unit`` another grouping), the edges into it from another unit."""
    return Counter(unit(e.callee[0]) for e in edges if e.caller is None or unit(e.caller[0]) != unit(e.callee[0]))


def chain(edges: list[Edge], edge: Edge) -> list[str]:
    """The functions the config went through to reach ``edge``'s callee, from the first one
    recorded: each step the first edge into the step's caller (its ``<locals>`` stripped)."""
    into = {}
    for e in edges:
        into.setdefault(e.callee, e)
    out, seen = [edge], {edge}
    while (e := out[0]).caller is not None:
        caller = e.caller if e.caller in into else (e.caller[0], e.caller[1].split(".<locals>")[0])
        if caller not in into or into[caller] in seen:
            break
        out.insert(0, into[caller])
        seen.add(into[caller])
    return [f"{out[0].caller[0]}:{out[0].caller[1]}" if out[0].caller else "(entry)",
            *(f"{e.callee[0]}:{e.callee[1]}" for e in out)]


def measure(edges: list[Edge]) -> tuple[list[Edge], Counter, list[str]]:
    """``(climbs, entries per stage, lines)``: the lines name the figures, each climb and each
    entry into a stage entered more than `MAX_ENTRIES` times, with the chain that reaches it."""
    up, into = climbs(edges), entries(edges)
    lines = [f"{len(edges)} edges; {len(up)} climbs (at most {MAX_CLIMBS}); entries per stage "
             f"{dict(into.most_common())} (at most {MAX_ENTRIES} each); per module "
             f"{dict(entries(edges, lambda m: m).most_common(5))}"]
    lines += [f"climb {e.text()}\n    via {' -> '.join(chain(edges, e))}" for e in up]
    for stage, n in into.most_common():
        if n > MAX_ENTRIES:
            lines += [f"entry {i + 1}/{n} into {stage}: {e.text()}\n    via {' -> '.join(chain(edges, e))}"
                      for i, e in enumerate(e for e in edges if _stage_of(e.callee[0]) == stage
                                            and (e.caller is None or _stage_of(e.caller[0]) != stage))]
    return up, into, lines


def _config_file(tmp_path: Path, judge: Path) -> Path:
    """An experiment file: the tiny judge on six STS-B pairs (two dev, four test)."""
    from jaxjudge.experiment import ExperimentConfig, TaskSpec, config_to_dict

    from tests.tiny_judge import spec

    folder = tmp_path / "stsb"
    folder.mkdir()
    for name, rows in (("stsb_dev.jsonl", PAIRS[:2]), ("stsb_test.jsonl", PAIRS[2:])):
        (folder / name).write_text("".join(json.dumps({
            "genre": "g", "filename": "f", "year": "2012", "sid": str(i), "score": s,
            "sentence1": a, "sentence2": b}) + "\n" for i, (a, b, s) in enumerate(rows)))
    cfg = ExperimentConfig(
        name="walk", models=(spec(judge),),
        tasks=(TaskSpec("stsb", ("similarity",), data=str(folder), split="original"),),
        scales=("1-5",), methods=("vanilla", "generate", "deb_r"), temperatures=(1.0,), lambdas_extended=None,
        prompt_style="raw", engine={"chunk_size": 2}, generation_max_new_tokens=4, n_boot=10,
        metrics=("spearman",), greedy=False, deb_tp=(10,),
        store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))
    path = tmp_path / "walk.py"
    text = json.dumps(config_to_dict(cfg))
    path.write_text("import json\nfrom jaxjudge.experiment import config_from_dict\n\n\n"
                    f"def get_config(arg=None):\n    return config_from_dict(json.loads({text!r}))\n")
    return path


@pytest.fixture(scope="module")
def walk(tmp_path_factory, tiny_gguf) -> Walk:
    """The config calls of ``jaxjudge sweep`` on the tiny judge, made in this process."""
    from jaxjudge.cli import main

    tmp_path = tmp_path_factory.mktemp("walk")
    config = _config_file(tmp_path, tiny_gguf)
    hook = Walk()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JAXJUDGE_XLA_CACHE", "")  # `main` would turn on the on-disk compile cache process-wide
        mp.setenv("JAXJUDGE_CACHE", str(tmp_path / "cache"))
        threading.setprofile(hook)
        sys.setprofile(hook)
        try:
            code = main(["sweep", str(config), "--quiet"])
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    assert code == 0
    return hook


def test_the_config_walk_keeps_to_issue_58s_bounds(walk):
    edges = walk.edges()
    assert edges and edges[0].caller == ("jaxjudge.cli", "_run"), edges[:1]  # followed from the command line
    for kinds in (("arg", "self.cfg"), ("arg", "self.cfg", "holder")):  # for the record: narrower, wider
        print(f"handed over as {kinds}: {measure(walk.edges(kinds))[2][0]}")
    up, into, lines = measure(edges)
    print("\n".join(lines))
    assert len(up) <= MAX_CLIMBS and max(into.values()) <= MAX_ENTRIES, "\n".join(lines)


def _config_of():
    """A stand-in for `jaxjudge.cli._config_of`, in this file, for `test_the_walk_can_fail`."""
    return _Config(), None


class _Config:
    def own(self):
        return self


class _Holder:
    def __init__(self, cfg):
        self.cfg = cfg

    def use(self, *more, **named):
        return [*more, *named.values()]


def test_the_walk_can_fail():
    """The hook on code of this file (root: this file): the config is followed from
    ``_config_of``'s return, as an argument, a keyword inside ``**named``, ``self`` and
    ``self.cfg``; ``_Holder(cfg)``'s ``__init__`` receives it as an argument. Then the counts on
    made-up edges: a climb up from engine to experiment, and a stage entered three times."""
    hook = Walk(root=__file__)
    sys.setprofile(hook)
    try:
        cfg, _ = _config_of()
        cfg.own()
        holder = _Holder(cfg)
        holder.use(1, x=cfg)
        holder.use()
    finally:
        sys.setprofile(None)
    got = [(e.callee[1], how, n) for (e, how), n in hook.calls.items()]
    assert got == [("_Config.own", "own", 1), ("_Holder.__init__", "arg", 1), ("_Holder.use", "arg", 1),
                   ("_Holder.use", "self.cfg", 1)], got
    top, down = ("jaxjudge.experiment.extractions", "f"), ("jaxjudge.engine.extract", "g")
    edges = [Edge(("jaxjudge.cli", "_run"), top), Edge(top, down), Edge(down, ("jaxjudge.experiment.plan", "h")),
             Edge(down, ("jaxjudge.experiment.plan", "i")), Edge(("jaxjudge.experiment.plan", "h"), top)]
    up, into, lines = measure(edges)
    assert [e.text() for e in up] == ["jaxjudge.engine.extract:g -> jaxjudge.experiment.plan:h",
                                      "jaxjudge.engine.extract:g -> jaxjudge.experiment.plan:i"]
    assert into == Counter({"experiment": 3, "engine": 1})
    assert "via jaxjudge.cli:_run -> jaxjudge.experiment.extractions:f -> jaxjudge.engine.extract:g -> " \
           "jaxjudge.experiment.plan:h" in lines[1]
    assert any(line.startswith("entry 3/3 into experiment") for line in lines)
