"""Registration of the analysis plan before extraction (`jaxjudge.store.registration`): the three
statuses from hand-made records and store times, and a run on the tiny judge whose primary
endpoint is changed after extraction."""

from __future__ import annotations

import dataclasses
import json

import pytest

from jaxjudge.experiment import Endpoint, ExperimentConfig, ModelSpec, SubsetSpec, TaskSpec, run_extractions
from jaxjudge.report import report_from_store
from jaxjudge.report.endpoint_tables import primary_line
from jaxjudge.store.registration import (
    DECLARED_AFTER,
    NOT_REGISTERED,
    REGISTERED,
    analysis_plan,
    plan_sha256,
    plans_agree,
    read_registrations,
    register,
    registration_status,
)


def _cfg(path: str = "model.gguf", **changes) -> ExperimentConfig:
    cfg = ExperimentConfig(
        name="reg", models=(ModelSpec("main", path, "0" * 64),),
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=2,
                        subset=SubsetSpec("two documents: a short test", n_docs=2)),),
        scales=("1-5", "2-6"), methods=("vanilla", "temperature"), temperatures=(1.0,),
        primary=Endpoint(method="temperature", versus="vanilla", score="expected@1"), n_boot=50,
    )
    return dataclasses.replace(cfg, **changes)


def _record(cfg, when: str) -> dict:
    plan = analysis_plan(cfg)
    return {"plan_sha256": plan_sha256(plan), "registered_utc": when, "plan": plan}


T0, T1, T2 = "2026-12-01T10:00:00+00:00", "2026-12-01T10:05:00+00:00", "2026-12-01T11:00:00+00:00"


def test_the_three_statuses_from_records_and_store_times():
    cfg = _cfg()
    other = _cfg(primary=Endpoint(method="temperature", versus="vanilla", score="expected@1", statistic="1-5"))
    assert registration_status(cfg, [_record(cfg, T0)], [T1, T2])["status"] == REGISTERED
    # registered in the same second as the first store: still before it
    assert registration_status(cfg, [_record(cfg, T1)], [T1, T2])["status"] == REGISTERED
    st = registration_status(other, [_record(cfg, T0)], [T1, T2])
    assert st["status"] == DECLARED_AFTER and st["registered_plan_sha256"] != st["plan_sha256"]
    # a record written after the first store was created does not count, whatever its plan
    assert registration_status(cfg, [_record(cfg, T1)], [T0, T2])["status"] == NOT_REGISTERED
    assert registration_status(cfg, [], [T0])["status"] == NOT_REGISTERED
    # the record of this plan wins over an older one of another plan
    assert registration_status(cfg, [_record(other, T0), _record(cfg, T0)], [T1])["status"] == REGISTERED


def test_plan_leaves_out_logistics_and_agrees_across_fields_added_later():
    cfg = _cfg()
    moved = _cfg(store_root="elsewhere", run="x", changes=("a note",), description="other words",
                 engine={"batch_size": 2})
    assert analysis_plan(moved) == analysis_plan(cfg)
    for change in (dict(select_metric="pearson"), dict(scales=("1-5",)), dict(n_boot=51),
                   dict(primary=Endpoint(method="temperature", versus="vanilla", score="expected@1", margin=0.02))):
        assert not plans_agree(analysis_plan(cfg), _cfg(**change)), change
    # A record written before `Endpoint.margin` and `SubsetSpec.exclude` existed: those fields at
    # their defaults agree, a value set for them does not.
    old = json.loads(json.dumps(analysis_plan(cfg)))
    del old["primary"]["margin"]
    del old["tasks"][0]["subset"]["exclude"]
    assert plans_agree(old, cfg)
    assert not plans_agree(old, _cfg(primary=dataclasses.replace(cfg.primary, margin=0.01)))


def test_register_keeps_the_first_record(tmp_path):
    cfg = _cfg()
    path, first = register(cfg, tmp_path)
    again_path, again = register(dataclasses.replace(cfg, run="later"), tmp_path)
    assert again_path == path and again == first
    assert [r["plan_sha256"] for r in read_registrations(tmp_path)] == [first["plan_sha256"]]
    (tmp_path / "registrations" / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="broken.json"):
        read_registrations(tmp_path)


@pytest.mark.slow
def test_a_primary_changed_after_extraction_is_reported_as_declared_after(tmp_path, tiny_gguf):
    from tests.tiny_judge import sha256

    path = str(tiny_gguf)
    cfg = _cfg(models=(ModelSpec("main", path, sha256(path)),), store_root=str(tmp_path / "stores"))
    logs: list[str] = []
    run_extractions(cfg, progress=False, log=logs.append)
    assert any(line.startswith("analysis plan ") and "registered" in line for line in logs)

    same = report_from_store(cfg.store_root, cfg)
    assert same.registration["status"] == REGISTERED
    assert "registered before extraction" in primary_line(same)

    changed = dataclasses.replace(
        cfg, primary=Endpoint(method="temperature", versus="vanilla", score="expected@1", statistic="2-6"))
    later = report_from_store(cfg.store_root, changed)
    assert later.registration["status"] == DECLARED_AFTER
    assert "declared after extraction" in primary_line(later)
    # extracting again under the changed plan records it, but after the stores: still "declared after"
    run_extractions(changed, progress=False, log=logs.append)
    assert len(read_registrations(cfg.store_root)) == 2
    assert report_from_store(cfg.store_root, changed).registration["status"] == DECLARED_AFTER

    for rec in (tmp_path / "stores" / "registrations").iterdir():
        rec.unlink()
    none = report_from_store(cfg.store_root, cfg)
    assert none.registration["status"] == NOT_REGISTERED
    assert "not registered" in primary_line(none)
