#!/usr/bin/env bash
# The whole GPU check, for a GPU machine that has no MLIR (numpy + cuda-bindings, torch for the benchmark).
#
#   scripts/gpu_check.sh prepare DIR [TARGET]   # on any machine with OpenPrim: compile every test case
#                                               # (ops, solvers, networks) and the benchmark into DIR
#   scripts/gpu_check.sh run DIR                # on the GPU machine: run them, write DIR/outputs.npz,
#                                               # and time the benchmark against PyTorch
#   scripts/gpu_check.sh verify DIR [TARGET]    # back here: check the outputs against float64 numpy
#   scripts/gpu_check.sh local DIR [TARGET] [TEST...]   # a GPU machine with MLIR (scripts/device_env.sh):
#                                               # the three steps there for the given test files (default
#                                               # all), each pytest on every core, no benchmark
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?usage: scripts/gpu_check.sh prepare|run|verify|local DIR [TARGET]}
dir=${2:?usage: scripts/gpu_check.sh prepare|run|verify|local DIR [TARGET]}
target=${3:-nvvm:sm_90}
tests=(test/python/test_ops.py test/python/test_solvers.py test/python/test_networks.py test/python/test_integer_ops.py
       test/python/test_backward_ops.py)
case "$mode" in
  prepare)
    rm -rf "$dir/cases" "$dir/bench"
    OPENPRIM_TEST_TARGET=$target OPENPRIM_GPU_RECORD=$dir/cases python -m pytest -q -k "not engine and not aot" "${tests[@]}"
    python bench/gpu_kernels.py build "$dir/bench" --target "$target" ;;
  run)
    python scripts/gpu_replay.py "$dir/cases" "$dir/outputs.npz"
    python bench/gpu_kernels.py run "$dir/bench" ;;
  verify)
    OPENPRIM_TEST_TARGET=$target OPENPRIM_GPU_REPLAY=$dir/outputs.npz python -m pytest -q -k "not engine and not aot" "${tests[@]}" ;;
  local)
    [ $# -gt 3 ] && tests=("${@:4}")
    rm -rf "$dir/cases"
    # (tests that run on the CPU fail here when the machine lacks the CPU toolchain: CI runs them)
    OPENPRIM_TEST_TARGET=$target OPENPRIM_GPU_RECORD=$dir/cases python -m pytest -q -n auto -p no:cacheprovider \
      -k "not engine and not aot" "${tests[@]}" | tail -3 || true
    python scripts/gpu_replay.py "$dir/cases" "$dir/outputs.npz"
    OPENPRIM_TEST_TARGET=$target OPENPRIM_GPU_REPLAY=$dir/outputs.npz python -m pytest -q -n auto -p no:cacheprovider \
      -k "not engine and not aot" "${tests[@]}" ;;
  *) echo "unknown mode '$mode': prepare, run, verify or local" >&2; exit 2 ;;
esac
