"""The engine's throughput on one accelerator (or this CPU): `engine.extract` end to end beside its
bare steps, each next to a model's bound for the same programs (random weights of a judge's shapes).

What runs is the engine's own code: a `jaxjudge.models.Judge` of random bfloat16 weights of a
preset's shapes (`jaxjudge.aot.presets`, Llama-3-8B by default; made on the devices, sharded by
the project's rules over a ``(data, model)`` mesh) with a byte-level tokenizer written here, and

- **end to end**: `jaxjudge.engine.extract` over ``--docs`` SummEval-shaped documents (a shared
  prefix of ``--prefix`` tokens, ``--tails`` summaries of ``--tail-len`` tokens each, scored on a
  1-5 scale): tokenisation, planning, batching, prefix cache, host transfers, the device calls
  and the host-side reduction. The first call (which compiles) is not timed; a second over other
  documents of the same shapes is.
- **bare step**: the same two device calls per document the engine makes
  (`jaxjudge.engine.calls.prefill_prefixes`, then `calls.read_rows` of every tail against the
  prefix), on arrays already made, dispatched back to back; the mean over ``--repeats``.
- **decode**: the engine's greedy decoding loop (`jaxjudge.engine.decode.generate_tokens`) for
  ``--decode-rows`` rows continuing a prefix, seconds per generated token.

Beside each time, **the model's bound** for the same work, a bound and not a prediction: the
larger of (useful flops at the peak) and (bytes that must cross HBM at the bandwidth), where
useful flops are `jaxjudge.aot.flops.score_flops` (causal attention counted once, padding not
counted) and the bytes are the parameters once per device call plus the KV caches written. Two
peaks where known: the vendor's dense bf16 figures (a table below, with sources; GPUs only) and
the rate of a plain matrix product and an elementwise copy in the judge's dtype measured in the
same run (the only figures on a CPU; the copy over as many bytes as the parameters per chip,
so that on a CPU it sits in the same level of cache as they do; a bound only as far as those probes reach the device's
ceilings: a program whose matmuls beat the probe's can run under it). ``MFU`` is useful flops over time x peak.

``--tiny`` runs the same code at a tiny shape (2 layers of head_dim 128, widths 256, a
512-token vocabulary, float32, 1 device) in well under a minute on a CPU: what CI runs so the script
cannot rot; its figures say nothing about an accelerator.

Run: ``python benchmarks/bench_device.py [--judge llama-3-8b] [--json FILE]`` or ``--tiny``.
It asserts nothing about time.

Measured before this script ran the engine (2026-12-04; one NVIDIA H200, jax 0.11.2 with CUDA
13, flax 0.12.10; Llama-3-8B shapes, 32 layers scanned, bf16, prefix 700 + tails of 120 tokens;
8192^3 bf16 matmul 775-784 TFLOP/s, elementwise copy 3.30-3.33 TB/s measured in the same runs),
of a stand-in that fused the prefill and the reads in one program (which the engine never ran)
and of a one-token decode step (not the engine's loop):

=====================================  ==========  ==========  ===========  ===============
XLA flags                              16 tails    64 tails    256 tails    decode, 16 rows
=====================================  ==========  ==========  ===========  ===============
none (Triton GEMMs)                    25,290 t/s  29,169 t/s  32,668 t/s   16.6 ms/step
                                       MFU 36.6%   42.3%       47.4%        3.33x copy bound
``--xla_gpu_enable_triton_gemm=false   29,842 t/s  31,336 t/s  33,183 t/s   9.4-10.9 ms/step
--xla_gpu_enable_dynamic_slice_fusion  MFU 43.2%   45.4%       48.2%        1.9-2.2x copy bound
=true``
=====================================  ==========  ==========  ===========  ===============

MFU there is against the vendor's 989 TFLOP/s. Why that decode step was 3.3x its bound, read in
its compiled HLO (``--hlo``): the layer scan's body sliced each layer's weights out of the
stacked parameters with a separate dynamic-slice fusion that wrote a copy, which the GEMM then
read; with cuBLAS GEMMs and dynamic-slice fusion the slices became address offsets. The engine
end to end has not been measured on an accelerator yet.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from jaxjudge import engine
from jaxjudge.aot import flops as _flops
from jaxjudge.aot.compile import _config
from jaxjudge.aot.presets import judge_config
from jaxjudge.engine import calls
from jaxjudge.engine import primitives as _prim
from jaxjudge.engine.decode import generate_tokens
from jaxjudge.models import sharding as _sh
from jaxjudge.models.convert import abstract_model
from jaxjudge.models.judge import Judge
from jaxjudge.models.layers import as_dtype
from jaxjudge.prompts import RenderedPrompt, ScoreScale

# Vendor figures per device kind (substring of jax's device_kind): dense bf16 FLOP/s, HBM bytes/s.
GPU_PEAKS: dict[str, tuple[float, float, str]] = {
    "H200": (989.4e12, 4.8e12, "NVIDIA H200 datasheet: 989 TFLOP/s dense bf16 (1,979 with sparsity), 4.8 TB/s"),
    "H100": (989.4e12, 3.35e12, "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense bf16, 3.35 TB/s"),
    "A100": (312e12, 2.039e12, "NVIDIA A100 SXM 80GB datasheet: 312 TFLOP/s bf16, 2,039 GB/s"),
}


def _peaks(device) -> tuple[float | None, float | None, str]:
    kind = getattr(device, "device_kind", "")
    for name, (flops, bw, src) in GPU_PEAKS.items():
        if name.lower() in kind.lower():
            return flops, bw, src
    return None, None, f"no vendor figures for device kind {kind!r}"


def _timed(fn, repeats: int) -> float:
    """Mean seconds per call, the calls dispatched back to back and the last one waited for."""
    out = fn()
    jax.block_until_ready(out)
    t0 = time.perf_counter()
    for _ in range(repeats):
        out = fn()
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / repeats


def _best(fn, repeats: int) -> float:
    """Seconds of the fastest of ``repeats`` calls, each waited for (after one call that compiles)."""
    jax.block_until_ready(fn())
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_ceiling(n: int, repeats: int, dtype=jnp.bfloat16) -> float:
    """FLOP/s of an n^3 matrix product in ``dtype`` on the default device (its fastest call)."""
    k1, k2 = jax.random.split(jax.random.key(1))
    a = jax.random.normal(k1, (n, n), dtype)
    b = jax.random.normal(k2, (n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    return 2 * n ** 3 / _best(lambda: f(a, b), repeats)


def copy_bandwidth(nbytes: int, repeats: int, dtype=jnp.bfloat16) -> float:
    """Bytes/s read plus written by an elementwise pass over an array of ``nbytes`` in ``dtype``
    (its fastest call)."""
    x = jnp.ones((nbytes // jnp.dtype(dtype).itemsize,), dtype)
    f = jax.jit(lambda v: v * 2)
    return 2 * nbytes / _best(lambda: f(x), repeats)


def random_state(cfg, dtype, mesh, seed: int = 0, scan_unroll: int = 1) -> tuple[nnx.GraphDef, Any, int]:
    """The decoder's graphdef and a state of random weights in their shardings, made on the devices
    (never on the host), and the parameter bytes per chip."""
    model = abstract_model(cfg, dtype, scan_unroll=scan_unroll)  # the device tunings a loaded judge has
    graphdef, abstract = nnx.split(model)
    shardings = _sh.param_shardings(abstract, mesh)
    variables, treedef = jax.tree.flatten(abstract, is_leaf=lambda x: isinstance(x, nnx.Variable))
    targets = jax.tree.leaves(shardings)
    if len(targets) != len(variables):
        raise RuntimeError(f"{len(variables)} parameters but {len(targets)} shardings")
    shapes = [(tuple(v.get_value().shape), v.get_value().dtype) for v in variables]

    def make(keys):
        out = []
        for k, (shape, dt) in zip(keys, shapes):
            if len(shape) <= 1 or (len(shape) == 2 and shape[0] == cfg.num_hidden_layers):  # norms: ones
                out.append(jnp.ones(shape, dt))
            else:
                out.append((0.02 * jax.random.normal(k, shape, jnp.float32)).astype(dt))
        return tuple(out)

    keys = jax.random.split(jax.random.key(seed), len(variables))
    arrays = jax.jit(make, out_shardings=tuple(targets))(keys)
    state = jax.tree.unflatten(treedef, [v.replace(a) for v, a in zip(variables, arrays)])
    per_chip = sum(math.prod(s.shard_shape(shape)) * jnp.dtype(dt).itemsize
                   for s, (shape, dt) in zip(targets, shapes))
    return graphdef, state, per_chip


# ------------------------------------------------------------------------------ the judge and its prompts

LETTERS = "abcdefghijklmnopqrstuvwxyz"
TINY = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 128, "vocab_size": 512, "num_hidden_layers": 2}


def byte_tokenizer() -> Tokenizer:
    """Byte-level BPE whose only merges are " 0".." 9": a lowercase letter is one token, and so is a
    score candidate after its space (" 3")."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    pairs = [("Ġ", d) for d in "0123456789"]
    for a, b in pairs:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def random_judge(cfg, dtype, mesh, scan_unroll: int = 1) -> tuple[Judge, int]:
    """A judge of random weights (`random_state`) with `byte_tokenizer`, on ``mesh``; and its
    parameter bytes per chip."""
    graphdef, state, per_chip = random_state(cfg, dtype, mesh, scan_unroll=scan_unroll)
    judge = Judge(cfg, nnx.merge(graphdef, state), byte_tokenizer(), source="random weights")
    judge.mesh = mesh
    return judge, per_chip


