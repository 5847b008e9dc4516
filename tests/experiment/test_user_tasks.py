"""A task is data, a template is text, a judge is any model: a user's table, a template given
in the config and a Hub id, all checked before any forward pass, and the built-in tasks read
through the same description."""

from __future__ import annotations

import csv

import pytest

from jaxjudge.data.tasks import TASKS, TaskSource, load_task_data
from jaxjudge.experiment import ConfigError, ExperimentConfig, ModelSpec, TaskSpec, validate_config, with_overrides
from jaxjudge.caches import keep_caches_in
from jaxjudge.experiment.oneshot import model_name, parse_range, sweep_config
from jaxjudge.report.methods import JUDGE_SCORES

TEMPLATE = "Rate the answer from {min} to {max}.\n{{/prefix}}\nQ: {{Question}}\nA: {{Answer}}\nScore ({min}-{max}):"


def _table(tmp_path, n=12):
    path = tmp_path / "qa.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["question", "answer", "rating", "topic"])
        for i in range(n):
            w.writerow([f"question {i}?", f"answer {i}", i % 11, f"t{i % 4}"])
    return path


def _task(tmp_path, **kw):
    fields = dict(file=str(_table(tmp_path)), human_field="rating", human_range=(0, 10), group_field="topic",
                  templates={"rating": TEMPLATE})
    fields.update(kw)
    return TaskSpec("qa", ("rating",), **fields)


def _cfg(tmp_path, task, **kw):
    return ExperimentConfig(name="qa", models=(ModelSpec("m", "default"),), tasks=(task,), scales=("1-5",),
                            methods=("vanilla",), store_root=str(tmp_path / "st"), results_root=str(tmp_path / "out"),
                            **kw)


def test_builtin_tasks_and_a_file_are_one_description(tmp_path):
    assert all(isinstance(t, TaskSource) for t in TASKS.values())
    task = _task(tmp_path)
    src = task.source()
    assert isinstance(src, TaskSource) and src.is_file and src.human_range == (0.0, 10.0)
    assert TaskSpec("stsb", ("similarity",), split="original").source() is TASKS["stsb"]
    data = load_task_data(task)
    assert len(data.examples) == 12 and data.groups().tolist()[:5] == ["t0", "t1", "t2", "t3", "t0"]
    assert data.human("rating").tolist()[:3] == [0.0, 1.0, 2.0] and data.human_range == (0.0, 10.0)
    assert set(data.split_labels.tolist()) == {"all"}


def test_split_column_is_the_original_split(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(f'{{"q": "x{i}", "y": {i % 3}, "s": "{"dev" if i < 3 else "test"}"}}\n' for i in range(8)))
    task = TaskSpec("s", ("y",), file=str(path), human_range=(0, 2), split_field="s", split="original",
                    templates={"y": "{{q}} from {min} to {max}\n:"})
    assert task.original == ("dev", "test")
    assert load_task_data(task).split_labels.tolist() == ["dev"] * 3 + ["test"] * 5
    with pytest.raises(ConfigError, match="split_field: set split='original'"):
        TaskSpec("s", ("y",), file=str(path), human_range=(0, 2), split_field="s", templates={"y": "{{q}}\n"})


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(task="mydata", file=None), "TaskSpec[mydata].task: unknown task 'mydata'"),
    (dict(task="stsb"), "'stsb' is a built-in task"),
    (dict(human_range=None), "human_range: required with TaskSpec.file"),
    (dict(templates={"rating": "missing.txt"}), "template file not found: missing.txt"),
    (dict(templates={"other": TEMPLATE}), "templates key: unknown value 'other'"),
])
def test_task_fields_are_refused_in_one_line(tmp_path, kw, needle):
    fields = dict(file=str(_table(tmp_path)), human_field="rating", human_range=(0, 10), templates={"rating": TEMPLATE})
    name = kw.pop("task", "qa")
    fields.update(kw)
    with pytest.raises(ConfigError) as e:
        TaskSpec(name, ("rating",), **{k: v for k, v in fields.items() if v is not None or k != "file"})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_placeholder_the_data_lacks_and_a_fixed_range_are_found_before_any_model(tmp_path):
    bad = _task(tmp_path, templates={"rating": TEMPLATE.replace("{{Answer}}", "{{Reply}}")})
    with pytest.raises(ConfigError) as e:
        validate_config(_cfg(tmp_path, bad), check_files=True)
    assert "uses {{Reply}}, a field" in str(e.value) and "\n" not in str(e.value)
    fixed = _task(tmp_path, templates={"rating": "Q: {{Question}}\nScore (1-5):"})
    with pytest.raises(ConfigError, match=r"lacks \{max\} and \{min\}"):
        validate_config(_cfg(tmp_path, fixed), check_files=True)
    missing = _task(tmp_path, file=str(tmp_path / "gone.csv"))
    with pytest.raises(ConfigError, match="data file not found: .*gone.csv"):
        validate_config(_cfg(tmp_path, missing))


