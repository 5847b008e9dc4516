"""Registration of an analysis plan before extraction, and what a report may say about it.

An experiment's analysis plan is every config field that decides what is compared and how it
is read: the primary endpoint, methods, grids, selection metric, ranges, the data cut (tasks
with their subsets), models, bootstrap settings. It leaves out what only decides where and how
the run happens (store and results folders, run name, the ``changes`` notes, description,
mesh, attention kernel, compile cache, claim lease, engine options).

`register` writes the plan and its sha256 to ``<store root>/registrations/<sha256>.json``
before the first forward pass of `jaxjudge extract` (an existing record of the same plan is
kept: its time is the first registration). `registration_status` reads those records beside
the creation times of the stores a report read and gives one of three statuses:

- ``"registered before extraction"``: a record of this very plan is older than every store the
  report read;
- ``"declared after extraction"``: a record older than every store exists, but of another plan
  (the config changed after its data was extracted);
- ``"not registered"``: no record, or every record is younger than some store (the stores
  predate registration).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.location import Location, location

__all__ = ["LOGISTICS", "REGISTERED", "DECLARED_AFTER", "NOT_REGISTERED", "analysis_plan", "plan_sha256",
           "plans_agree", "register", "read_registrations", "registration_of_stores", "registration_status"]

REGISTERED = "registered before extraction"
DECLARED_AFTER = "declared after extraction"
NOT_REGISTERED = "not registered"

FOLDER = "registrations"

LOGISTICS = frozenset({
    "description", "store_root", "results_root", "run", "changes", "attention", "mesh", "compile_cache",
    "claim_lease", "engine",
})
"""Config fields that are not part of the analysis plan (where and how a run happens)."""


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a numpy scalar
        return value.item()
    return value


def analysis_plan(cfg: Any) -> dict[str, Any]:
    """The analysis plan of a config (a dataclass such as `ExperimentConfig`), JSON-able."""
    whole = _plain(cfg)
    if not isinstance(whole, dict):
        raise TypeError(f"analysis_plan needs a config dataclass, got {type(cfg).__name__}")
    return {k: v for k, v in sorted(whole.items()) if k not in LOGISTICS}


def _defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = _plain(f.default_factory())  # type: ignore[misc]
    return out


def _agree(recorded: Any, current: Any, value_type: type | None) -> bool:
    """Whether a recorded plan value and the current one are the same plan. A field the record
    lacks (added to the config class after the record was written) agrees when the current value
    is that field's default, also inside nested configs (endpoints, tasks, subsets, models)."""
    if isinstance(recorded, dict) and isinstance(current, dict):
        defaults = _defaults(value_type) if value_type is not None and dataclasses.is_dataclass(value_type) else {}
        hints = _field_types(value_type)
        for k in set(recorded) | set(current):
            if k not in recorded:
                if k not in defaults or current[k] != defaults[k]:
                    return False
            elif k not in current or not _agree(recorded[k], current[k], hints.get(k)):
                return False
        return True
    if isinstance(recorded, list) and isinstance(current, list):
        return len(recorded) == len(current) and all(_agree(a, b, value_type) for a, b in zip(recorded, current))
    return recorded == current


def _field_types(cls: type | None) -> dict[str, type | None]:
    """Field -> the config class its value holds (directly, in a tuple or optional), if any."""
    if cls is None or not dataclasses.is_dataclass(cls):
        return {}
    hints = typing.get_type_hints(cls)
    out: dict[str, type | None] = {}
    for name, tp in hints.items():
        stack, found = [tp], None
        while stack and found is None:
            t = stack.pop()
            if isinstance(t, type) and dataclasses.is_dataclass(t):
                found = t
            stack += list(typing.get_args(t))
        out[name] = found
    return out


def _analysis_of(cfg: Any) -> tuple[dict[str, Any], type]:
    """``cfg``'s analysis plan and the config class it comes from: a config dataclass's own, or
    those a run's resolved spec (`jaxjudge.jobs.RunSpec`: ``analysis``, ``config_type``) holds."""
    resolved = getattr(cfg, "analysis", None)
    if isinstance(resolved, Mapping) and resolved:
        return dict(resolved), cfg.config_type
    return analysis_plan(cfg), type(cfg)