def documents(n: int, *, prefix: int, tails: int, tail_len: int, seed: int) -> list[RenderedPrompt]:
    """``n`` documents, each a shared prefix of exactly ``prefix`` tokens and ``tails`` suffixes of
    ``tail_len`` tokens each (random letters; the suffix ends in ":"), scored after a space."""
    rng = np.random.default_rng(seed)

    def letters(k: int) -> str:
        return "".join(rng.choice(list(LETTERS), k))

    docs = [letters(prefix) for _ in range(n)]
    return [RenderedPrompt(docs[d], letters(tail_len - 1) + ":", f"d{d}/{j}", f"d{d}", " ", False)
            for d in range(n) for j in range(tails)]


# ------------------------------------------------------------------------------ the model's bound


def kv_bytes(cfg, tokens: int, dtype) -> int:
    """Key and value bytes of ``tokens`` positions over every layer (all heads, one copy)."""
    return 2 * cfg.num_hidden_layers * tokens * cfg.num_key_value_heads * cfg.head_dim * jnp.dtype(dtype).itemsize


def bound(flops: float, hbm_bytes: float, chips: int, peaks: dict[str, float], bws: dict[str, float]
          ) -> dict[str, float]:
    """Seconds per figure source: max(useful flops / (chips x peak), bytes per chip / bandwidth)."""
    return {k: max(flops / (chips * peaks[k]) if k in peaks else 0.0, hbm_bytes / bws[k] if k in bws else 0.0)
            for k in sorted(set(peaks) | set(bws))}


