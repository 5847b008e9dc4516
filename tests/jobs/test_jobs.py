"""Job kinds (`jaxjudge.jobs`): keys, folders, reading, and the plan the methods' needs give.

References: store keys and folder names written out by hand (the layout committed stores
carry), hand-ordered plans, and numpy indexing for the row alignment.
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxjudge.data.tasks import load_task_data
from jaxjudge.experiment import ExperimentConfig, ModelSpec, TaskSpec, extraction_plan
from jaxjudge.jobs import (
    KINDS,
    ContentFreeJob,
    ContrastiveGenerateJob,
    GenerateJob,
    RandomRJob,
    RandomTJob,
    ScoreJob,
    StoreLookupError,
)
from jaxjudge.report import CellArrays, MethodOptions, evaluate_cell, make_splits
from jaxjudge.report.methods import JUDGE_SCORES, METHODS, cell_needs


def _cfg(tmp_path, **kw):
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(name.encode())
    base = dict(
        name="jobs", models=(ModelSpec("big", str(tmp_path / "a.gguf")), ModelSpec("small", str(tmp_path / "b.gguf"))),
        tasks=(TaskSpec("summeval", ("coherence", "fluency"), data="embedded", split="kfold", n_folds=4),),
        scales=("1-5", "2-6"), methods=("vanilla", "deb_r", "deb_t"), temperatures=(0.2,), deb_tp=(10,),
        lambdas_extended=None, store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"),
    )
    base.update(kw)
    if "pairs" not in kw and "control_pairs" not in kw:
        base["models"] = base["models"][:1]
    return ExperimentConfig(**base)


def test_keys_and_folders_are_the_committed_layout(tmp_path):
    job = ScoreJob("m", "summeval", "coherence", "1-5")
    assert job.store_match() == {"role": "score", "model": "m", "task": "summeval", "aspect": "coherence",
                                 "scale": "1-5"}
    assert job.folder(tmp_path) == tmp_path / "m" / "score-summeval-coherence-1-5"
    r = RandomRJob("m", None, None, "2-6")
    assert r.store_match() == {"role": "random_r", "model": "m", "task": None, "aspect": None, "scale": "2-6",
                               "nll_span": "request"}
    assert r.folder(tmp_path) == tmp_path / "m" / "random_r-2-6"
    assert RandomTJob("m", "stsb", "similarity", "0-4").folder("x").name == "random_t-stsb-similarity-0-4"
    assert RandomTJob("m", "stsb", "similarity", "0-4").store_match()["nll_span"] == "request"
    assert ContentFreeJob("m", "stsb", "similarity", "0-4").store_match()["role"] == "content_free"
    assert [k.role for k in KINDS] == ["score", "generate", "contrastive_generate", "random_r", "random_t",
                                       "content_free"]


def test_kinds_with_equal_fields_are_different_jobs():
    fields = ("m", "summeval", "coherence", "1-5")
    jobs = {ScoreJob(*fields), GenerateJob(*fields), ContrastiveGenerateJob(*fields), ContentFreeJob(*fields),
            RandomTJob(*fields), ScoreJob(*fields)}
    assert len(jobs) == 5
    assert ScoreJob(*fields) != GenerateJob(*fields) and GenerateJob(*fields) != ContrastiveGenerateJob(*fields)


def test_a_job_refuses_fields_its_kind_does_not_have():
    with pytest.raises(ValueError, match=r"ScoreJob: task and aspect are required"):
        ScoreJob("m", None, None, "1-5")
    with pytest.raises(ValueError, match=r"RandomRJob does not depend on the task"):
        RandomRJob("m", "summeval", "coherence", "1-5")


def test_setup_follows_the_prompts(tmp_path):
    cfg = _cfg(tmp_path)
    data = load_task_data(cfg.tasks[0]).examples
    job = ScoreJob("big", "summeval", "coherence", "1-5")
    base = job.setup(cfg, data)
    assert base["prompt_style"] == cfg.prompt_style and base["engine"] == {}
    assert ScoreJob("big", "summeval", "coherence", "2-6").setup(cfg, data) != base  # other candidates
    assert job.setup(cfg, data[:-1]) != base  # other data
    assert ScoreJob("other", "summeval", "coherence", "1-5").setup(cfg, data) == base  # not the model
    # Prompt sets do not read the task's examples; Deb-T's prompts carry the task instruction.
    r = RandomRJob("big", None, None, "1-5")
    assert r.setup(cfg, data) == r.setup(cfg, ())
    t = RandomTJob("big", "summeval", "coherence", "1-5")
    assert t.setup(cfg, ()) != r.setup(cfg, ())
    assert len(r.prompts(())) == len(t.prompts(())) == 100
    assert len(ContentFreeJob("big", "summeval", "coherence", "1-5").prompts(())) == 3


def test_contrastive_generation_is_keyed_by_its_assistant_and_settings(tmp_path):
    cfg = _cfg(tmp_path, pairs=(("big", "small"),), methods=("vanilla", "contrastive_generate"),
               contrastive_generate_lam=0.25)
    job = ContrastiveGenerateJob("big", "summeval", "coherence", "1-5")
    assert job.key_extra(cfg) == {"assistant": "small", "lam": 0.25, "t_main": 1.0, "t_asst": 1.0, "alpha": 0.1}
    assert job.applies(cfg) and job.companions(cfg) == ("small",)
    assert not ContrastiveGenerateJob("small", "summeval", "coherence", "1-5").applies(cfg)
    assert GenerateJob("big", "summeval", "coherence", "1-5").key_extra(cfg) == {}


def test_reading_aligns_rows_and_names_what_is_missing():
    job = ScoreJob("m", "summeval", "coherence", "1-5")
    ids = np.asarray(["a", "b", "c"])
    order = np.asarray([2, 0, 1])
    lp = np.arange(15.0).reshape(3, 5)
    got = job.read({"example_ids": ids[order], "cand_logprobs": lp[order], "valid": np.asarray([1, 0, 1], bool)}, ids)
    np.testing.assert_array_equal(got["logprobs"], lp)
    np.testing.assert_array_equal(got["valid"], np.asarray([1, 0, 1], bool)[np.argsort(order)])
    assert got["truncated"] is None
    with pytest.raises(StoreLookupError, match=r"has no array 'cand_logprobs' \(has \['example_ids'\]\)"):
        job.read({"example_ids": ids}, ids)
    with pytest.raises(StoreLookupError, match=r"lacks 1 of the 4 examples \(first: \['d'\]\)"):
        job.read({"example_ids": ids, "cand_logprobs": lp}, np.asarray(["a", "b", "c", "d"]))
    parsed = ContrastiveGenerateJob("m", "summeval", "coherence", "1-5").read(
        {"example_ids": ids[order], "parsed_scores": np.asarray([1, np.nan, 3], np.float32)}, ids)["parsed"]
    assert parsed.dtype == np.float64
    np.testing.assert_array_equal(parsed, np.asarray([np.nan, 3, 1]))
    prior = RandomRJob("m", None, None, "1-5").read({"cand_logprobs": lp, "sequence_nll": np.ones(3)}, ids)
    assert prior["logprobs"] is not None and prior["nll"].shape == (3,)


def test_the_plan_is_the_union_of_the_methods_needs_in_a_stable_order(tmp_path):
    cfg = _cfg(tmp_path, scales=("1-5", "2-6"), methods=("vanilla", "deb_r", "deb_t", "contextual", "generate"))
    s, t, c = "summeval", "coherence", "fluency"
    want = []
    for scale in ("1-5", "2-6"):
        want.append(RandomRJob("big", None, None, scale))
        for aspect in (t, c):
            want += [ScoreJob("big", s, aspect, scale), GenerateJob("big", s, aspect, scale),
                     ContentFreeJob("big", s, aspect, scale), RandomTJob("big", s, aspect, scale)]
    assert extraction_plan(cfg) == want
    # The assistant's jobs come after the judge's; contrastive + Deb-T reads its random_t too.
    pair = _cfg(tmp_path, pairs=(("big", "small"),), methods=("vanilla", "contrastive_deb_t"), scales=("1-5",),
                tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=4),))
    assert extraction_plan(pair) == [ScoreJob("big", s, t, "1-5"), RandomTJob("big", s, t, "1-5"),
                                     ScoreJob("small", s, t, "1-5"), RandomTJob("small", s, t, "1-5")]
    # The mechanism controls: the judge's content-free prior, and the other-family assistant's
    # scores (after the judge's jobs; that assistant is no judge of its own).
    ctl = _cfg(tmp_path, control_pairs=(("big", "small"),), methods=("vanilla", "contrastive_prior", "contrastive_other"),
               scales=("1-5",), tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=4),))
    assert ctl.judge_names == ("big",)
    assert extraction_plan(ctl) == [ScoreJob("big", s, t, "1-5"), ContentFreeJob("big", s, t, "1-5"),
                                    ScoreJob("small", s, t, "1-5")]


def test_control_pairs_are_checked_by_name(tmp_path):
    from jaxjudge.experiment import ConfigError

    one = (TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=4),)
    with pytest.raises(ConfigError, match=r"control_pairs: methods \['contrastive_other'\] need at least one"):
        _cfg(tmp_path, pairs=(("big", "small"),), methods=("vanilla", "contrastive_other"), tasks=one)
    with pytest.raises(ConfigError, match=r"control_pairs\[0\]"):
        _cfg(tmp_path, control_pairs=(("big", "nobody"),), methods=("vanilla", "contrastive_other"), tasks=one)
    with pytest.raises(ConfigError, match=r"control_pairs\[0\]: main and assistant are the same model 'big'"):
        _cfg(tmp_path, control_pairs=(("big", "big"),), methods=("vanilla", "contrastive_other"), tasks=one)


def test_every_method_declares_its_needs_once():
    assert cell_needs(["vanilla"]) == [JUDGE_SCORES]
    needs = cell_needs(list(METHODS))
    assert len(needs) == len(set(map(id, needs)))
    kinds = [(n.kind, n.assistant, n.control) for n in needs]
    assert sorted(kinds, key=str) == sorted([
        (ScoreJob, False, False), (GenerateJob, False, False), (ContrastiveGenerateJob, False, False),
        (ContentFreeJob, False, False), (RandomRJob, False, False), (RandomTJob, False, False),
        (ScoreJob, True, False), (RandomTJob, True, False), (ScoreJob, False, True)], key=str)


def test_a_cell_without_a_required_need_is_refused_by_name():
    rng = np.random.default_rng(0)
    from jaxjudge.prompts import ScoreScale

    n = 16
    arrays = CellArrays(scale=ScoreScale.parse("1-5"), logprobs=np.log(rng.dirichlet(np.ones(5), n)),
                        human=rng.uniform(1, 5, n), human_range=(1.0, 5.0), groups=np.repeat(np.arange(8), 2),
                        example_ids=np.asarray([str(i) for i in range(n)]))
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    opts = MethodOptions(methods=("vanilla", "contextual"), temperatures=(1.0,), greedy=False, n_boot=10)
    with pytest.raises(ValueError, match=r"method 'contextual' needs content-free arrays \(content_free store\)"):
        evaluate_cell(arrays, splits, opts)
    opts = MethodOptions(methods=("vanilla", "contrastive"), temperatures=(1.0,), greedy=False, n_boot=10)
    with pytest.raises(ValueError, match=r"method 'contrastive' needs the assistant's score arrays \(score store\)"):
        evaluate_cell(arrays, splits, opts)