def plans_agree(recorded: Mapping[str, Any], cfg: Any) -> bool:
    """Whether ``cfg``'s analysis plan is the recorded one (fields added to the config classes
    since the record was written count as agreeing while they hold their defaults)."""
    return _agree(dict(recorded), *_analysis_of(cfg))


def plan_sha256(plan: Mapping[str, Any]) -> str:
    text = json.dumps(plan, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def register(cfg: Any, root: str | os.PathLike) -> tuple[Location, dict[str, Any]]:
    """Record ``cfg``'s analysis plan under ``root`` unless the same plan is recorded already.

    Returns the record's path and the record (the existing one if there was one)."""
    plan = analysis_plan(cfg)
    digest = plan_sha256(plan)
    folder = location(root, "store root") / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest}.json"
    record = {"format": "jaxjudge-registration/1", "plan_sha256": digest, "registered_utc": _now(),
              "experiment": plan.get("name"), "plan": plan}
    data = (json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
    if isinstance(path, BucketPath):  # one create, refused if the record exists
        if not path.create(data):
            return path, json.loads(path.read_text(encoding="utf-8"))
        return path, record
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path, json.loads(path.read_text(encoding="utf-8"))
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return path, record


def read_registrations(root: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record under ``root``, oldest first (an unreadable one raises, naming its file)."""
    folder = location(root, "store root") / FOLDER
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
            rec["registered_utc"], rec["plan_sha256"]  # noqa: B018 -- both fields must be there
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: unreadable registration record ({e!r})") from None
        out.append(rec)
    return sorted(out, key=lambda r: r["registered_utc"])


def _time(text: str) -> _dt.datetime:
    return _dt.datetime.fromisoformat(text)


def registration_status(cfg: Any, records: Iterable[Mapping[str, Any]],
                        store_created: Iterable[str]) -> dict[str, Any]:
    """What a report may say of ``cfg``'s plan, given the root's records and the creation times
    (ISO 8601, as in each store's manifest) of the stores it read.

    Returns ``{"status", "plan_sha256", "registered_utc", "first_store_utc"}``; ``registered_utc``
    is the record the status rests on (None for ``"not registered"``). A record whose plan holds a
    power analysis (`jaxjudge.experiment.Confirmation.power`) adds it as ``"power"``: the one
    registered, as the report prints it beside each verdict."""
    digest = plan_sha256(_analysis_of(cfg)[0])
    created = sorted(store_created, key=_time)
    first = created[0] if created else None
    before = [r for r in records if first is None or _time(r["registered_utc"]) <= _time(first)]
    same = [r for r in before if r["plan_sha256"] == digest or plans_agree(r.get("plan", {}), cfg)]
    if same:
        status, rec = REGISTERED, same[0]
    elif before:
        status, rec = DECLARED_AFTER, before[-1]
    else:
        status, rec = NOT_REGISTERED, None
    out = {"status": status, "plan_sha256": digest, "registered_utc": rec and rec["registered_utc"],
           "registered_plan_sha256": rec and rec["plan_sha256"], "first_store_utc": first}
    power = ((rec or {}).get("plan") or {}).get("confirmation") or {}
    if power.get("power"):  # the registered power analysis, printed beside the verdicts
        out["power"] = power["power"]
    return out


def registration_of_stores(cfg: Any, root: str | os.PathLike, folders: Iterable[str | os.PathLike]) -> dict[str, Any]:
    """`registration_status` of ``cfg`` for the stores in ``folders`` (their manifests' creation
    times) against the records under the store root ``root``."""
    created = []
    for folder in folders:
        manifest = location(folder, "store") / "manifest.json"
        try:
            when = json.loads(manifest.read_text(encoding="utf-8")).get("created")
        except (OSError, ValueError) as e:
            raise ValueError(f"{manifest}: unreadable store manifest ({e!r})") from None
        if when:
            created.append(when)
    return registration_status(cfg, read_registrations(root), created)

