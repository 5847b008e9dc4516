"""Experiment configs, their validation, and the store -> report pipeline (no forward pass).

The store test writes synthetic extraction arrays for the embedded SummEval subset the way the
engine does (one store per job, keyed by role/model/task/aspect/scale and the model file's
sha256), then recomputes the report from the stores only.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.data import to_prompt_range
from jaxjudge.prompts import ScoreScale
from jaxjudge.data import load_task_data
from jaxjudge.experiment import (
    ConfigError,
    ExperimentConfig,
    ModelSpec,
    SubsetSpec,
    TaskSpec,
    check_tokenizer,
    config_from_dict,
    config_to_dict,
    extraction_plan,
    load_config,
    validate_config,
    with_overrides,
)
from jaxjudge.report import (
    CellArrays,
    RandomPrior,
    Results,
    StoreLookupError,
    StoreModelMismatch,
    cells,
    make_splits,
    read_csv,
    flat_rows,
    report_from_arrays,
    report_from_store,
    write_run,
)
from jaxjudge.jobs import KINDS
from jaxjudge.report.stores import (
    Cell,
    StoreIndex,
    contrastive_generate_match,
    job_setup,
    load_cells,
    store_match,
)
from jaxjudge.store import Store

REPO = Path(__file__).resolve().parents[2]
KIND_OF = {kind.role: kind for kind in KINDS}


def _job(role, model, task, aspect, scale):
    """The typed job of a store role (the names store keys and folders carry)."""
    return KIND_OF[role](model, task, aspect, scale)

EXPERIMENTS = REPO / "experiments"


def _cfg(tmp_path, **kw):
    model = tmp_path / "judge.gguf"
    if not model.exists():
        model.write_bytes(b"not really a model, but a file with a sha256")
    base = dict(
        name="pipe", models=(ModelSpec("sim", str(model)),),
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=4),),
        scales=("1-5", "2-6"),
        methods=("vanilla", "generate", "deb_r", "deb_t", "contextual", "batch", "distribution"),
        temperatures=(0.2,), deb_tp=(10,), lambdas_extended=None, n_boot=200,
        store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"),
    )
    base.update(kw)
    return ExperimentConfig(**base)


# -- configs ---------------------------------------------------------------------------------


def test_unknown_fields_are_named(tmp_path):
    d = config_to_dict(_cfg(tmp_path))
    assert config_from_dict(d) == _cfg(tmp_path)
    with pytest.raises(ConfigError, match=r"unknown field 'n_bootstrap'.*did you mean 'n_boot'"):
        config_from_dict({**d, "n_bootstrap": 10})
    with pytest.raises(ConfigError, match=r"unknown field 'temperature'.*'temperatures'"):
        with_overrides(_cfg(tmp_path), ["temperature=0.5"])
    tasks = [dict(d["tasks"][0], split_mode="kfold")]
    with pytest.raises(ConfigError, match=r"tasks\[0\].*unknown field 'split_mode'"):
        config_from_dict({**d, "tasks": tasks})
    cfg = with_overrides(_cfg(tmp_path), ["n_boot=50", "scales=0-4,3-7", "methods=vanilla"])
    assert (cfg.n_boot, cfg.scales, cfg.methods) == (50, ("0-4", "3-7"), ("vanilla",))


def test_bad_values_name_their_field(tmp_path):
    with pytest.raises(ConfigError, match=r"scales\[1\].*'5-1'"):
        _cfg(tmp_path, scales=("1-5", "5-1"))
    with pytest.raises(ConfigError, match=r"aspects\[0\].*'coherance'.*did you mean 'coherence'"):
        TaskSpec("summeval", ("coherance",))
    with pytest.raises(ConfigError, match=r"methods\[1\].*'deb-r'"):
        _cfg(tmp_path, methods=("vanilla", "deb-r"))
    with pytest.raises(ConfigError, match=r"pairs.*contrastive"):
        _cfg(tmp_path, methods=("vanilla", "contrastive"))
    with pytest.raises(ConfigError, match=r"judges\[0\].*'other'"):
        _cfg(tmp_path, judges=("other",))
    with pytest.raises(ConfigError, match=r"ci_metrics\[0\]"):
        _cfg(tmp_path, metrics=("spearman",), ci_metrics=("kendall",))


def test_validate_names_missing_files(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, models=(ModelSpec("ghost", str(tmp_path / "missing.gguf")),))
    with pytest.raises(ConfigError, match=r"model 'ghost': file not found: .*missing\.gguf"):
        validate_config(cfg)
    validate_config(cfg, check_files=False)  # nothing else is wrong
    monkeypatch.setenv("JAXJUDGE_GGUF_DIR", str(tmp_path / "empty"))
    qwen = load_config(EXPERIMENTS / "contrastive.py")
    with pytest.raises(ConfigError) as e:
        validate_config(qwen)
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf" in str(e.value) and "get_models.sh" in str(e.value)
    assert "qwen2.5-coder-0.5b-instruct-awq.gguf" in str(e.value)  # every problem is listed
    folder = tmp_path / "summeval_data"
    folder.mkdir()
    (folder / "summeval_docs.jsonl").write_text("")
    task = TaskSpec("summeval", ("coherence",), data=str(folder), split="fixed_docs")
    with pytest.raises(ConfigError) as e:
        validate_config(_cfg(tmp_path, tasks=(task,)))
    assert "summeval_summaries.jsonl" in str(e.value) and "dev_doc_ids.txt" in str(e.value)
    task = TaskSpec("stsb", ("similarity",), data=str(tmp_path / "nowhere"), split="original")
    with pytest.raises(ConfigError, match=r"data folder not found: .*nowhere"):
        validate_config(_cfg(tmp_path, tasks=(task,)))


def test_tokenizer_that_cannot_write_a_scale_is_refused(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, **{d: i + 1 for i, d in enumerate("012345")}}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    check_tokenizer(_cfg(tmp_path, scales=("0-4", "1-5")), "sim", tok)
    with pytest.raises(ConfigError, match=r"model 'sim' cannot express scale '3-7'.*coherence"):
        check_tokenizer(_cfg(tmp_path, scales=("1-5", "3-7")), "sim", tok)


@pytest.mark.parametrize("name", ["score_range_bias", "random_number_debias", "contrastive", "combined", "demo"])
def test_experiment_configs_are_valid(name):
    cfg = load_config(EXPERIMENTS / f"{name}.py")
    assert cfg.name == name
    validate_config(cfg, check_files=False)
    assert set(cfg.scales) >= {"1-5", "3-7"}
    doc = (EXPERIMENTS / f"{name}.py").read_text()
    assert f"experiments/{name}.py" in doc  # the command that runs it is in its docstring
    n_aspects = sum(len(t.aspects) for t in cfg.tasks)
    assert len(cells(cfg)) == len(cfg.judge_names) * n_aspects * len(cfg.scales)
    quick = load_config(f"{EXPERIMENTS / name}.py:{'ci' if name == 'demo' else 'quick'}", ["n_boot=10"])
    assert quick.n_boot == 10 and all(t.data in ("embedded", "embedded_wide") for t in quick.tasks)
    with pytest.raises(ValueError, match="unknown argument"):
        load_config(f"{EXPERIMENTS / name}.py:nonsense")


def test_extraction_plan_lists_what_each_method_needs(tmp_path):
    jobs = extraction_plan(_cfg(tmp_path))
    roles = sorted(j.role for j in jobs)
    assert roles == sorted(["random_r", "score", "generate", "content_free", "random_t"] * 2)
    assert _job("random_r", "sim", None, None, "2-6") in jobs
    pair = _cfg(
        tmp_path, models=(ModelSpec("big", "a.gguf"), ModelSpec("small", "b.gguf")), pairs=(("big", "small"),),
        methods=("vanilla", "contrastive_deb_t"), scales=("1-5",),
    )
    assert pair.judge_names == ("big",)
    got = {(j.role, j.model) for j in extraction_plan(pair)}
    assert got == {("score", "big"), ("random_t", "big"), ("score", "small"), ("random_t", "small")}


def test_contrastive_generate_jobs_belong_to_the_judge(tmp_path):
    models = (ModelSpec("big", "a.gguf"), ModelSpec("small", "b.gguf"))
    only = _cfg(tmp_path, models=models, pairs=(("big", "small"),), methods=("vanilla", "contrastive_generate"),
                scales=("1-5",))
    assert (only.contrastive_generate_lam, only.contrastive_generate_t_main, only.contrastive_generate_t_asst,
            only.contrastive_generate_alpha) == (0.5, 1.0, 1.0, 0.1)
    # The job runs both models but belongs to the judge; the assistant needs no arrays of its own.
    assert {(j.role, j.model) for j in extraction_plan(only)} == {("score", "big"), ("contrastive_generate", "big")}
    both = _cfg(tmp_path, models=models, pairs=(("big", "small"),), scales=("1-5",),
                methods=("vanilla", "generate", "contrastive", "contrastive_generate"))
    assert {(j.role, j.model) for j in extraction_plan(both)} == {
        ("score", "big"), ("generate", "big"), ("contrastive_generate", "big"), ("score", "small")}
    assert contrastive_generate_match(both, "big") == {"assistant": "small", "lam": 0.5, "t_main": 1.0,
                                                       "t_asst": 1.0, "alpha": 0.1}
    with pytest.raises(ConfigError, match=r"contrastive_generate_alpha.*\[0, 1\]"):
        _cfg(tmp_path, models=models, pairs=(("big", "small"),), methods=("contrastive_generate",),
             contrastive_generate_alpha=1.5)
    with pytest.raises(ConfigError, match=r"pairs.*contrastive_generate"):
        _cfg(tmp_path, methods=("vanilla", "contrastive_generate"))


# -- store -> report -------------------------------------------------------------------------


def _synthetic_cells(cfg, seed=0):
    """Arrays a biased judge would produce on the embedded subset (64 examples, 4 documents)."""
    rng = np.random.default_rng(seed)
    task = cfg.tasks[0]
    data = load_task_data(task)
    human = data.human("coherence")
    out = {}
    for s in cfg.scales:
        scale = ScoreScale.parse(s)
        bonus = np.zeros(scale.size)
        bonus[2] = 3.0
        q = to_prompt_range(human, scale.lo, scale.hi, src=(1, 5)) + rng.normal(0, 0.5, len(human))
        lp = -((scale.values[None] - q[:, None]) ** 2) / 0.98 + bonus
        lp = lp - np.log(np.exp(lp).sum(1, keepdims=True)) - 0.5
        gen = np.where(rng.uniform(size=len(human)) < 0.1, np.nan, scale.values[np.argmax(lp, 1)])
        rand = {v: RandomPrior(bonus + rng.normal(0, 0.2, (20, scale.size)) - 2, rng.uniform(1, 3, 20)) for v in "RT"}
        out[Cell("sim", "summeval", "coherence", s)] = CellArrays(
            scale=scale, logprobs=lp, human=human, human_range=(1.0, 5.0), groups=data.groups(),
            example_ids=data.ids(), valid=rng.uniform(size=len(human)) > 0.05, generated=gen, random=rand,
            content_free=bonus + rng.normal(0, 0.3, (3, scale.size)), split_labels=data.split_labels,
        )
    return out


def _key(cfg, job, **more):
    """A store key as `jaxjudge extract` writes it: store_match, the config's setup, and more."""
    data = load_task_data(cfg.task(job.task)).examples if job.task else ()
    return {**store_match(job), "setup": job_setup(cfg, job, data), **more}


