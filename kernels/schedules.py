"""Transform-dialect schedules: how a kernel's linalg ops become tiled, vectorized, threaded loops.

A kernel's ops carry roles (set by irtext.KernelText): `prim.role = "epilogue" | "acc"` for the
main loop nest of a solver (its last op and the accumulator fill; the convolution or matmul sits in
between), and `prim.aux = i` for every other structured op (padding, im2col, transposes, elementwise).

  main nest  1. scf.forall over output rows (or columns) for the threads, producers fused in
             2. register tile (one row, WT columns, FT filters / MT x NT), producers fused again
             3. reduction loops (kh, kw, CT input channels / KT), conv2d decomposed to conv1d
  aux ops    tiled to one row of the innermost dimension; in a kernel without a solver, the final op
             is the "epilogue": an scf.forall splits its first evenly divisible parallel dim
  all        vectorized; the accumulator hoisted out of the reduction loops; contractions lowered
             to outer products and then to FMAs, in separate pattern sets (one big set is slow)
"""
from __future__ import annotations

import itertools
import math

from openprim.dialect import contract

ANY = "!transform.any_op"
# A kernel without a solver whose final op iterates over fewer points than this runs on one thread: a
# fork/join of the OpenMP threads costs microseconds when the other core is idle and ~100 us when it is
# busy (measured on the shared 2-core machine: a 22K-element transpose, 6 us on one thread, 115 us on two).
SERIAL_POINTS = 1 << 16


PEELED_LANES = 16


def _tiles(domain: list[int]) -> list[int]:
    """Vector-friendly tile of an aux op: 1 on outer dims, the innermost dim whole up to 64 lanes, else its
    largest divisor up to 64; where that is under 8 (a prime count of tokens, 197 or 199), PEELED_LANES
    (`_peel_last`: full vector tiles and one static partial tile, not one lane at a time)."""
    inner = domain[-1] if domain else 1
    t = inner if inner <= 64 else max(d for d in range(1, 65) if inner % d == 0)
    return [1] * (len(domain) - 1) + [t if t == inner or t >= 8 else PEELED_LANES]


def _peel_last(sizes: list[int], domain: list[int], loops: str) -> str:
    """The innermost tile loop (the last of `loops`, a handle list) peeled where its tile does not divide the
    dim: the main loop's tiles are whole (vectorized at full width), the remainder one static tile."""
    if domain[-1] % sizes[-1] == 0:
        return ""
    n = sum(1 for s in sizes if s)
    return f"""
  %peel_{loops} = transform.cast %{loops}#{n - 1} : {ANY} to !transform.op<"scf.for">
  %peel_{loops}_main, %peel_{loops}_rest = transform.loop.peel %peel_{loops} : (!transform.op<"scf.for">) -> ({ANY}, {ANY})"""


def aux_tiling(domains: list[list[int]]) -> str:
    lines = []
    for i, dom in enumerate(domains):
        if not dom:
            continue
        sizes = _tiles(dom)
        nloops = sum(1 for s in sizes if s)
        lines += [f'  %aux{i} = transform.structured.match attributes{{{contract.aux_text(i)}}} in %root : ({ANY}) -> {ANY}',
                  f'  %aux{i}_t, %aux{i}_l:{nloops} = transform.structured.tile_using_for %aux{i} tile_sizes {sizes}'
                  f' : ({ANY}) -> ({ANY}{f", {ANY}" * nloops})' + _peel_last(sizes, dom, f"aux{i}_l")]
    return "\n".join(lines)


def _fuse_main(par: list[int], reg: list[int]) -> str:
    nreg = sum(1 for s in reg if s)
    return f"""
  %epi = transform.structured.match attributes{{{contract.role_text('epilogue')}}} in %root : ({ANY}) -> {ANY}
  %e1, %forall = transform.structured.fuse %epi tile_sizes {par} {{apply_cleanup, use_forall}} : ({ANY}) -> ({ANY}, {ANY})
  %e2, %regl:{nreg} = transform.structured.fuse %e1 tile_sizes {reg} {{apply_cleanup}} : ({ANY}) -> ({ANY}{f", {ANY}" * nreg})
  %f0 = transform.structured.match ops{{["func.func"]}} in %root : ({ANY}) -> {ANY}
  transform.apply_patterns to %f0 {{
    transform.apply_patterns.canonicalization
  }} : {ANY}
  transform.apply_cse to %f0 : {ANY}"""


