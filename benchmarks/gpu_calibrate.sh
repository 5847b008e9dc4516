#!/usr/bin/env bash
# The calibration run for one GPU (H100 or H200), at most 8 minutes: benchmarks/bench_device.py for
# Llama-3-8B shapes (random bfloat16 weights, 32 layers, SummEval-shaped documents), the engine end
# to end beside its bare steps and the decoding loop, each next to the model's bound for the same
# work. What it writes (the environment, the log, the JSON) goes to the folder named by the first
# argument (default gpu-out). Run from the repository root on a machine whose python3 has jax
# with CUDA, flax, tokenizers, safetensors and scipy:
#
#     bash benchmarks/gpu_calibrate.sh OUTDIR [more bench_device.py options, e.g. --tiny on a CPU]
#
# It measures; it asserts nothing. The calibration ratio is measured time over the bound, read
# from the JSON's bench entries (engine_seconds_per_doc / bound_seconds_per_doc and the decode's
# over_bound).
set -uo pipefail
out="${1:-gpu-out}"
py="${PYTHON:-python3}"  # the interpreter with jax
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    "$py" -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
# 16 and 64 tails a document, 8 documents a timed engine call, 16 decode rows of 16 tokens
timeout 450 "$py" benchmarks/bench_device.py --judge llama-3-8b --tails 16,64 --docs 8 --decode-rows 16 \
    --decode-len 16 --repeats 5 --json "$out/bench_device.json" "${@:2}" 2>&1 | tee "$out/bench_device.log"
echo "exit ${PIPESTATUS[0]}" | tee -a "$out/bench_device.log"