def _write_stores(cfg, arrays, root, sha):
    rng = np.random.default_rng(1)
    for cell, a in arrays.items():
        perm = rng.permutation(a.n)  # the engine's order need not be the data's
        by_role = {
            "score": {"example_ids": a.example_ids[perm], "cand_logprobs": a.logprobs[perm], "valid": a.valid[perm]},
            "generate": {"example_ids": a.example_ids[perm], "parsed_scores": a.generated[perm]},
            "random_r": {"cand_logprobs": a.random["R"].logprobs, "sequence_nll": a.random["R"].nll},
            "random_t": {"cand_logprobs": a.random["T"].logprobs, "sequence_nll": a.random["T"].nll},
            "content_free": {"cand_logprobs": a.content_free},
        }
        for role, payload in by_role.items():
            task, aspect = (None, None) if role == "random_r" else (cell.task, cell.aspect)
            job = _job(role, cell.judge, task, aspect, cell.scale)
            key = _key(cfg, job, model_sha256=sha, template="whatever else the engine keys on")
            store = Store.open(root / f"{role}-{cell.scale}", key, n_chunks=1)
            store.write_chunk(0, payload)


def test_report_from_store_recomputes_identical_numbers(tmp_path):
    cfg = _cfg(tmp_path)
    validate_config(cfg)
    arrays = _synthetic_cells(cfg)
    root = Path(cfg.store_root)
    sha = hashlib.sha256(Path(cfg.models[0].path).read_bytes()).hexdigest()
    _write_stores(cfg, arrays, root, sha)

    first = report_from_store(root, cfg)
    again = report_from_store(root, cfg)
    assert first.rows == again.rows and first.aux == again.aux
    direct = report_from_arrays(arrays, cfg)
    assert direct.rows == first.rows  # the stores' row order was shuffled: alignment by id
    methods = {r["method"] for r in first.rows}
    assert methods == {"vanilla", "generate", "deb_r_tp10", "deb_t_tp10", "contextual", "batch", "distribution"}
    assert {r["scale"] for r in first.rows} == {"1-5", "2-6"}
    gen = next(r for r in first.rows if r["method"] == "generate" and r["scale"] == "1-5")
    nan = int(np.isnan(arrays[Cell("sim", "summeval", "coherence", "1-5")].generated).sum())
    assert gen["parse_failures"] == nan and gen["metrics"]["validity"]["estimate"] == pytest.approx(1 - nan / 64, abs=0.02)

    paths = write_run(first, tmp_path / "results" / "pipe" / "r1", {"command": "jaxjudge report cfg.py"})
    assert Results.load_json(paths["json"]).rows == first.rows
    columns, flat = flat_rows(first)
    assert read_csv(paths["csv"]) == [{c: r[c] for c in columns} for r in flat]


