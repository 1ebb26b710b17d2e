#!/usr/bin/env bash
# The training path on a GPU in one device call (after `. scripts/device_env.sh`), its output under OUT:
#
#   . scripts/device_env.sh && bash scripts/gpu_training_check.sh "$OUT"
#
# 1. torch.compile with gradients on CUDA (test_torch_autograd's cuda cases, mode="reduce-overhead" under
#    CUDA-graph trees included) and the runtime's capture handling (test_device_arrays, fake driver);
# 2. the ResNet-50 training step against Inductor with CUDA graphs and eager (bench/gpu_training_step.py,
#    both OpenPrim variants, host and kernel profiles) -> OUT/gpu_training_step.json;
# 3. the backward ops' and the ops' numerics against float64 (scripts/gpu_check.sh local).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/gpu_training_check.sh OUT}
python -m pytest -q -p no:cacheprovider -k "cuda or reduce_overhead or capture or offset" \
  test/python/test_torch_autograd.py test/python/test_device_arrays.py 2>&1 | tail -25
python bench/gpu_training_step.py --variants openprim-cudagraphs,openprim,inductor-cudagraphs,eager --rounds 3 \
  --iters 5 --host-profile 2 --kernel-profile 2 --out "$out" 2>&1 | grep -v "^ \+[0-9]" | tail -120
bash scripts/gpu_check.sh local /tmp/gpu_training_check nvvm:sm_90 test/python/test_backward_ops.py test/python/test_ops.py \
  2>&1 | tail -6