def test_a_changed_template_changes_the_store_key(tmp_path):
    task = _task(tmp_path)
    cfg = _cfg(tmp_path, task)
    examples = load_task_data(task).examples
    job = JUDGE_SCORES.job(cfg, "m", "qa", "rating", "1-5")
    other = with_overrides(cfg, [f"tasks=[{{'task': 'qa', 'aspects': ('rating',), 'file': {task.file!r}, "
                                 "'human_field': 'rating', 'human_range': (0, 10), 'group_field': 'topic', "
                                 f"'templates': {{'rating': {TEMPLATE.replace('Rate', 'Grade')!r}}}}}]"])
    job2 = JUDGE_SCORES.job(other, "m", "qa", "rating", "1-5")
    assert job.template().raw_text != job2.template().raw_text
    assert job.setup(cfg, examples)["inputs_sha256"] != job2.setup(other, examples)["inputs_sha256"]


def test_a_hub_id_that_cannot_be_fetched_is_one_line(monkeypatch, tmp_path):
    from jaxjudge.experiment import specs

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def offline(source):
        raise FileNotFoundError(f"could not fetch Hugging Face repo {source!r}") from OSError("offline mode\nmore")

    monkeypatch.setattr(specs, "resolve_source", offline)
    specs._hub_snapshot.cache_clear()
    model = ModelSpec("q", "Qwen/Qwen2.5-0.5B-Instruct")
    with pytest.raises(ConfigError) as e:
        model.resolved_path()
    assert str(e.value) == ("model 'q': Hugging Face Hub id 'Qwen/Qwen2.5-0.5B-Instruct' cannot be fetched "
                            "(offline or unknown repo: offline mode)")
    monkeypatch.setattr(specs, "resolve_source", lambda source: tmp_path)
    specs._hub_snapshot.cache_clear()
    assert model.resolved_path() == tmp_path
    specs._hub_snapshot.cache_clear()
    assert not specs.is_hub_id("./a/b") and not specs.is_hub_id("a/b.gguf") and specs.is_hub_id("org/name")


def test_the_one_command_config(tmp_path, monkeypatch):
    data = _table(tmp_path)
    template = tmp_path / "t.txt"
    template.write_text(TEMPLATE + "\n")
    cfg = sweep_config(data=str(data), template=str(template), judge="default", human="rating", human_range="0-10",
                       group="topic", ranges="1-5,3-7", methods="vanilla,deb_r", stores="st", results="out")
    (task,) = cfg.tasks
    assert (cfg.name, task.task, task.aspects, task.group_field, cfg.scales) == ("qa", "qa", ("rating",), "topic",
                                                                                   ("1-5", "3-7"))
    assert cfg.methods == ("vanilla", "deb_r") and cfg.models == (ModelSpec("default", "default"),)
    assert parse_range("--human-range", "-1-1") == (-1.0, 1.0)
    with pytest.raises(ConfigError, match="--human-range: '10-0'"):
        parse_range("--human-range", "10-0")
    with pytest.raises(ConfigError, match="--assistant: no method of --methods uses it"):
        sweep_config(data=str(data), template=str(template), judge="default", human="rating", human_range="0-10",
                     assistant="org/other")
    pair = sweep_config(data=str(data), template=str(template), judge="default", human="rating", human_range="0-10",
                        methods="vanilla,contrastive", assistant="org/default")
    assert [m.path for m in pair.models] == ["default", "org/default"] and pair.judges == ("default",)
    assert pair.pairs == (("default", "default_assistant"),)
    assert model_name("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen2.5-0.5B-Instruct" and model_name("gguf:a.b.gguf") == "a.b"
    for name in ("JAXJUDGE_XLA_CACHE", "JAXJUDGE_CACHE", "HF_HUB_CACHE", "HF_HOME", "MPLCONFIGDIR"):
        monkeypatch.setenv(name, "")  # recorded, so that teardown restores what keep_caches_in sets
        monkeypatch.delenv(name)
    monkeypatch.setenv("JAXJUDGE_CACHE", "/elsewhere")
    moved = keep_caches_in(str(tmp_path / "st"))
    assert sorted(moved) == ["HF_HUB_CACHE", "JAXJUDGE_XLA_CACHE", "MPLCONFIGDIR"]
    assert all(v.startswith(str(tmp_path / "st" / ".cache")) for v in moved.values())