def test_store_from_another_model_or_missing_role_fails_before_any_work(tmp_path):
    cfg = _cfg(tmp_path, scales=("1-5",), methods=("vanilla", "contextual"))
    arrays = _synthetic_cells(cfg)
    root = Path(cfg.store_root)
    _write_stores(cfg, arrays, root, "0" * 64)
    with pytest.raises(StoreModelMismatch, match=r"model 'sim'.*another model file"):
        report_from_store(root, cfg)
    sha = hashlib.sha256(Path(cfg.models[0].path).read_bytes()).hexdigest()
    other = tmp_path / "other"
    _write_stores(cfg, arrays, other, sha)
    for p in other.glob("content_free-*"):
        for f in sorted(p.rglob("*"), reverse=True):
            f.unlink() if f.is_file() else f.rmdir()
        p.rmdir()
    with pytest.raises(StoreLookupError, match=r"'role': 'content_free'.*closest"):
        report_from_store(other, cfg)


def test_random_number_stores_with_a_whole_prompt_nll_are_not_reused(tmp_path):
    """Stores written before the NLL covered only the request lack ``nll_span``: the report
    refuses them instead of ranking the prompts by their whole-prompt NLL."""
    cfg = _cfg(tmp_path, scales=("1-5",), methods=("vanilla", "deb_r"))
    arrays = _synthetic_cells(cfg)
    root = Path(cfg.store_root)
    sha = hashlib.sha256(Path(cfg.models[0].path).read_bytes()).hexdigest()
    job = _job("random_r", "sim", None, None, "1-5")
    assert store_match(job)["nll_span"] == "request"
    assert "nll_span" not in store_match(_job("score", "sim", "summeval", "coherence", "1-5"))
    _write_stores(cfg, arrays, root, sha)
    report_from_store(root, cfg)  # the stores of this version are found
    old = tmp_path / "old"
    _write_stores(cfg, arrays, old, sha)
    shutil.rmtree(old / "random_r-1-5")  # replaced by a store keyed the old way
    a = arrays[Cell("sim", "summeval", "coherence", "1-5")]
    stale_key = {k: v for k, v in _key(cfg, job).items() if k != "nll_span"}
    Store.open(old / "random_r-1-5", {**stale_key, "model_sha256": sha}, n_chunks=1).write_chunk(
        0, {"cand_logprobs": a.random["R"].logprobs, "sequence_nll": a.random["R"].nll})
    with pytest.raises(StoreLookupError, match=r"'role': 'random_r'.*nll_span: stored None, wanted 'request'"):
        report_from_store(old, cfg)


