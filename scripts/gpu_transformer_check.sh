# The transformer checks of issue 15 on the GPU machine, in stages that each fit one device call:
#
#     . scripts/device_env.sh >/dev/null && bash scripts/gpu_transformer_check.sh tests [FILE...]  # numerics
#     . scripts/device_env.sh >/dev/null && bash scripts/gpu_transformer_check.sh models [MODEL,...]
#     . scripts/device_env.sh >/dev/null && bash scripts/gpu_transformer_check.sh gemms    # their GEMMs per config
#
# tests:  the test files (default: test_attention.py, test_vit_layout.py and test_norms.py) recorded for
#         nvvm:sm_90, run by scripts/gpu_replay.py, and checked against float64 numpy (both attention layouts
#         through the flash kernel, the warp-per-row norms); logs in $OUT.
# models: bench/gpu_models.py (default: vit_b_16 and bert_encoder_layer) against PyTorch eager,
#         torch.compile with freezing, and with freezing and CUDA graphs (bench/timing.torch_peers).
# gemms:  bench/gpu_kernels.py's transformer GEMMs with each wgmma configuration forced (CASE_wgmmaI) and
#         with the heuristic's choice (CASE), against torch.matmul; $OUT/gpu_kernels.json.
set -u
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
case "${1:-}" in
  tests)
    shift
    files=("${@:-test/python/test_attention.py test/python/test_vit_layout.py test/python/test_norms.py}")
    rec=/tmp/transformer-rec && rm -rf "$rec"
    export OPENPRIM_CACHE=0 OPENPRIM_TEST_TARGET=nvvm:sm_90
    # shellcheck disable=SC2068 - the default list splits into its files
    OPENPRIM_GPU_RECORD="$rec" python3 -m pytest -q ${files[@]} > "$OUT/record.log" 2>&1
    python3 scripts/gpu_replay.py "$rec" "$OUT/outputs.npz" > "$OUT/replay.log" 2>&1
    # shellcheck disable=SC2068
    OPENPRIM_GPU_REPLAY="$OUT/outputs.npz" python3 -m pytest -q ${files[@]} 2>&1 | tee "$OUT/check.log" | tail -5 ;;
  models)
    python3 bench/gpu_models.py --out "$OUT" --models "${2:-vit_b_16,bert_encoder_layer}" --budget-s 420 ;;
  gemms)
    python3 bench/gpu_kernels.py build /tmp/transformer-gemms --only tgemm \
        --configs wgmma:0 wgmma:1 wgmma:2 wgmma:7 wgmma:8 wgmma:9 > "$OUT/build.log" 2>&1
    python3 bench/gpu_kernels.py run /tmp/transformer-gemms | tail -50 ;;
  *)
    echo "usage: bash scripts/gpu_transformer_check.sh tests|models|gemms" >&2
    exit 2 ;;
esac
