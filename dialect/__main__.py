"""`python -m openprim.dialect [--check]`: write (or check) prim.irdl.mlir from base/ops.py."""
import sys

from . import IRDL_PATH, generate_irdl

if __name__ == "__main__":
    text = generate_irdl()
    if "--check" in sys.argv:
        sys.exit(0 if IRDL_PATH.read_text() == text else f"{IRDL_PATH} is stale: run python -m openprim.dialect")
    IRDL_PATH.write_text(text)
