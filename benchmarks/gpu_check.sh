#!/usr/bin/env bash
# GPU readiness check on one CUDA GPU: the CUDA tests, then nmt bench on CUDA for both architectures.
# Usage (from the repository root, project installed): bash benchmarks/gpu_check.sh [CORPUS]
set -euo pipefail
corpus=${1:-data/fra-eng/fra.txt}
out=${OUT:-.}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
python -m pytest -q tests/test_cuda.py
# a short CUDA training run gives bench a trained model for the translation phases
nmt -q train --corpus "$corpus" --device cuda --max-minutes 2 --run-dir "$out/gpu-run" --valid-bleu-size 500
nmt bench --corpus "$corpus" --device cuda --checkpoint "$out/gpu-run" --steps 100 --warmup 10 \
  --json-out "$out/bench-cuda.json"
# the Transformer at its reference size (3 + 3 layers, d_model 256, 4 heads, feed-forward 1,024)
nmt -q train --corpus "$corpus" --device cuda --max-minutes 2 --run-dir "$out/gpu-transformer" \
  --arch transformer --layers 3 --valid-bleu-size 500
nmt bench --corpus "$corpus" --device cuda --checkpoint "$out/gpu-transformer" --steps 100 --warmup 10 \
  --arch transformer --layers 3 --json-out "$out/bench-cuda-transformer.json"