# ------------------------------------------------------------------------------ the measurements


def bench_score(judge: Judge, param_bytes: int, *, prefix: int, tails: int, tail_len: int, docs: int,
                repeats: int, peaks: dict[str, float], bws: dict[str, float]) -> dict[str, Any]:
    """`engine.extract` end to end over ``docs`` documents, and its two device calls per
    document on ready arrays, each with the model's bound for the same work."""
    cfg, mesh = judge.config, judge.mesh
    chips = 1 if mesh is None else int(mesh.devices.size)
    scale = ScoreScale(1, 5)
    opts = dict(batch_size=tails, max_batch_tokens=max(8192, 2 * tails * (tail_len + 32)), chunk_size=docs * tails,
                min_prefix_tokens=1, progress=False)
    t0 = time.perf_counter()
    engine.extract(judge, documents(docs, prefix=prefix, tails=tails, tail_len=tail_len, seed=1), scale, **opts)
    first = time.perf_counter() - t0
    prompts = documents(docs, prefix=prefix, tails=tails, tail_len=tail_len, seed=2)
    t0 = time.perf_counter()
    out = engine.extract(judge, prompts, scale, **opts)
    e2e = time.perf_counter() - t0
    if len(out) != len(prompts) or not np.isfinite(out.cand_logprobs).all():
        raise RuntimeError(f"engine.extract returned {len(out)} rows for {len(prompts)} prompts, or non-finite values")

    # The bare step: the engine's two calls for one document, on arrays made here.
    rng = np.random.default_rng(3)
    ids = judge.encode(prompts[0].prefix, add_special_tokens=False)
    t_len = _prim.bucket_length(tail_len)
    rows = judge.round_rows(tails)
    tokens = np.zeros((rows, t_len), np.int32)
    tokens[:, t_len - tail_len:] = rng.integers(0, len(LETTERS), (rows, tail_len))
    mask = np.zeros((rows, t_len), bool)
    mask[:tails, t_len - tail_len:] = True
    read = np.full((rows, 1), t_len - 1, np.int32)
    pick_read = np.zeros((rows, 5), np.int32)
    pick_token = rng.integers(0, cfg.vocab_size, (rows, 5)).astype(np.int32)

    def step():
        cache = calls.prefill_prefixes(judge, [ids])
        return calls.read_rows(judge, tokens, mask, read, pick_read, pick_token, answer_read=0, topk=5, prefix=cache)

    bare = _timed(step, repeats)
    flops = _flops.score_flops(cfg, prefix, tails, tail_len)
    model_axis = 1 if mesh is None else int(mesh.shape["model"])
    # Two device calls each read every parameter; the prefix's K/V is written once (split over model).
    hbm = 2 * param_bytes + kv_bytes(cfg, prefix, judge.dtype) / model_axis
    per_doc = bound(flops, hbm, chips, peaks, bws)
    tokens_per_doc = prefix + tails * tail_len
    return {"prefix": prefix, "tails": tails, "tail_len": tail_len, "docs": docs, "tokens_per_doc": tokens_per_doc,
            "flops_useful_per_doc": flops, "hbm_bytes_per_doc_per_chip": hbm,
            "engine_first_call_seconds": first, "engine_seconds": e2e, "engine_seconds_per_doc": e2e / docs,
            "engine_tokens_per_second": docs * tokens_per_doc / e2e,
            "bare_seconds_per_doc": bare, "bare_tokens_per_second": tokens_per_doc / bare,
            "bound_seconds_per_doc": per_doc,
            "bound_tokens_per_second": {k: tokens_per_doc / v for k, v in per_doc.items() if v > 0},
            "mfu": {"engine": {k: flops * docs / (chips * p * e2e) for k, p in peaks.items()},
                    "bare": {k: flops / (chips * p * bare) for k, p in peaks.items()}}}


