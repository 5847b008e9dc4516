"""Scoring-step and decode-step throughput of an 8B-shaped judge on one accelerator (random weights).

What it runs is the program `jaxjudge aot` compiles for a TPU (`jaxjudge.aot.compile`): the
engine's scoring step (one shared prefix prefilled into a batch-1 KV cache, then every tail
continuing it and read at its answer position: picked log-probabilities, the log-normaliser,
greedy token and top-k) and one step of greedy decoding through a per-row KV cache that
continues the prefix. Here it runs for real on whatever accelerator JAX finds, with random
bfloat16 weights of the judge's shapes (a preset of `jaxjudge.aot.presets`, Llama-3-8B by
default), parameters sharded by the project's rules over a ``(data, model)`` mesh of the local
devices.

Reported per workload (prefix tokens, tails x tail tokens):

- seconds per scoring step, steps dispatched back to back (the next step is queued before the
  last one's result is read, as a sweep runs) and the mean over ``--repeats`` steps;
- tokens/s: real prompt tokens (prefix + tails x tail length) per second;
- MFU: the analytic useful flops of the step (`jaxjudge.aot.flops.score_flops`: causal
  attention counted once, padding not counted) over time x peak. Two peaks are used: the
  vendor's dense bf16 figure for the chip (a table below, with sources) and the rate of a
  plain 8192^3 bf16 matrix product measured in the same run (what XLA reaches on this device).

For decoding: seconds per step over ``--decode-len`` steps, against the HBM-bandwidth bound
(parameter + KV-cache bytes per chip over the bandwidth, both the vendor figure and a copy
bandwidth measured in the same run).

Run: ``python benchmarks/bench_device.py [--judge llama-3-8b] [--json FILE]``. On a CPU it runs
too (use ``--layers 1`` and small shapes); it asserts nothing about time.

One run each (2026-12-04; one NVIDIA H200, jax 0.11.2 with CUDA 13, flax 0.12.10; Llama-3-8B
shapes, 32 layers scanned, bf16, prefix 700 + tails of 120 tokens; measured in the same runs:
8192^3 bf16 matmul 775-784 TFLOP/s, elementwise copy 3.30-3.33 TB/s):

=====================================  ==========  ==========  ===========  ===============
XLA flags                              16 tails    64 tails    256 tails    decode, 16 rows
=====================================  ==========  ==========  ===========  ===============
none (Triton GEMMs)                    25,290 t/s  29,169 t/s  32,668 t/s   16.6 ms/step
                                       MFU 36.6%   42.3%       47.4%        3.33x copy bound
``--xla_gpu_enable_triton_gemm=false   29,842 t/s  31,336 t/s  33,183 t/s   9.4-10.9 ms/step
--xla_gpu_enable_dynamic_slice_fusion  MFU 43.2%   45.4%       48.2%        1.9-2.2x copy bound
=true``
=====================================  ==========  ==========  ===========  ===============

MFU is against the vendor's 989 TFLOP/s (divide by 0.79 for the share of the measured matmul
rate). The decode step's bound is its 15.4 GiB of parameters and caches at the measured copy
bandwidth (5.0 ms). Why the default decode step is 3.3x its bound, read in its compiled HLO
(``--hlo``): the layer scan's body slices each layer's weights out of the stacked parameters
with a separate dynamic-slice fusion that writes a copy, and the GEMM then reads the copy, so
every weight byte is read twice and written once per step. With cuBLAS GEMMs and dynamic-slice
fusion, the slices become address offsets into the cuBLAS calls (8 of the 10 per layer) and the
copies go. ``--xla_gpu_enable_dynamic_slice_fusion=true`` alone (Triton GEMMs) changed nothing
(16.8 ms); cuBLAS alone gave 10.1 ms. ``--scan-unroll 32`` did not compile within 100 s (XLA
constant-folds masks of the unrolled program).
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
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxjudge.aot import flops as _flops
from jaxjudge.aot import compile as _aot
from jaxjudge.aot.presets import judge_config
from jaxjudge.engine import primitives as _prim
from jaxjudge.models import decoder as _dec
from jaxjudge.models import sharding as _sh
from jaxjudge.models.convert import abstract_model
from jaxjudge.models.layers import as_dtype

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


def matmul_ceiling(n: int, repeats: int) -> float:
    """FLOP/s of an n^3 bf16 matrix product on the default device."""
    k1, k2 = jax.random.split(jax.random.key(1))
    a = jax.random.normal(k1, (n, n), jnp.bfloat16)
    b = jax.random.normal(k2, (n, n), jnp.bfloat16)
    f = jax.jit(lambda x, y: x @ y)
    return 2 * n ** 3 / _timed(lambda: f(a, b), repeats)


def copy_bandwidth(nbytes: int, repeats: int) -> float:
    """Bytes/s read plus written by an elementwise pass over a bf16 array of ``nbytes``."""
    x = jnp.ones((nbytes // 2,), jnp.bfloat16)
    f = jax.jit(lambda v: v * 2)
    return 2 * nbytes / _timed(lambda: f(x), repeats)


def random_state(cfg, dtype, mesh, seed: int = 0, scan_unroll: int = 1) -> tuple[nnx.GraphDef, Any, int]:
    """The decoder's graphdef and a state of random weights in their shardings, made on the devices
    (never on the host), and the parameter bytes per chip."""
    model = abstract_model(cfg, dtype, fused_gate_up_min_rows=None, attention_query_chunk=None,
                           scan_unroll=scan_unroll)
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


def bench_score(cfg, dtype, mesh, graphdef, state, *, prefix: int, tails: int, tail_len: int,
                repeats: int, candidates: int = 5, topk: int = 5) -> dict[str, Any]:
    data = mesh.shape["data"]
    rows = -(-tails // data) * data
    p_len, t_len = _prim.bucket_length(prefix), _prim.bucket_length(tail_len)
    p_slots = _prim.slot_bucket(p_len)
    rng = np.random.default_rng(0)
    rep, rows2 = NamedSharding(mesh, P()), NamedSharding(mesh, P("data", None))
    vocab = cfg.vocab_size
    p_tok = np.zeros((1, p_len), np.int32)
    p_tok[:, p_len - prefix:] = rng.integers(0, vocab, (1, prefix))
    p_mask = np.zeros((1, p_len), bool)
    p_mask[:, p_len - prefix:] = True
    tok = np.zeros((rows, t_len), np.int32)
    tok[:, t_len - tail_len:] = rng.integers(0, vocab, (rows, tail_len))
    mask = np.zeros((rows, t_len), bool)
    mask[:tails, t_len - tail_len:] = True
    read = np.full((rows, 1), t_len - 1, np.int32)
    pick_read = np.zeros((rows, candidates), np.int32)
    pick_token = rng.integers(0, vocab, (rows, candidates)).astype(np.int32)
    args = [jax.device_put(p_tok, rep), jax.device_put(p_mask, rep), jax.device_put(tok, rows2),
            jax.device_put(mask, rows2), jax.device_put(read, rows2), jax.device_put(pick_read, rows2),
            jax.device_put(pick_token, rows2)]
    step = jax.jit(_aot._score_fn(cfg, dtype, p_slots, 0, topk), static_argnums=(0,))
    t0 = time.perf_counter()
    jax.block_until_ready(step(graphdef, state, *args))
    first = time.perf_counter() - t0
    secs = _timed(lambda: step(graphdef, state, *args), repeats)
    tokens = prefix + tails * tail_len
    return {"prefix": prefix, "tails": tails, "tail_len": tail_len, "tokens": tokens,
            "padded_tokens": p_len + rows * t_len, "first_call_seconds": first, "seconds": secs,
            "tokens_per_second": tokens / secs, "flops_useful": _flops.score_flops(cfg, prefix, tails, tail_len)}


def bench_decode(cfg, dtype, mesh, graphdef, state, *, prefix: int, rows: int, tail_len: int, steps: int,
                 hlo: str | None = None) -> dict[str, Any]:
    data = mesh.shape["data"]
    rows = -(-rows // data) * data
    p_len, t_len = _prim.bucket_length(prefix), _prim.bucket_length(tail_len)
    p_slots = _prim.slot_bucket(p_len)
    slots = t_len + steps
    rng = np.random.default_rng(1)
    rep, rows2 = NamedSharding(mesh, P()), NamedSharding(mesh, P("data", None))

    def cache_of(batch, n):
        abstract = jax.eval_shape(lambda: _dec.init_cache(cfg, batch, n, dtype))
        return jax.jit(lambda: _dec.init_cache(cfg, batch, n, dtype),
                       out_shardings=_sh.cache_sharding(mesh, abstract))()

    def prefill(gd, st, tokens, mask, cache, pre):
        b = tokens.shape[0]
        _, cache = _dec.forward(gd, st, tokens, mask, jnp.zeros((b, 1), jnp.int32), None, cache, pre)
        return cache

    fill = jax.jit(prefill, static_argnums=(0,), donate_argnums=(4,))
    p_tok = jax.device_put(rng.integers(0, cfg.vocab_size, (1, p_len)).astype(np.int32), rep)
    prefix_cache = fill(graphdef, state, p_tok, jax.device_put(np.ones((1, p_len), bool), rep),
                        cache_of(1, p_slots), None)
    t_tok = jax.device_put(rng.integers(0, cfg.vocab_size, (rows, t_len)).astype(np.int32), rows2)
    row_cache = fill(graphdef, state, t_tok, jax.device_put(np.ones((rows, t_len), bool), rows2),
                     cache_of(rows, slots), prefix_cache)
    step = jax.jit(_aot._decode_step, static_argnums=(0,), donate_argnums=(3,))
    token = jax.device_put(np.zeros((rows, 1), np.int32), rows2)
    if hlo:  # the compiled decode step's HLO text, to read what the program does per layer
        with open(hlo, "w") as f:
            f.write(step.lower(graphdef, state, token, row_cache, prefix_cache).compile().as_text())
    token, row_cache = step(graphdef, state, token, row_cache, prefix_cache)  # compile
    jax.block_until_ready(token)
    t0 = time.perf_counter()
    for _ in range(steps - 1):
        token, row_cache = step(graphdef, state, token[:, None], row_cache, prefix_cache)
    jax.block_until_ready(token)
    secs = (time.perf_counter() - t0) / max(steps - 1, 1)
    cache_bytes = sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
                      for x in jax.tree.leaves((row_cache, prefix_cache)))
    return {"prefix": prefix, "rows": rows, "context": prefix + tail_len + steps - 1, "seconds": secs,
            "cache_bytes_per_chip": cache_bytes,
            "flops_useful": _flops.decode_flops(cfg, rows, prefix + tail_len + steps - 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--judge", default="llama-3-8b", help="a preset of jaxjudge.aot.presets or a config.json")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--layers", type=int, default=None, help="layers (default: the judge's depth)")
    ap.add_argument("--model", type=int, default=None, help="model axis size (default: all local devices)")
    ap.add_argument("--prefix", type=int, default=700)
    ap.add_argument("--tails", default="16,64,256", help="comma-separated tails per scoring step ('': none)")
    ap.add_argument("--tail-len", type=int, default=120)
    ap.add_argument("--decode-rows", type=int, default=16)
    ap.add_argument("--decode-len", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--ceiling-n", type=int, default=8192, help="matrix size of the measured matmul ceiling (0: skip)")
    ap.add_argument("--scan-unroll", type=int, default=1, help="layers unrolled per step of the layer scan")
    ap.add_argument("--hlo", default=None, help="write the compiled decode step's HLO text here")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    devices = jax.devices()
    dev = devices[0]
    model_axis = args.model or len(devices)
    mesh = _sh.make_mesh(len(devices) // model_axis, model_axis, devices=devices)
    vendor_flops, vendor_bw, source = _peaks(dev)
    print(f"jax {jax.__version__} on {len(devices)} x {dev.platform} {getattr(dev, 'device_kind', '')} "
          f"({platform.machine()}); mesh {dict(mesh.shape)}; vendor figures: {source}", flush=True)
    out: dict[str, Any] = {"jax": jax.__version__, "device_kind": getattr(dev, "device_kind", ""),
                           "devices": len(devices), "mesh": dict(mesh.shape), "judge": args.judge,
                           "dtype": args.dtype, "scan_unroll": args.scan_unroll, "vendor_peak_flops": vendor_flops,
                           "vendor_hbm_bandwidth": vendor_bw, "vendor_source": source}
    if args.ceiling_n:
        out["matmul_flops_measured"] = matmul_ceiling(args.ceiling_n, args.repeats)
        out["copy_bandwidth_measured"] = copy_bandwidth(4 << 30 if dev.platform == "gpu" else 64 << 20,
                                                        args.repeats)
        print(f"measured here: {args.ceiling_n}^3 bf16 matmul {out['matmul_flops_measured'] / 1e12:.1f} TFLOP/s; "
              f"elementwise copy {out['copy_bandwidth_measured'] / 1e12:.2f} TB/s", flush=True)
    dtype = as_dtype(args.dtype)
    cfg = _aot._config(judge_config(args.judge), args.layers)
    t0 = time.perf_counter()
    graphdef, state, param_bytes = random_state(cfg, dtype, mesh, scan_unroll=args.scan_unroll)
    jax.block_until_ready(state)
    out.update(layers=cfg.num_hidden_layers, params=cfg.num_params(), param_bytes_per_chip=param_bytes)
    print(f"{args.judge}: {cfg.num_hidden_layers} layers, {cfg.num_params() / 1e9:.2f} B parameters, "
          f"{param_bytes / 2**30:.2f} GiB per chip, made in {time.perf_counter() - t0:.1f} s", flush=True)
    peaks = {k: v for k, v in (("vendor", vendor_flops), ("measured", out.get("matmul_flops_measured"))) if v}
    chips = len(devices)
    out["score"] = []
    for tails in (int(t) for t in args.tails.split(",") if t.strip()):
        r = bench_score(cfg, dtype, mesh, graphdef, state, prefix=args.prefix, tails=tails, tail_len=args.tail_len,
                        repeats=args.repeats)
        r["mfu"] = {k: r["flops_useful"] / (chips * p * r["seconds"]) for k, p in peaks.items()}
        out["score"].append(r)
        mfu = ", ".join(f"MFU {v:.1%} of {k} peak" for k, v in r["mfu"].items())
        print(f"score: prefix {r['prefix']} + {tails} x {r['tail_len']} tokens ({r['tokens']} real, "
              f"{r['padded_tokens']} padded): {r['seconds'] * 1e3:.1f} ms/step, {r['tokens_per_second']:,.0f} "
              f"tokens/s; {mfu}; first call (compile) {r['first_call_seconds']:.1f} s", flush=True)
    d = bench_decode(cfg, dtype, mesh, graphdef, state, prefix=args.prefix, rows=args.decode_rows,
                     tail_len=args.tail_len, steps=args.decode_len, hlo=args.hlo)
    moved = param_bytes + d["cache_bytes_per_chip"]
    bws = {k: v for k, v in (("vendor", vendor_bw), ("measured", out.get("copy_bandwidth_measured"))) if v}
    d["hbm_bound_seconds"] = {k: moved / v for k, v in bws.items()}
    d["over_bound"] = {k: d["seconds"] / v for k, v in d["hbm_bound_seconds"].items()}
    out["decode"] = d
    over = ", ".join(f"{v:.2f}x the {k}-bandwidth bound" for k, v in d["over_bound"].items())
    print(f"decode: {d['rows']} rows at context {d['context']}: {d['seconds'] * 1e3:.2f} ms/step "
          f"({moved / 2**30:.2f} GiB of parameters and caches per chip); {over}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
