#!/usr/bin/env bash
# GPU readiness check on one CUDA GPU, in under 5 minutes: the CUDA tests; one epoch of each
# architecture at its reference size (the GRU through a 1-rank torchrun, NCCL); nmt bench on
# CUDA for both (training throughput, and 2,000 test sentences greedy and beam 5).
# Targets (issue 20): an epoch of fra-eng under 30 s; 2,000 sentences with beam 5 under 2 s.
# Usage (from the repository root, project installed): bash benchmarks/gpu_check.sh [CORPUS]
set -euo pipefail
corpus=${1:-data/fra-eng/fra.txt}
out=${OUT:-.}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA'; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'bf16', torch.cuda.is_bf16_supported())"
python -m pytest -q tests/test_cuda.py
epoch() {  # the seconds an epoch took, from the run's summary
  python -c "import json,sys; s=json.load(open(sys.argv[1])); print(sys.argv[2], 'epoch:', s['train_seconds'], 's,', s['train_sentences_per_s'], 'sentences/s at', s['precision'], 'on', s['device'])" "$1/run.json" "$2"
}
torchrun --standalone --nproc-per-node 1 -m nmt -q train --corpus "$corpus" --device cuda --epochs 1 \
  --run-dir "$out/gpu-gru" --valid-bleu-size 500
epoch "$out/gpu-gru" GRU
nmt -q train --corpus "$corpus" --device cuda --epochs 1 --run-dir "$out/gpu-transformer" \
  --arch transformer --layers 3 --tie-embeddings --valid-bleu-size 500
epoch "$out/gpu-transformer" Transformer
nmt bench --corpus "$corpus" --device cuda --checkpoint "$out/gpu-gru" --steps 100 --warmup 10 \
  --json-out "$out/bench-cuda.json"
printf 'arch: transformer\nlayers: 3\ntie_embeddings: true\n' > "$out/transformer-ref.yaml"
nmt bench --corpus "$corpus" --device cuda --checkpoint "$out/gpu-transformer" --steps 100 --warmup 10 \
  --config "$out/transformer-ref.yaml" --json-out "$out/bench-cuda-transformer.json"
