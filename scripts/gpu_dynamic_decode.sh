#!/usr/bin/env bash
# Issue 32's figures on a GPU machine (after `. scripts/device_env.sh`), each benchmark under its own time
# limit so that one that runs long leaves the others' figures:
#
#   scripts/gpu_dynamic_decode.sh OUT range     # a ResNet-50 batch range (1, 8, 32, 64 in one artifact of
#                                               # 1..64) and a BERT-base sequence range (32..512, 4 buckets
#                                               # an octave), each against the artifact specialized to that size
#                                               # (`resnet` or `bert`: one of them)
#   scripts/gpu_dynamic_decode.sh OUT decode [BATCH...]   # GPT-2 small greedy decoding from a 512-token
#                                               # context (default batches 1 and 16) against eager and
#                                               # torch.compile over a static cache, with the step's profile
#
# Each writes OUT/<name>.json and OUT/<name>.log (bench/dynamic_batch.py, bench/decode.py).
set -uo pipefail
cd "$(dirname "$0")/../bench"
out=${1:?usage: scripts/gpu_dynamic_decode.sh OUT range|resnet|bert|decode [BATCH...]}
what=${2:?usage: scripts/gpu_dynamic_decode.sh OUT range|resnet|bert|decode [BATCH...]}
run() {   # NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" "$@" --out "$out/$name.json" > "$out/$name.log" 2>&1
    echo "$name: exit $?"
}
resnet() {
    run dynamic_batch_resnet 220 python dynamic_batch.py --device cuda --model resnet --batches 1,8,32,64 --max 64
}
bert() {
    run dynamic_sequence_bert 180 python dynamic_batch.py --device cuda --model bert --sequences 32,100,128,300,512 \
        --max-seq 512 --per-octave 4
}
case "$what" in
  range) resnet; bert ;;
  resnet) resnet ;;
  bert) bert ;;
  decode)
    batches=("${@:3}")
    [ ${#batches[@]} -eq 0 ] && batches=(1 16)
    for b in "${batches[@]}"; do
        run "decode_gpt2_b$b" 200 python decode.py --device cuda --batch "$b" --context 512 --new 32 --no-ort --profile
    done ;;
  *) echo "unknown: $what (range, resnet, bert or decode)" >&2; exit 2 ;;
esac
