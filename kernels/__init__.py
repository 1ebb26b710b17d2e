"""Code generation: kernel functions as MLIR text (irtext.py builds it; semantics.py is every op's reference
linalg; schedules.py tiles it on the CPU; cpu/, gpu/, nvidia/, amd/ hold the hand-written kernels, registry.py
says which one an op gets)."""