def _vectorize() -> str:
    return f"""
  %f = transform.structured.match ops{{["func.func"]}} in %root : ({ANY}) -> {ANY}
  transform.apply_patterns to %f {{
    transform.apply_patterns.canonicalization
  }} : {ANY}
  %fv = transform.structured.vectorize_children_and_apply_patterns %f : ({ANY}) -> {ANY}
  transform.apply_patterns to %fv {{
    transform.apply_patterns.canonicalization
    transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
  }} : {ANY}
  transform.apply_cse to %fv : {ANY}
  %loops = transform.structured.match ops{{["scf.for"]}} in %fv : ({ANY}) -> {ANY}
  transform.foreach %loops : {ANY} {{
  ^bb0(%lp: {ANY}):
    transform.loop.hoist_loop_invariant_subsets %lp : {ANY}
  }}
  transform.apply_patterns to %fv {{
    transform.apply_patterns.vector.cast_away_vector_leading_one_dim
    transform.apply_patterns.canonicalization
  }} : {ANY}
  transform.apply_patterns to %fv {{
    transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
    transform.apply_patterns.vector.transfer_permutation_patterns
  }} : {ANY}
  transform.apply_patterns to %fv {{
    transform.apply_patterns.vector.lower_outerproduct
  }} : {ANY}
  transform.apply_patterns to %fv {{
    transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerreduction"
  }} : {ANY}
  transform.apply_patterns to %fv {{
    transform.apply_patterns.vector.lower_broadcast
    transform.apply_patterns.vector.lower_transpose
    transform.apply_patterns.vector.lower_shape_cast
  }} : {ANY}
  transform.apply_patterns to %fv {{
    transform.apply_patterns.canonicalization
  }} : {ANY}
  transform.apply_cse to %fv : {ANY}"""


def conv_direct(par_oh: int, par_f: int, wt: int, ft: int, ct: int) -> str:
    return _fuse_main([0, par_oh, 0, par_f], [1, 1, wt, ft]) + f"""
  %conv = transform.structured.match ops{{["linalg.conv_2d_nhwc_hwcf"]}} in %root : ({ANY}) -> {ANY}
  %c2, %rl:3 = transform.structured.tile_using_for %conv tile_sizes [0, 0, 0, 0, 1, 1, {ct}] : ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})
  %c1d = transform.structured.decompose %c2 : ({ANY}) -> {ANY}"""


def conv_depthwise(par: tuple[int, int], wt: int, ct: int) -> str:
    return _fuse_main([0, par[0], 0, par[1]], [1, 1, wt, ct]) + f"""
  %conv = transform.structured.match ops{{["linalg.depthwise_conv_2d_nhwc_hwc"]}} in %root : ({ANY}) -> {ANY}
  %c2, %rl:2 = transform.structured.tile_using_for %conv tile_sizes [0, 0, 0, 0, 1, 1] : ({ANY}) -> ({ANY}, {ANY}, {ANY})
  %c1d = transform.structured.decompose %c2 : ({ANY}) -> {ANY}"""


def gemm(par: tuple[int, int], mt: int, nt: int, kt: int) -> str:
    return _fuse_main(list(par), [mt, nt]) + f"""
  %mm = transform.structured.match ops{{["linalg.matmul"]}} in %root : ({ANY}) -> {ANY}
  %m2, %rl = transform.structured.tile_using_for %mm tile_sizes [0, 0, {kt}] : ({ANY}) -> ({ANY}, {ANY})"""


def grouped_gemm(par: list[int], mt: int, nt: int, kt: int, im2col_channels: int | None) -> str:
    """The batched GEMM C[g, m, n] = sum_{t, c} A[m, t, g, c] B[t, c, g, n] (solvers.ConvGroupedGemm):
    threads over M (or the groups), register tiles of one group x MT rows x NT columns, reduction
    loops over the filter taps t (one at a time) and KT channels c. Inside those loops the unit dims of
    a step (its group and tap) are then folded away, so what gets vectorized is a plain [MT, KT] x
    [KT, NT] matmul: outer-product FMAs, the accumulator carried in registers. (The epilogue keeps its
    unit group dim: folding it there writes the tile through a wrong transfer map.) The im2col copy,
    when there is one (im2col_channels = C), is tiled to one filter tap of one pixel and its unit dims
    folded too, so that its strided window read becomes a plain vector copy of the C channels."""
    im2col = "" if im2col_channels is None else f"""
  %col = transform.structured.match attributes{{{contract.role_text('im2col')}}} in %root : ({ANY}) -> {ANY}
  %col1, %cl:6 = transform.structured.tile_using_for %col tile_sizes {_tiles([1] * 5 + [im2col_channels])} : ({ANY}) -> ({ANY}{f", {ANY}" * 6})
  transform.apply_patterns to %cl#0 {{
    transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices
  }} : {ANY}"""
    return im2col + _fuse_main(par, [mt, 1, nt]) + f"""
  %mm = transform.structured.match attributes{{{contract.role_text('contraction')}}} in %root : ({ANY}) -> {ANY}
  %m2, %rl:2 = transform.structured.tile_using_for %mm tile_sizes [0, 0, 0, 1, {kt}] : ({ANY}) -> ({ANY}, {ANY}, {ANY})
  transform.apply_patterns to %rl#0 {{
    transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices
  }} : {ANY}"""


