"""openprim-opt: mlir-opt for the prim dialect and OpenPrim's passes.

    openprim-opt model.mlir -p 'prim-fuse,prim-select'      # or read stdin with '-'
    openprim-opt model.mlir -p prim-pipeline --print-ir-after-all

Prints the resulting module (generic form where an op has no custom syntax). The out-of-line weights of
model.mlir (`openprim emit`) are read from model.weights.npz when it is there. Errors are one
`file:line:col: error: ...` line and exit status 1.
"""
from __future__ import annotations

import argparse
import sys

from openprim import dialect, passes
from openprim.base.errors import OpenPrimError, one_line
from openprim.base.files import atomic_file
from openprim.tuning.tuner import Tuner


def write_text(path: str, text: str) -> None:
    """Write atomically (a temporary file in the same directory, then a rename); OpenPrimError if it cannot."""
    with atomic_file(path, "w", "-o") as f:
        f.write(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="openprim-opt", description=__doc__.splitlines()[0])
    ap.add_argument("input", nargs="?", default="-", help="a .mlir file, or - for stdin")
    ap.add_argument("-p", "--pass-pipeline", default="", help="comma-separated passes, e.g. 'prim-fuse,prim-select'")
    ap.add_argument("-o", "--output", default="-")
    ap.add_argument("--print-ir-after-all", action="store_true")
    ap.add_argument("--elide-large-elements", type=int, default=None, metavar="N",
                    help="print dense constants with more than N elements as __elided__")
    ap.add_argument("--verify-only", action="store_true", help="only parse and verify")
    args = ap.parse_args(argv)
    try:
        name = "<stdin>" if args.input == "-" else args.input
        text = dialect.read_text(args.input)
        ctx = dialect.new_context()
        module = dialect.parse(text, name, ctx)
        if args.input != "-":
            dialect.load_weights(module, args.input)
        with ctx:
            if args.verify_only:
                dialect.verify(module)
            else:
                passes.run(module, args.pass_pipeline, args.print_ir_after_all, Tuner())
            out = module.operation.get_asm(large_elements_limit=args.elide_large_elements)
        if args.output == "-":
            sys.stdout.write(out)
        else:
            write_text(args.output, out)
        return 0
    except OpenPrimError as e:
        print(one_line(e, "openprim-opt"), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
