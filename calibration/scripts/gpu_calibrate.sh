#!/usr/bin/env bash
# Calibrate a CUDA GPU and collect the raw artefacts committed under calibration/.
# Usage (repository root, on the GPU machine): OUT=outdir BUDGET=420s bash calibration/scripts/gpu_calibrate.sh
# Runs the calibrate subcommand alone (no other CLI module is imported, so SimPy is not needed).
set -uo pipefail
OUT=${OUT:-out}; BUDGET=${BUDGET:-420s}
mkdir -p "$OUT/traces"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit --format=csv | tee "$OUT/nvidia-smi.txt"
python3 - calibrate --device cuda --budget "$BUDGET" -o "$OUT/profile-cuda.json" --trace-dir "$OUT/traces" <<'PY' 2>&1 | tee "$OUT/log.txt"
import argparse, sys
from perfmodel.cli import calibrate
p = argparse.ArgumentParser(prog="perfmodel")
calibrate.register(p.add_subparsers())
a = p.parse_args(sys.argv[1:])
sys.exit(a.func(a))
PY
python3 tests/fixtures/calibration/make_trace_fixture.py "$OUT/traces" 2>&1 | tail -5
gzip -f "$OUT"/traces/trace-*.json 2>/dev/null
ls -la "$OUT" "$OUT/traces"
