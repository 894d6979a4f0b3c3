#!/usr/bin/env bash
# The GPU figures of docs/benchmarks.md ("Litho batches and GPU figures"), in one go,
# on a machine with one CUDA GPU and torch built for it:
#
#     bash benchmarks/gpu_figures.sh [OUT_DIR]        (default: ./gpu-figures)
#
# Each benchmark writes its own report into OUT_DIR; a step that fails or runs past
# its time limit is named in OUT_DIR/summary.txt and the others still run.
# PYTHON picks the interpreter (default: python3); the litho engine needs torch,
# numpy, pillow, klayout, rfc8785 and jsonschema (pip install -e . brings them).
set -u
cd "$(dirname "$0")/.."
out=${1:-gpu-figures}
py=${PYTHON:-python3}
mkdir -p "$out"
: >"$out/summary.txt"

step() {  # step NAME SECONDS COMMAND...: run it, keep its output, note how it ended
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
}

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
} >"$out/device.txt" 2>&1
# forward model: clips per second, batched, and CUDA against the float64 reference (printed pixels off)
step forward 120 "$py" -u benchmarks/litho_forward.py --device cuda --batch 64 --repeat 5
# batched ILT beside one clip at a time, and the batch size the memory budget picks on the device
step ilt_batch 150 "$py" -u benchmarks/litho_ilt_batch.py --device cuda --batch 16 --iterations 20 --repeat 2
# the ten ICCAD 2013 cases, ILT seconds per clip beside the published (GPU) rows
step iccad13 240 "$py" -u benchmarks/iccad13.py --device cuda --json "$out/iccad13.json"
# streaming and whole-canvas evaluation of tiled layouts, tiles per second
step tiled 300 "$py" -u benchmarks/litho_tiled.py --device cuda --threads 16 --sizes 4096 8192
# G2: a cancelled optimize frees its device memory within 2 s (the test prints how long it took)
step g2 180 "$py" -m pytest -q -s -p no:cacheprovider tests/gpu
cat "$out/summary.txt"