def bench_decode(judge: Judge, param_bytes: int, *, prefix: int, rows: int, tail_len: int, steps: int,
                 peaks: dict[str, float], bws: dict[str, float]) -> dict[str, Any]:
    """Seconds per token of the engine's greedy decoding loop for ``rows`` rows that continue
    one prefix (their ``tail_len`` tokens prefilled first), ``steps`` tokens a call."""
    cfg, mesh = judge.config, judge.mesh
    chips = 1 if mesh is None else int(mesh.devices.size)
    rows = judge.round_rows(rows)
    rng = np.random.default_rng(1)
    prefix_cache = calls.prefill_prefixes(judge, [rng.integers(0, len(LETTERS), prefix).tolist()])
    t_len = _prim.bucket_length(tail_len)
    tok = rng.integers(0, len(LETTERS), (rows, t_len)).astype(np.int32)

    def run():
        logits, cache = judge.extend(tok, prefix=prefix_cache, max_length=t_len + steps)
        jax.block_until_ready(cache)
        t0 = time.perf_counter()
        generate_tokens(judge, logits[:, 0], cache, max_new_tokens=steps, prefix=prefix_cache, stop_at_eos=False)
        return time.perf_counter() - t0  # generate_tokens waits for its tokens on the host

    run()  # compiles
    secs = min(run(), run()) / steps
    context = prefix + tail_len + steps - 1
    model_axis = 1 if mesh is None else int(mesh.shape["model"])
    data_axis = chips // model_axis
    caches = (kv_bytes(cfg, _prim.slot_bucket(_prim.bucket_length(prefix)), judge.dtype)
              + rows * kv_bytes(cfg, t_len + steps, judge.dtype) / data_axis) / model_axis
    per_token = bound(_flops.decode_flops(cfg, rows, context), param_bytes + caches, chips, peaks, bws)
    return {"prefix": prefix, "rows": rows, "context": context, "steps": steps, "seconds_per_token": secs,
            "cache_bytes_per_chip": caches, "bound_seconds_per_token": per_token,
            "over_bound": {k: secs / v for k, v in per_token.items() if v > 0}}


