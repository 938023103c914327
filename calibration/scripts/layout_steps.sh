#!/usr/bin/env bash
# Measure training steps whose memory format (NCHW vs channels_last) and CIFAR-scale shapes the
# default calibration does not cover; the profile lands in $OUT/steps-cuda.json.
# Usage (repository root, on the GPU machine):  OUT=outdir bash calibration/scripts/layout_steps.sh
set -uo pipefail
OUT=${OUT:-out}; BUDGET=${BUDGET:-400s}
STEPS=${STEPS:-"resnet50:256:bf16 resnet50:256:bf16:memory_format=nchw resnet50:128:tf32 resnet50:128:tf32:memory_format=nchw resnet50:64:fp32:memory_format=nchw vgg19_bn_cifar:128:fp32 vgg19_bn_cifar:64:fp32 vgg19_bn_cifar:128:tf32"}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
mkdir -p "$OUT/traces"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,power.limit --format=csv | tee "$OUT/nvidia-smi.txt"
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'torchvision', torchvision.__version__)" | tee -a "$OUT/nvidia-smi.txt"
step_args=(); for s in $STEPS; do step_args+=(--step "$s"); done
python3 - calibrate --device cuda --only steps --budget "$BUDGET" -o "$OUT/steps-cuda.json" --trace-dir "$OUT/traces" "${step_args[@]}" <<'PY' 2>&1 | tee "$OUT/log.txt"
import argparse, sys
from perfmodel.cli import calibrate
p = argparse.ArgumentParser(prog="perfmodel")
calibrate.register(p.add_subparsers())
a = p.parse_args(sys.argv[1:])
sys.exit(a.func(a))
PY
gzip -f "$OUT"/traces/trace-*.json 2>/dev/null
tar -C "$OUT" -cf "$OUT/traces.tar" traces && rm -rf "$OUT/traces"
ls -la "$OUT"
