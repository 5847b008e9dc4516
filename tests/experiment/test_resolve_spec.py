"""The config resolved once (`jaxjudge.experiment.resolve_spec`) answers what the report and the
jobs read as the config itself does: its fields, judges, pairs, task and model entries, family
options and analysis plan; the extraction plan and the jobs' store keys are the same from either."""

from __future__ import annotations

from jaxjudge.experiment import ExperimentConfig, ModelSpec, TaskSpec, extraction_plan, resolve_spec
from jaxjudge.jobs import RunSpec
from jaxjudge.jobs.spec import SPEC_FIELDS
from jaxjudge.report.stores import cells
from jaxjudge.store.registration import analysis_plan, plan_sha256, registration_status


def _cfg(tmp_path) -> ExperimentConfig:
    for name in ("a.gguf", "b.gguf", "c.gguf"):
        (tmp_path / name).write_bytes(name.encode())
    models = tuple(ModelSpec(n, str(tmp_path / f)) for n, f in (("big", "a.gguf"), ("small", "b.gguf"),
                                                                ("other", "c.gguf")))
    return ExperimentConfig(
        name="spec", models=models, pairs=(("big", "small"),), control_pairs=(("big", "other"),),
        tasks=(TaskSpec("summeval", ("coherence", "fluency"), data="embedded", split="kfold", n_folds=4),),
        scales=("1-5", "0-4"), methods=("vanilla", "deb_r", "contrastive", "contrastive_generate",
                                        "contrastive_other", "batch_strength"),
        temperatures=(0.2,), deb_tp=(10,), lambdas_extended=None, engine={"chunk_size": 2},
        method_options={"batch_strength": {"strengths": (0.0, 1.0)}},
        store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))


def test_the_spec_answers_as_the_config(tmp_path):
    cfg = _cfg(tmp_path)
    spec = resolve_spec(cfg)
    assert isinstance(spec, RunSpec) and all(getattr(spec, f) == getattr(cfg, f) for f in SPEC_FIELDS)
    assert spec.judge_names == cfg.judge_names == ("big",)
    assert spec.family_options() == cfg.family_options() and spec.family_options()
    for judge in ("big", "small", "other"):
        assert spec.assistant_of(judge) == cfg.assistant_of(judge)
        assert spec.control_of(judge) == cfg.control_of(judge)
        assert spec.model(judge) == cfg.model(judge)
    assert spec.task("summeval") is cfg.task("summeval")
    assert cells(spec) == cells(cfg)
    assert analysis_plan(cfg) == spec.analysis and spec.config_type is ExperimentConfig
    status = registration_status(spec, [], [])
    assert status == registration_status(cfg, [], []) and status["plan_sha256"] == plan_sha256(analysis_plan(cfg))


def test_jobs_and_their_keys_are_the_same_from_the_spec(tmp_path):
    cfg = _cfg(tmp_path)
    spec = resolve_spec(cfg)
    jobs = extraction_plan(cfg)
    assert {type(j).__name__ for j in jobs} >= {"ScoreJob", "ContrastiveGenerateJob"}
    for job in jobs:
        assert job.applies(spec) == job.applies(cfg) and job.companions(spec) == job.companions(cfg)
        assert job.key_extra(spec) == job.key_extra(cfg)
        assert job.setup(spec, ()) == job.setup(cfg, ())