def _ratio(measured: float, bounds: dict[str, float]) -> str:
    return ", ".join(f"{measured / v:.2f}x the {k} bound ({v * 1e3:.2f} ms)" for k, v in bounds.items() if v > 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--judge", default="llama-3-8b", help="a preset of jaxjudge.aot.presets or a config.json")
    ap.add_argument("--tiny", action="store_true",
                    help="the judge's shapes narrowed to a tiny model on one device, small steps: a CPU check of "
                         "the script, in seconds")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--layers", type=int, default=None, help="layers (default: the judge's depth)")
    ap.add_argument("--devices", type=int, default=None, help="use the first N devices (default: all)")
    ap.add_argument("--model", type=int, default=None, help="model axis size (default: all devices used)")
    ap.add_argument("--prefix", type=int, default=700)
    ap.add_argument("--tails", default="16,64,256", help="comma-separated tails per document ('': none)")
    ap.add_argument("--tail-len", type=int, default=120)
    ap.add_argument("--docs", type=int, default=8, help="documents engine.extract scores per timed call")
    ap.add_argument("--decode-rows", type=int, default=16, help="rows of the decoding loop (0: skip it)")
    ap.add_argument("--decode-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--ceiling-n", type=int, default=8192, help="matrix size of the measured matmul ceiling (0: skip)")
    ap.add_argument("--scan-unroll", type=int, default=1, help="layers unrolled per step of the layer scan")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.tiny:
        args.devices = args.devices or 1
        for name, value in (("prefix", 96), ("tails", "4"), ("tail_len", 24), ("docs", 3), ("decode_rows", 2),
                            ("decode_len", 4), ("repeats", 3), ("ceiling_n", 1024), ("dtype", "float32")):
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)

    devices = jax.devices()[:args.devices] if args.devices else jax.devices()
    dev = devices[0]
    model_axis = args.model or len(devices)
    mesh = _sh.make_mesh(len(devices) // model_axis, model_axis, devices=devices)
    vendor_flops, vendor_bw, source = _peaks(dev)
    print(f"jax {jax.__version__} on {len(devices)} x {dev.platform} {getattr(dev, 'device_kind', '')} "
          f"({platform.machine()}); mesh {dict(mesh.shape)}; vendor figures: {source}", flush=True)
    out: dict[str, Any] = {"jax": jax.__version__, "device_kind": getattr(dev, "device_kind", ""),
                           "devices": len(devices), "mesh": dict(mesh.shape), "judge": args.judge, "tiny": args.tiny,
                           "dtype": args.dtype, "scan_unroll": args.scan_unroll, "vendor_peak_flops": vendor_flops,
                           "vendor_hbm_bandwidth": vendor_bw, "vendor_source": source,
                           "bound": "a model's bound, not a measurement: max(useful flops / peak, HBM bytes / "
                                    "bandwidth) for the same work, at vendor figures and at rates measured in "
                                    "this run"}
    dtype = as_dtype(args.dtype)
    hf = judge_config(args.judge)
    if args.tiny:
        hf = {**hf, **TINY}
    cfg = _config(hf, args.layers)
    t0 = time.perf_counter()
    judge, param_bytes = random_judge(cfg, dtype, mesh, scan_unroll=args.scan_unroll)
    jax.block_until_ready(judge.state)
    out.update(layers=cfg.num_hidden_layers, params=cfg.num_params(), param_bytes_per_chip=param_bytes)
    print(f"{args.judge}{' (tiny)' if args.tiny else ''}: {cfg.num_hidden_layers} layers, "
          f"{cfg.num_params() / 1e9:.3f} B parameters, {param_bytes / 2**30:.3f} GiB per chip, made in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    if args.ceiling_n:
        out["matmul_flops_measured"] = matmul_ceiling(args.ceiling_n, args.repeats, dtype)
        out["copy_bandwidth_measured"] = copy_bandwidth(4 << 30 if dev.platform == "gpu" else max(param_bytes, 1 << 20),
                                                        args.repeats, dtype)
        print(f"measured here: {args.ceiling_n}^3 {jnp.dtype(dtype).name} matmul {out['matmul_flops_measured'] / 1e12:.3f} TFLOP/s; "
              f"elementwise copy {out['copy_bandwidth_measured'] / 1e12:.3f} TB/s", flush=True)
    peaks = {k: v for k, v in (("vendor", vendor_flops), ("measured", out.get("matmul_flops_measured"))) if v}
    bws = {k: v for k, v in (("vendor", vendor_bw), ("measured", out.get("copy_bandwidth_measured"))) if v}
    out["score"] = []
    for tails in (int(t) for t in args.tails.split(",") if t.strip()):
        r = bench_score(judge, param_bytes, prefix=args.prefix, tails=tails, tail_len=args.tail_len, docs=args.docs,
                        repeats=args.repeats, peaks=peaks, bws=bws)
        out["score"].append(r)
        mfu = "; ".join(f"MFU {what} {', '.join(f'{v:.1%} of {k} peak' for k, v in m.items())}"
                        for what, m in r["mfu"].items())
        print(f"score, {args.docs} documents of prefix {args.prefix} + {tails} x {args.tail_len} tokens:\n"
              f"  engine.extract end to end: {r['engine_seconds_per_doc'] * 1e3:.1f} ms/document, "
              f"{r['engine_tokens_per_second']:,.0f} tokens/s; "
              f"{_ratio(r['engine_seconds_per_doc'], r['bound_seconds_per_doc'])} (first call, compiling: "
              f"{r['engine_first_call_seconds']:.1f} s)\n"
              f"  bare step (prefill + reads): {r['bare_seconds_per_doc'] * 1e3:.1f} ms/document, "
              f"{r['bare_tokens_per_second']:,.0f} tokens/s; {_ratio(r['bare_seconds_per_doc'], r['bound_seconds_per_doc'])}\n"
              f"  model's bound (useful flops at peak or HBM bytes at bandwidth, not a measurement): "
              + ", ".join(f"{v:,.0f} tokens/s at {k} figures" for k, v in r["bound_tokens_per_second"].items())
              + (f"\n  {mfu}" if mfu else ""), flush=True)
    if args.decode_rows:
        d = bench_decode(judge, param_bytes, prefix=args.prefix, rows=args.decode_rows, tail_len=args.tail_len,
                         steps=args.decode_len, peaks=peaks, bws=bws)
        out["decode"] = d
        print(f"decode (the engine's loop): {d['rows']} rows, {d['steps']} tokens to context {d['context']}: "
              f"{d['seconds_per_token'] * 1e3:.2f} ms/token; {_ratio(d['seconds_per_token'], d['bound_seconds_per_token'])}",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