def winograd(threads_batch: int, mt: int, nt: int, kt: int, epilogue_inner: list[int]) -> str:
    """Winograd's (m+2)^2 GEMMs: the batch split between the threads (the accumulator fill fused in), each
    GEMM in MT x NT register tiles with a K loop of KT; the transforms are aux ops, the epilogue tiled alone
    (no producer fusion: it would recompute the transforms for every tile). Unit dims are folded away
    after tiling, so the transforms' overlapping-tile reads (x[i*m + u]) become plain vector loads."""
    n = sum(1 for t in epilogue_inner if t)
    return f"""
  %bmm = transform.structured.match ops{{["linalg.batch_matmul"]}} in %root : ({ANY}) -> {ANY}
  %b1, %forall = transform.structured.fuse %bmm tile_sizes [{threads_batch}, 0, 0] {{apply_cleanup, use_forall}} : ({ANY}) -> ({ANY}, {ANY})
  %b2, %regl:3 = transform.structured.fuse %b1 tile_sizes [1, {mt}, {nt}] {{apply_cleanup}} : ({ANY}) -> ({ANY}, {ANY}, {ANY}, {ANY})
  %b3, %rl = transform.structured.tile_using_for %b2 tile_sizes [0, 0, 0, {kt}] : ({ANY}) -> ({ANY}, {ANY})
  %epi = transform.structured.match attributes{{{contract.role_text('epilogue')}}} in %root : ({ANY}) -> {ANY}
  %e1, %el:{n} = transform.structured.tile_using_for %epi tile_sizes {epilogue_inner} : ({ANY}) -> ({ANY}{f", {ANY}" * n})
  %fw = transform.structured.match ops{{["func.func"]}} in %root : ({ANY}) -> {ANY}
  transform.apply_patterns to %fw {{
    transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices
  }} : {ANY}"""


def parallel_epilogue(par: list[int], inner: list[int], share: list[int]) -> str:
    """Threads over one dim of a kernel's final op (its producers fused in), then a vector-sized tile of a
    thread's `share` of the domain."""
    n = sum(1 for t in inner if t)
    return f"""
  %epi = transform.structured.match attributes{{{contract.role_text('epilogue')}}} in %root : ({ANY}) -> {ANY}
  %e1, %forall = transform.structured.fuse %epi tile_sizes {par} {{apply_cleanup, use_forall}} : ({ANY}) -> ({ANY}, {ANY})
  %e2, %inner:{n} = transform.structured.tile_using_for %e1 tile_sizes {inner} : ({ANY}) -> ({ANY}{f", {ANY}" * n})""" \
        + _peel_last(inner, share, "inner")


def threaded_final_op(kt, threads: int) -> tuple[str, str] | None:
    """For a kernel without a solver schedule: (the tag rewrite, the schedule) that splits its final
    generic's first evenly divisible parallel dim between the threads, or None (also for small kernels:
    SERIAL_POINTS)."""
    if kt.result not in kt.generics:
        return None
    index, domain, iterators = kt.generics[kt.result]
    if math.prod(domain) < SERIAL_POINTS:
        return None
    if len(domain) < 2:
        return None
    dims = [d for d, (n, it) in enumerate(zip(domain, iterators)) if it == "parallel" and n >= threads]
    outer = [d for d in dims if d < len(domain) - 1]
    # A thread's share is best a contiguous block of outer rows: an outer dim that divides evenly; else one
    # long enough that splitting it unevenly costs little (the last thread's tile is smaller by < 1/8; the
    # innermost dim stays whole for the vectors), so that an odd row count (197 tokens, a flat optimizer
    # buffer of 45,663 rows) still uses every thread; else any dim that divides; else any outer one.
    dim = next(itertools.chain((d for d in outer if domain[d] % threads == 0),
                               (d for d in outer if domain[d] >= 8 * threads),
                               (d for d in dims if domain[d] % threads == 0), outer), None)
    if dim is None:
        return None
    par = [0] * len(domain)
    par[dim] = -(-domain[dim] // threads)
    share = [par[d] or n for d, n in enumerate(domain)]
    kt.aux[index] = []  # tiled by the epilogue schedule, not as an aux op
    return contract.aux_text(index) + "}", parallel_epilogue(par, _tiles(share), share)


def script(main: str | None, aux_domains: list[list[int]]) -> str:
    """The whole named sequence for one kernel: aux tiling, the solver's main nest, vectorization."""
    return "\n".join(["transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {",
                      aux_tiling(aux_domains), main or "", _vectorize(), "  transform.yield", "}"])