def test_store_extracted_under_another_config_is_refused_naming_the_field(tmp_path):
    """A store extracted with another context length, prompt style or template is refused by a
    report made with this config, naming the setup field; the stores read are recorded."""
    cfg = _cfg(tmp_path, scales=("1-5",), methods=("vanilla",))
    arrays = _synthetic_cells(cfg)
    sha = hashlib.sha256(Path(cfg.models[0].path).read_bytes()).hexdigest()
    short = with_overrides(cfg, ["engine={'context_length': 400}"])
    _write_stores(short, arrays, tmp_path / "short", sha)
    with pytest.raises(StoreLookupError, match=r"another config \(setup\.engine\.context_length: stored 400, "
                                               r"wanted None\)"):
        report_from_store(tmp_path / "short", cfg)
    raw = with_overrides(cfg, ["prompt_style='raw'"])
    _write_stores(raw, arrays, tmp_path / "raw", sha)
    with pytest.raises(StoreLookupError, match=r"setup\.prompt_style: stored 'raw', wanted 'chat'"):
        report_from_store(tmp_path / "raw", cfg)
    # Another template (its text enters the inputs digest).
    from jaxjudge.prompts import get_template

    job = _job("score", "sim", "summeval", "coherence", "1-5")
    data = load_task_data(cfg.tasks[0]).examples
    base = job_setup(cfg, job, data)
    assert job_setup(cfg, _job("score", "sim", "summeval", "coherence", "2-6"), data) != base
    assert job_setup(cfg, job, data[:-1]) != base and job_setup(cfg, job, list(data)) == base
    assert get_template("summeval", "coherence") is not None
    # The right stores: found, and every one read is recorded with its key.
    _write_stores(cfg, arrays, tmp_path / "ok", sha)
    read: dict = {}
    report_from_store(tmp_path / "ok", cfg, stores_read=read)
    assert sorted(Path(p).name for p in read) == ["score-1-5"]
    store = Store.open(tmp_path / "ok" / "score-1-5")
    assert read[str(store.root)] == {"key_hash": store.key_hash, "key": store.key}


