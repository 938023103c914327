#!/usr/bin/env bash
# Calibrate a CUDA GPU and collect the raw artefacts committed under calibration/.
# Usage (repository root, on the GPU machine):
#   OUT=outdir BUDGET=420s bash calibration/scripts/gpu_calibrate.sh
# Runs the calibrate subcommand alone (no other CLI module is imported, so SimPy is not needed),
# then regenerates the Kineto trace fixture of tests/fixtures/calibration.
set -uo pipefail
OUT=${OUT:-out}; BUDGET=${BUDGET:-420s}
STEPS=${STEPS:-"resnet50:128:bf16 resnet50:32:bf16 resnet50:256:bf16 resnet50:64:tf32 gpt2:8:bf16:seq_len=1024 gpt2:8:bf16:seq_len=1024,vocab=50304 gpt2:16:bf16:seq_len=512"}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p "$OUT/traces"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit --format=csv | tee "$OUT/nvidia-smi.txt"
step_args=(); for s in $STEPS; do step_args+=(--step "$s"); done
python3 - calibrate --device cuda --budget "$BUDGET" -o "$OUT/profile-cuda.json" --trace-dir "$OUT/traces" "${step_args[@]}" <<'PY' 2>&1 | tee "$OUT/log.txt"
import argparse, sys
from perfmodel.cli import calibrate
p = argparse.ArgumentParser(prog="perfmodel")
calibrate.register(p.add_subparsers())
a = p.parse_args(sys.argv[1:])
sys.exit(a.func(a))
PY
python3 tests/fixtures/calibration/make_trace_fixture.py "$OUT" 2>&1 | tail -5
gzip -f "$OUT"/traces/trace-*.json 2>/dev/null
tar -C "$OUT" -cf "$OUT/traces.tar" traces && rm -rf "$OUT/traces"
ls -la "$OUT"
