"""Jobs run through `run_extractions` on the tiny random judge with SmolLM2's tokenizer and chat
template (tests/tiny_judge.py): what each kind writes equals the engine called directly on the
same prompts, a second call computes nothing, and ``--dry-run``'s plan lists the stores the run
writes (one walk, `jaxjudge.experiment.plan_run`).

Slow: forward passes over one document of the embedded SummEval subset (16 summaries).
"""

from __future__ import annotations

import numpy as np
import pytest

from jaxjudge import models as M
from jaxjudge.data.tasks import load_task_data
from jaxjudge.engine import contrastive_generate_scores, extract
from jaxjudge.experiment import ExperimentConfig, ModelSpec, SubsetSpec, TaskSpec, run_extractions
from jaxjudge.jobs import ContentFreeJob, ContrastiveGenerateJob, ScoreJob
from jaxjudge.prompts import ScoreScale, chat_format, render_all
from jaxjudge.store import Store

pytestmark = pytest.mark.slow


def test_contrastive_generation_and_content_free_jobs_write_what_the_engine_gives(tmp_path, tiny_gguf, monkeypatch):
    from tests.tiny_judge import sha256

    # The same file under a second name stands in for the assistant (it shares the tokenizer).
    path = str(tiny_gguf)
    cfg = ExperimentConfig(
        name="run", models=(ModelSpec("main", path, sha256(path)), ModelSpec("asst", path, sha256(path))),
        pairs=(("main", "asst"),),
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=2,
                        subset=SubsetSpec("one document: a short test", n_docs=1)),),
        scales=("1-5",), methods=("vanilla", "contextual", "contrastive_generate"), temperatures=(1.0,),
        contrastive_generate_lam=0.5, generation_max_new_tokens=6, store_root=str(tmp_path / "stores"),
    )
    # The dry run and the run take one walk (`plan_run`): the stores the plan lists before anything
    # loads are the ones the run writes, in its order.
    import jaxjudge.experiment.dry_run as dry_run
    import jaxjudge.experiment.extractions as jobs_mod
    from jaxjudge.experiment import plan as plan_mod

    walks = []

    def counted(*a, **k):
        walks.append(a[0].name)
        return plan_mod.plan_run(*a, **k)

    for mod in (dry_run, jobs_mod):
        monkeypatch.setattr(mod, "plan_run", counted)
    planned = [line.split(" (")[0].strip() for line in dry_run.describe_run(cfg, dry_run.Launch(1, 0, 1, "cpu", "cpu"))
               if line.startswith("  main/")]
    logs = []
    first = run_extractions(cfg, progress=False, log=logs.append)
    assert walks == ["run", "run"]
    assert planned == [str(r.store.relative_to(tmp_path / "stores")) for r in first]
    assert [type(r.job) for r in first] == [ScoreJob, ContrastiveGenerateJob, ContentFreeJob]
    assert all(r.computed for r in first) and [r.n_rows for r in first] == [16, 16, 3]

    judge = M.load(path)
    chat = chat_format(judge)
    scale = ScoreScale.parse("1-5")
    examples = load_task_data(cfg.tasks[0]).examples
    cg = next(r for r in first if isinstance(r.job, ContrastiveGenerateJob))
    stored = Store.open(cg.store).load()
    assert Store.open(cg.store).key["assistant"] == "asst"
    ctx = judge.config.max_position_embeddings
    prompts = render_all(cg.job.template(), examples, scale, chat=chat, tokenizer=judge.tokenizer,
                         max_tokens=ctx - 6).prompts
    texts, parsed, _ = contrastive_generate_scores(judge, judge, prompts, scale, 6, lam=0.5, t_main=1.0, t_asst=1.0,
                                                   alpha=0.1, context_length=ctx)
    np.testing.assert_array_equal(stored["example_ids"], [p.example_id for p in prompts])
    np.testing.assert_array_equal(stored["parsed_scores"], np.asarray(parsed, np.float32))
    assert stored["texts"].tolist() == list(texts)

    cf = next(r for r in first if isinstance(r.job, ContentFreeJob))
    want = extract(judge, cf.job.prompts((), chat=chat), scale, progress=False)
    np.testing.assert_allclose(Store.open(cf.store).load()["cand_logprobs"], want.cand_logprobs, atol=1e-6)

    again = run_extractions(cfg, progress=False, log=logs.append)
    assert not any(r.computed for r in again) and [r.store for r in again] == [r.store for r in first]
    assert sum(line.startswith("cached") for line in logs) == 3