def test_upgrade_gives_older_stores_the_setup_after_checking_their_keys(tmp_path):
    from jaxjudge.experiment.extractions import upgrade_stores

    cfg = _cfg(tmp_path, scales=("1-5",), methods=("vanilla", "deb_r"), engine={"context_length": 2048})
    arrays = _synthetic_cells(cfg)
    a = arrays[Cell("sim", "summeval", "coherence", "1-5")]
    sha = hashlib.sha256(Path(cfg.models[0].path).read_bytes()).hexdigest()
    root = Path(cfg.store_root)
    engine_key = {"prompts_sha256": "p", "overflow": "truncate", "topk": 5, "chunk_size": 256, "model_sha256": sha}

    def legacy(context_length):
        shutil.rmtree(root, ignore_errors=True)
        score = _job("score", "sim", "summeval", "coherence", "1-5")
        Store.open(root / "sim" / "score-summeval-coherence-1-5",
                   {**store_match(score), **engine_key, "context_length": context_length}, n_chunks=1).write_chunk(
            0, {"example_ids": a.example_ids, "cand_logprobs": a.logprobs})
        rjob = _job("random_r", "sim", None, None, "1-5")
        Store.open(root / "sim" / "random_r-1-5", {**store_match(rjob), "model_sha256": sha}, n_chunks=1).write_chunk(
            0, {"cand_logprobs": a.random["R"].logprobs, "sequence_nll": a.random["R"].nll})

    legacy(400)
    with pytest.raises(StoreLookupError, match="written before stores recorded their setup.*store upgrade"):
        report_from_store(root, cfg)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match=r"score-summeval-coherence-1-5: its key differs from this config: "
                                          r"context_length: stored 400, wanted 2048"):
        upgrade_stores(cfg, log=lambda _: None)
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing rewritten
    legacy(2048)
    assert upgrade_stores(cfg, log=lambda _: None) == {"upgraded": 2, "current": 0, "absent": 0}
    assert upgrade_stores(cfg, log=lambda _: None) == {"upgraded": 0, "current": 2, "absent": 0}
    got = load_cells(cfg, StoreIndex(root))[Cell("sim", "summeval", "coherence", "1-5")]
    np.testing.assert_array_equal(got.logprobs, a.logprobs)
    np.testing.assert_array_equal(got.random["R"].nll, a.random["R"].nll)
    # A current store checked against another config is named, not upgraded again.
    with pytest.raises(ConfigError, match=r"setup\.prompt_style: stored 'chat', wanted 'raw'"):
        upgrade_stores(with_overrides(cfg, ["prompt_style='raw'"]), log=lambda _: None)


def test_contrastive_generations_are_loaded_for_the_report(tmp_path):
    big, small = tmp_path / "big.gguf", tmp_path / "small.gguf"
    big.write_bytes(b"main judge")
    small.write_bytes(b"assistant")
    sha = {m: hashlib.sha256(p.read_bytes()).hexdigest() for m, p in (("big", big), ("small", small))}
    cfg = _cfg(tmp_path, models=(ModelSpec("big", str(big)), ModelSpec("small", str(small))),
               pairs=(("big", "small"),), methods=("vanilla", "generate", "contrastive_generate"), scales=("1-5",))
    data = load_task_data(cfg.tasks[0])
    ids = data.ids()
    n = len(ids)
    rng = np.random.default_rng(3)
    perm = rng.permutation(n)
    parsed = np.where(rng.uniform(size=n) < 0.2, np.nan, rng.integers(1, 6, n)).astype(np.float32)
    root = Path(cfg.store_root)
    for role, arrays in (("score", {"example_ids": ids[perm], "cand_logprobs": rng.normal(size=(n, 5)) - 3}),
                         ("generate", {"example_ids": ids[perm], "parsed_scores": parsed[perm]}),
                         ("contrastive_generate", {"example_ids": ids[perm], "parsed_scores": parsed[::-1][perm]})):
        job = _job(role, "big", "summeval", "coherence", "1-5")
        key = _key(cfg, job, model_sha256=sha["big"])
        if role == "contrastive_generate":
            key.update(contrastive_generate_match(cfg, "big"), assistant_sha256=sha["small"])
        Store.open(root / role, key, n_chunks=1).write_chunk(0, arrays)
    cells_ = load_cells(cfg, StoreIndex(root))
    got = cells_[Cell("big", "summeval", "coherence", "1-5")]
    np.testing.assert_array_equal(got.contrastive_generated, parsed[::-1].astype(np.float64))
    np.testing.assert_array_equal(got.generated, parsed.astype(np.float64))
    # Other settings are another store; another assistant file is refused.
    with pytest.raises(StoreLookupError, match=r"lam: stored 0.5, wanted 1.0"):
        load_cells(with_overrides(cfg, ["contrastive_generate_lam=1.0"]), StoreIndex(root))
    small.write_bytes(b"another assistant")
    with pytest.raises(StoreModelMismatch, match="model 'small'"):
        load_cells(cfg, StoreIndex(root))


def test_splits_by_mode():
    groups = np.repeat(["a", "b", "c", "d", "e"], 3)
    kf = make_splits("kfold", groups, n_folds=5, seed=0)
    assert kf.dev.shape == (5, 15) and (kf.dev.sum(1) == 3).all() and (kf.test.sum(1) == 12).all()
    for f in range(5):  # dev is one whole document, test the other four
        assert len(set(groups[kf.dev[f]])) == 1 and not set(groups[kf.dev[f]]) & set(groups[kf.test[f]])
    fx = make_splits("fixed_docs", groups, dev_groups=["b", "e"])
    assert set(groups[fx.dev[0]]) == {"b", "e"} and set(groups[fx.test[0]]) == {"a", "c", "d"}
    labels = np.asarray(["train"] * 5 + ["dev"] * 10)
    orig = make_splits("original", groups, split_labels=labels, original=("train", "dev"))
    assert (orig.dev[0] == (labels == "train")).all() and (orig.test[0] == (labels == "dev")).all()
    with pytest.raises(ValueError, match="'test'"):
        make_splits("original", groups, split_labels=labels, original=("train", "test"))


SHARED = REPO.parent / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "summeval").is_dir(), reason="shared data absent")
def test_subsets_are_documented_and_keep_the_dev_documents(monkeypatch):
    monkeypatch.setenv("JAXJUDGE_DATA_DIR", str(SHARED))
    sub = SubsetSpec(reason="five test documents to fit the time budget", n_docs=5)
    td = load_task_data(TaskSpec("summeval", ("coherence",), split="fixed_docs", subset=sub))
    groups = set(td.groups().tolist())
    dev = set(td.dev_docs)
    assert len(dev) == 10 and dev <= groups and len(groups - dev) == 5 and len(td.examples) == 15 * 16
    assert td.notes and "five test documents" in td.notes[0]
    semrel = load_task_data(load_config(EXPERIMENTS / "random_number_debias.py").task("semrel"))
    n_train = int((semrel.split_labels == "train").sum())
    assert 900 < n_train <= 1000 and int((semrel.split_labels == "dev").sum()) == 250
    train_groups = set(semrel.groups()[semrel.split_labels == "train"].tolist())
    full = load_task_data(TaskSpec("semrel", ("relatedness",), split="original"))
    full_groups = full.groups()[full.split_labels == "train"]
    assert sum(int((full_groups == g).sum()) for g in train_groups) == n_train  # whole groups kept
