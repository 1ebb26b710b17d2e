"""Flash attention on sm_90's warpgroup MMA (wgmma + TMA + mbarriers): prim.attention in one kernel.

The algorithm is kernels/nvidia/flash_attention.py's (online softmax, FlashAttention-2: a running row
maximum m, row sum l and unnormalized output O per query row, the S x S scores never in memory); what
changes is who multiplies and how the tiles move, as in FlashAttention-3 (warp specialization, register
reallocation, softmax overlapped with a product, P in registers; not its ping-pong between warpgroups):

    a block takes (query tile of 128 rows, head) items in turn (persistent, one per multiprocessor;
    causal: a block per pair of items, below); threads:
      producer (one thread of a third warpgroup, which gives its registers up to the consumers): per item,
                Q once its slot is empty, then K[t] and V[t] into two slots each as they empty (TMA, D/64
                boxes of 128 rows x 64 columns, 128-byte swizzle; full/empty mbarriers per slot, phases
                counted over every tile the block has loaded)
      2 consumer warpgroups of 128 threads: warpgroup g owns rows q0 + 64 g .. + 63 of the item
    per item, for each key tile t of 128 keys (causal: only tiles that start at or before the last row)
        S[64 x 128] = Q K[t]^T    wgmma m64n128k16, D/16 of them: A = Q and B = K both from shared
                                  memory, K-major (K's rows are B's columns); issued before P[t-1] V[t-1]
        s: -inf past Sk and (causal) above the diagonal, on the item's last tile only
        m' = max(m, rowmax s), p = exp2(s scale log2(e) - m' scale log2(e)) (one FMA each),
        alpha = exp2((m - m') scale log2(e)), l = alpha l + sum p   (while P[t-1] V[t-1] runs), O = alpha O
        P -> f16/bf16 pairs packed in the thread's registers: wgmma's A fragments as they lie
        O[64 x D] += P V[t]       wgmma m64nDk16, 8 of them: A = P from registers (inline PTX: NVVM's op
                                  takes descriptors only), B = V from shared memory (N-major: transposed)
    out = O / l (0 for a row without an unmasked key)

A head's query tiles are consecutive items, so the blocks running at once share K and V in L2. Causal
items go in pairs (query tiles i and QTILES - 1 - i, the longer first), which all take QTILES + 1 key tiles.

Accumulator layout (m64nNk16, f32): thread 32 w + 4 g + q of a warpgroup holds, in register 4 j + 2 h + c,
row 16 w + g + 8 h and column 8 j + 2 q + c: a warp's 16 rows, like mma.sync's m16n8
tiles side by side. A row's values are spread over the 4 threads of a quad: row statistics take two
xor-shuffles. The A fragment of k step kk (m16n8k16's, per warp) is registers 8 kk .. 8 kk + 7 of S
packed in pairs, so P never leaves the thread.

Registers: 384 threads get 168 each at launch, fewer than S (64), O (up to 64) and two P (32 each) need;
setmaxnreg moves the producer warpgroup to 40 and the consumers to 232 (with a single producer warp and no
reallocation the consumers spilled). ptxas serializes every wgmma of the kernel (warning C7513) when an
instruction other than a wgmma writes one of its registers inside its stage; LLVM, which sees the inline
wgmma's reads as done at issue, did so three ways, each closed here: it reused P[t-1]'s registers for
P[t] (hold() keeps them live to the wait), it copied constant zeros into O's tied registers after
wgmma.fence (O starts from opaque movs), and it rewrote key-tile loops of at most one trip into straight
code with copies inside the stages (the trip count is opaque). test_attention's ptxas test guards this.

Shared memory descriptors (the 64-bit operand of wgmma) are built here: start address / 16 in bits
0-13, leading byte offset / 16 in 16-29 (between 64-column slabs of an N-major B), stride byte offset /
16 in 32-45 (1024: eight 128-byte rows, the swizzle's period), 1 in 62-63 (128-byte swizzle). A k step of
16 moves a K-major operand 32 bytes along its rows (within one swizzle atom), and an N-major one 16 rows.
Every tile is 1024-byte aligned.

Applies on sm_90 to f16/bf16, head dims 64 and 128, no additive mask (those keep the mma.sync kernel).
"""
from __future__ import annotations

import math

from openprim.kernels.gpu.gemm import WG
from openprim.kernels.gpu import attention
from openprim.kernels.gpu.attention import LOG2E, FlashSignature
from openprim.kernels.nvidia.flash_attention import _Kernel
from openprim.kernels.nvidia.wgmma import host_function

BLOCK_Q = 128           # query rows per block: 2 warpgroups x 64 (= BLOCK_K: the causal tile count)
BLOCK_K = 128           # keys per tile
WARPGROUPS = BLOCK_Q // 64
SLOTS = 2               # K/V tiles in flight
ALIGN = 1024            # the 128-byte swizzle's period
# setmaxnreg's split of 65536 registers over the producer and 2 consumer warpgroups (128 threads each)
PRODUCER_REGISTERS, CONSUMER_REGISTERS = 40, 232
SWZ = "swizzle = swizzle_128b, l2promo = l2promo_256b, oob = zero, interleave = none"


def applicable(dtype: str, d: int, mask: bool) -> str | None:
    """None, or why the kernel does not apply."""
    why = attention.applicable(dtype, d, "wgmma")
    return why or ("an additive mask (the mma.sync flash kernel reads it)" if mask else None)


def shared_bytes(d: int) -> int:
    """Q, two K and two V slots, after the alignment slack (3 slots measured 2-7% slower)."""
    return ALIGN + 2 * (BLOCK_Q * d + 2 * SLOTS * BLOCK_K * d)


def attention_kernel(name: str, signature: list[tuple[str, str]], scale: float, causal: bool,
                     layout: str = "BHSD", *, units: int) -> str:
    """The host function (tensor maps) and the launch: signature = [(ssa name, memref type)] of q, k, v,
    then the output; layout: base.ops.ATTENTION_LAYOUTS; units: the multiprocessors (one block each)."""
    sig = FlashSignature.of(signature, layout, lambda dtype, d: applicable(dtype, d, False))
    (q, q_t), (k, k_t), (v, v_t), (out, out_t) = sig.q, sig.k, sig.v, sig.out
    dt, B, H, Sq, Sk, D = sig.dtype, sig.B, sig.H, sig.Sq, sig.Sk, sig.D
    e = _Kernel(dt)
    SLABS = D // 64                              # 64-column boxes of a row of Q, K or V
    Q_BYTES, KV_BYTES = BLOCK_Q * D * 2, BLOCK_K * D * 2
    K_AT = Q_BYTES                               # offsets in the aligned dynamic shared memory
    V_AT = K_AT + SLOTS * KV_BYTES
    TILES = -(-Sk // BLOCK_K)
    CONSUMERS = 128 * WARPGROUPS
    QTILES = -(-Sq // BLOCK_Q)
    # Work: (query tile, head) items, a head's query tiles consecutive, so that the blocks running at once
    # share their heads' K and V in L2 (items ordered by query tile first streamed K and V from memory
    # once per block: head dim 128 at 2048 tokens 0.95x -> 0.68x SDPA). Blocks take the units of work in
    # turn: an item, or causal, a pair of query tiles i and QTILES - 1 - i of one head, longest first (the
    # pairs all take QTILES + 1 key tiles, so the blocks stay balanced).
    # Measured on the H200 (batch 8, 16 heads, 512 and 2048 tokens): persistent blocks are 5-13% faster
    # without causality; causal pairs run better as a block each (0.73-0.78x -> 0.79-0.82x SDPA), the
    # hardware handing the next pair to whichever multiprocessor frees first.
    HALF = -(-QTILES // 2)
    UNITS = B * H * (HALF if causal else QTILES)
    GRID = UNITS if causal else min(UNITS, units)

    # ---- host: one tensor map per operand, boxes of BLOCK rows x 64 columns of one head
    def tensor_map(value: str, mtype: str, rows: int) -> tuple[str, str]:
        box = [1, 1, rows, 64] if layout == "BHSD" else [1, rows, 1, 64]
        cast, tm = e.fresh("u"), e.fresh("tm")
        e.emit(f"{cast} = memref.cast {value} : {mtype} to memref<*x{dt}>")
        tm_t = f"!nvgpu.tensormap.descriptor<tensor = memref<{'x'.join(map(str, box))}x{dt}, 3>, {SWZ}>"
        e.emit(f"{tm} = nvgpu.tma.create.descriptor {cast} box[{', '.join(e.c(x) for x in box)}] "
               f": memref<*x{dt}> -> {tm_t}")
        return tm, tm_t

    maps = [tensor_map(x, t, n) for x, t, n in ((q, q_t, BLOCK_Q), (k, k_t, BLOCK_K), (v, v_t, BLOCK_K))]
    sm = e.fresh("smem")
    e.emit(f"{sm} = arith.constant {shared_bytes(D)} : i32")
    one, zero = e.c(1), e.c(0)
    e.open(f"gpu.launch blocks(%bx, %by, %bz) in (%gx = {e.c(GRID)}, %gy = {one}, %gz = {one}) "
           f"threads(%tx, %ty, %tz) in (%sx = {e.c(CONSUMERS + 128)}, %sy = {one}, %sz = {one}) "
           f"dynamic_shared_memory_size {sm} {{")
    raw_scores = scale > 0                       # max over raw scores, scaled inside exp2's FMA
    neg_inf, zero_f, qk_scale = e.f(-math.inf), e.f(0.0), e.f(scale * LOG2E)
    for lanes in (1, 2, 32):
        e.i32(lanes)
    e.f(1.0)                                     # 1 / l, in either branch of the item's end

    def const(value: int, ty: str = "i64") -> str:
        n = e.fresh("k")
        e.emit(f"{n} = arith.constant {value} : {ty}")
        return n

    # Barriers: full Q, K[s], V[s] (the producer's loads landed); empty Q, K[s], V[s] (every consumer
    # thread is done with it).
    FULL, EMPTY = 1, 2 + 2 * SLOTS               # Q full 0, K/V full 1.., Q empty EMPTY - 1, K/V empty EMPTY..
    QEMPTY = EMPTY - 1
    mbar_t = f"!nvgpu.mbarrier.group<memorySpace = {WG}, num_barriers = {2 + 4 * SLOTS}>"
    bars = e.fresh("bar")
    e.emit(f"{bars} = nvgpu.mbarrier.create -> {mbar_t}")
    e.open(f"scf.if {e.cmp('eq', '%tx', zero)} {{")
    for i in range(2 + 4 * SLOTS):
        e.emit(f"nvgpu.mbarrier.init {bars}[{e.c(i)}], {e.c(1 if i < QEMPTY else CONSUMERS)} : {mbar_t}")
    e.emit("nvvm.fence.mbarrier.init")      # the inits visible to TMA's completions (async proxy)
    e.close()
    e.emit("gpu.barrier")
    dyn, smem_t = e.fresh("dyn"), f"memref<?xi8, {WG}>"
    e.emit(f"{dyn} = gpu.dynamic_shared_memory : {smem_t}")
    raw = e.fresh("i")
    e.emit(f"{raw} = memref.extract_aligned_pointer_as_index {dyn} : {smem_t} -> index")
    base = e.rem(e.op("arith.subi", e.c(ALIGN), e.rem(raw, e.c(ALIGN))), e.c(ALIGN))
    shared_addr = e.add(raw, base)               # the shared-window address of offset 0

    def view(offset: str, shape: str) -> str:
        n = e.fresh("sv")
        e.emit(f"{n} = memref.view {dyn}[{e.add(base, offset)}][] : {smem_t} to memref<{shape}x{dt}, {WG}>")
        return n

    def barrier(index: str) -> str:
        return f"{bars}[{index}]"

    def wait(index: str, parity: str) -> None:
        bit = e.fresh("ph")
        e.emit(f"{bit} = arith.index_cast {e.rem(parity, e.c(2))} : index to i1")
        e.emit(f"nvgpu.mbarrier.try_wait.parity {barrier(index)}, {bit}, {e.c(10000000)} : {mbar_t}")

    def arrive(index: str) -> None:
        e.emit(f"{e.fresh('tok')} = nvgpu.mbarrier.arrive {barrier(index)} : {mbar_t} -> !nvgpu.mbarrier.token")

    loops = []    # the result names of the item loops open now, innermost last

    def items(counters: list[str]) -> tuple[list[str], tuple[str, str, str, str, str]]:
        """Open the loops over this block's items, carrying counters (index, from 0); returns them and the
        item's (image, head, query tile, its first row, its key tiles). end_items closes the loops."""
        names = [e.fresh("n") for _ in counters]
        carried = ", ".join(["index"] * len(names))
        loops.append(e.fresh("it"))
        e.open(f"{loops[-1]}:{len(names)} = scf.for %u = %bx to {e.c(UNITS)} step {e.c(GRID)} "
               f"iter_args({', '.join(f'{n} = {zero}' for n in names)}) -> ({carried}) {{")
        if not causal:
            bh, qtile = e.div("%u", e.c(QTILES)), e.rem("%u", e.c(QTILES))
            tiles = e.c(TILES)
        else:   # the pair's query tiles: QTILES - 1 - j, then j (one item where they coincide)
            bh, j = e.div("%u", e.c(HALF)), e.rem("%u", e.c(HALF))
            mirror = e.op("arith.subi", e.c(QTILES - 1), j)
            gap = e.op("arith.subi", mirror, j)
            inner = [e.fresh("n") for _ in counters]
            loops.append(e.fresh("it"))
            e.open(f"{loops[-1]}:{len(inner)} = scf.for %side = {zero} to {e.add(one, e.op('arith.minui', gap, one))} "
                   f"step {one} iter_args({', '.join(f'{i} = {n}' for i, n in zip(inner, names))}) -> ({carried}) {{")
            names = inner
            qtile = e.op("arith.subi", mirror, e.mul("%side", gap))
            # tile t holds keys 128 t ..: needed while 128 t <= the item's last row (BLOCK_Q = BLOCK_K)
            tiles = e.op("arith.minui", e.c(TILES), e.add(qtile, one))
        return names, (e.div(bh, e.c(H)), e.rem(bh, e.c(H)), qtile, e.mul(qtile, e.c(BLOCK_Q)), tiles)

    def end_items(values: list[str]) -> None:
        """Yield the next item's counters and close the loops items() opened."""
        carried = ", ".join(["index"] * len(values))
        while loops:
            e.emit(f"scf.yield {', '.join(values)} : {carried}")
            e.close()
            inner = loops.pop()
            values = [f"{inner}#{i}" for i in range(len(values))]

    # ---- the producer (the third warpgroup's first thread): per item Q once its slot is empty, then each tile's
    # K and V once theirs is; slots and phases count the tiles of every item so far (k) and the items (i).
    box_t = "1x1x{}x64" if layout == "BHSD" else "1x{}x1x64"

    def load(which: int, image: str, head: str, pos: str, at: str, bar: str, rows: int, nbytes: int) -> None:
        tm, tm_t = maps[which]
        e.emit(f"nvgpu.mbarrier.arrive.expect_tx {barrier(bar)}, {e.c(nbytes)} : {mbar_t}")
        for s in range(SLABS):
            coords = [e.c(64 * s), pos, head, image] if layout == "BHSD" else [e.c(64 * s), head, pos, image]
            dst = view(e.add(at, e.c(s * rows * 128)), box_t.format(rows))
            e.emit(f"nvgpu.tma.async.load {tm}[{', '.join(coords)}], {barrier(bar)} to {dst} "
                   f": {tm_t}, {mbar_t} -> memref<{box_t.format(rows)}x{dt}, {WG}>")

    e.open(f"scf.if {e.cmp('uge', '%tx', e.c(CONSUMERS))} {{")
    e.emit(f"nvvm.setmaxregister decrease {PRODUCER_REGISTERS}")
    e.open(f"scf.if {e.cmp('eq', '%tx', e.c(CONSUMERS))} {{")
    (done_k, done_i), (image, head, _, q0, tiles) = items([zero, zero])
    e.open(f"scf.if {e.cmp('uge', done_i, one)} {{")
    wait(e.c(QEMPTY), e.op("arith.subi", done_i, one))
    e.close()
    load(0, image, head, q0, zero, zero, BLOCK_Q, Q_BYTES)
    e.open(f"scf.for %p = {zero} to {tiles} step {one} {{")
    g = e.add(done_k, "%p")
    slot, use = e.rem(g, e.c(SLOTS)), e.div(g, e.c(SLOTS))
    for which, at in ((1, K_AT), (2, V_AT)):
        e.open(f"scf.if {e.cmp('uge', g, e.c(SLOTS))} {{")      # the slot's previous tile must be consumed
        wait(e.add(e.c(EMPTY + SLOTS * (which - 1)), slot), e.op("arith.subi", use, one))
        e.close()
        load(which, image, head, e.mul("%p", e.c(BLOCK_K)), e.add(e.c(at), e.mul(slot, e.c(KV_BYTES))),
             e.add(e.c(FULL + SLOTS * (which - 1)), slot), BLOCK_K, KV_BYTES)
    e.close()
    end_items([e.add(done_k, tiles), e.add(done_i, one)])
    e.close()
    # the consumers in the else branch: in two ifs ptxas would allot their code the producer's registers too
    e.close("} else {")
    e.open("// ---- the consumers: warpgroup wg owns query rows q0 + 64 wg ..")
    e.emit(f"nvvm.setmaxregister increase {CONSUMER_REGISTERS}")
    wg, lane = e.div("%tx", e.c(128)), e.rem("%tx", e.c(32))
    warp = e.rem(e.div("%tx", e.c(32)), e.c(4))
    g, q2 = e.div(lane, e.c(4)), e.mul(e.rem(lane, e.c(4)), e.c(2))
    masking = causal or Sk % BLOCK_K != 0     # the item's last key tile has keys some row must not see

    def descriptor(offset: str, lead: int) -> str:
        """The wgmma descriptor of the 128-byte swizzled tile at shared offset `offset`."""
        addr = e.fresh("d")
        e.emit(f"{addr} = arith.index_cast {e.add(shared_addr, offset)} : index to i64")
        start, masked, d = e.fresh("d"), e.fresh("d"), e.fresh("d")
        e.emit(f"{start} = arith.shrui {addr}, {const(4)} : i64")
        e.emit(f"{masked} = arith.andi {start}, {const(0x3FFF)} : i64")
        e.emit(f"{d} = arith.ori {masked}, {const((lead >> 4) << 16 | (1024 >> 4) << 32 | 1 << 62)} : i64")
        return d

    def plus(desc: str, nbytes: int) -> str:
        if not nbytes:
            return desc
        d = e.fresh("d")
        e.emit(f"{d} = arith.addi {desc}, {const(nbytes >> 4)} : i64")
        return d

    s_t = f"!llvm.struct<({', '.join(['f32'] * (BLOCK_K // 2))})>"
    o_t = f"!llvm.struct<({', '.join(['f32'] * (D // 2))})>"
    p_t = f"vector<{BLOCK_K // 4}xi32>"
    ab = f"<{dt}>, #nvvm.wgmma_scale_in<one>"

    def wgmma(da: str, db: str, acc: str, n: int, acc_t: str, accumulate: bool, b_layout: str) -> str:
        """acc (+)= A B on m64n{n}k16; b_layout "col": B K-major (PTX trans-b 0), "row": N-major (1)."""
        r = e.fresh("w")
        e.emit(f"{r} = nvvm.wgmma.mma_async {da}, {db}, {acc}, #nvvm.shape<m = 64, n = {n}, k = 16>, "
               f"D [<f32>, #nvvm.wgmma_scale_out<{'one' if accumulate else 'zero'}>], A [{ab}, <row>], "
               f"B [{ab}, <{b_layout}>] : {acc_t} -> {acc_t}")
        return r

    q_desc = descriptor(e.mul(wg, e.c(64 * 128)), 0)
    undef_s = e.fresh("u")
    e.emit(f"{undef_s} = llvm.mlir.undef : {s_t}")

    def zero_o() -> str:
        """O = 0 (every product accumulates), made per item by opaque movs: from constants, LLVM would place
        the copies into the wgmma's tied registers after wgmma.fence, and ptxas serialize every wgmma."""
        n = D // 2
        o = e.fresh("o")
        movs = "\\n".join(f"mov.b32 ${i}, 0;" for i in range(n))
        e.emit(f'{o} = llvm.inline_asm has_side_effects asm_dialect = att "{movs}", "{",".join(["=f"] * n)}" '
               f": () -> {o_t}")
        return o

    def scores(t: str) -> str:
        """Issue S = Q K[t]^T (committed, not waited for): k step kk is columns 16 kk of slab kk / 4."""
        slot = e.rem(t, e.c(SLOTS))
        wait(e.add(e.c(FULL), slot), e.div(t, e.c(SLOTS)))
        k_desc = descriptor(e.add(e.c(K_AT), e.mul(slot, e.c(KV_BYTES))), 0)
        e.emit("nvvm.wgmma.fence.aligned")
        s = undef_s
        for kk in range(D // 16):
            s = wgmma(plus(q_desc, (kk // 4) * Q_BYTES // SLABS + (kk % 4) * 32),
                      plus(k_desc, (kk // 4) * KV_BYTES // SLABS + (kk % 4) * 32), s, BLOCK_K, s_t, kk > 0, "col")
        e.emit("nvvm.wgmma.commit.group.sync.aligned")
        return s

    def product(t: str, o: str, p: str) -> tuple[str, list[str]]:
        """Issue O += P V[t] (committed, not waited for): k step kk is keys 16 kk (P's registers 4 kk .. + 3,
        V's rows 16 kk of every d slab). Returns O and P's registers, which hold() must keep until the wait."""
        regs = []
        slot = e.rem(t, e.c(SLOTS))
        wait(e.add(e.c(FULL + SLOTS), slot), e.div(t, e.c(SLOTS)))
        v_desc = descriptor(e.add(e.c(V_AT), e.mul(slot, e.c(KV_BYTES))), KV_BYTES // SLABS)
        e.emit("nvvm.wgmma.fence.aligned")
        for kk in range(BLOCK_K // 16):
            a = []
            for i in range(4):
                x = e.fresh("pa")
                e.emit(f"{x} = vector.extract {p}[{4 * kk + i}] : i32 from {p_t}")
                a.append(x)
            o = wgmma_registers(a, plus(v_desc, kk * 16 * 128), o)
            regs += a
        e.emit("nvvm.wgmma.commit.group.sync.aligned")
        return o, regs

    def hold(regs: list[str]) -> None:
        """Keep registers that an issued wgmma reads live up to here (after its wait): LLVM sees the asm's
        reads as done at issue and would reuse them for the next P, which ptxas then serializes."""
        e.emit(f'llvm.inline_asm has_side_effects asm_dialect = att "", "{",".join(["r"] * len(regs))}" '
               f"{', '.join(regs)} : ({', '.join(['i32'] * len(regs))}) -> ()")

    def wgmma_registers(a: list[str], db: str, acc: str) -> str:
        """acc += A B on m64n{D}k16 with A from registers (4 x 2 packed values of the warp's rows, as an
        m16n8k16 A fragment) and B N-major from shared memory: inline PTX, as NVVM's op takes only descriptors."""
        n = D // 2
        ins = []
        for i in range(n):
            x = e.fresh("oa")
            e.emit(f"{x} = llvm.extractvalue {acc}[{i}] : {o_t}")
            ins.append(x)
        ptx = (f"{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
               f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.{dt}.{dt} "
               f"{{{', '.join(f'${i}' for i in range(n))}}}, {{${n}, ${n + 1}, ${n + 2}, ${n + 3}}}, ${n + 4}, "
               f"p, 1, 1, 1;\\n}}")
        constraints = ",".join(["=f"] * n + ["r"] * 4 + ["l"] + [str(i) for i in range(n)])
        r = e.fresh("w")
        e.emit(f'{r} = llvm.inline_asm has_side_effects asm_dialect = att "{ptx}", "{constraints}" '
               f"{', '.join(a + [db] + ins)} : ({', '.join(['i32'] * 4 + ['i64'] + ['f32'] * n)}) "
               f"-> {o_t}")
        return r

    def pack_p(vals: list) -> str:
        """P as wgmma's A fragments: register 4 kk + i of k step kk holds rows g + 8 (i % 2) and keys
        16 kk + 8 (i // 2) + q2 .. + 1, converted to the element type (the accumulator's pairs as they lie)."""
        regs = []
        for kk in range(BLOCK_K // 16):
            for i in range(4):
                h, j = i % 2, 2 * kk + i // 2
                wide, vec, word = e.fresh("pv"), e.fresh("pv"), e.fresh("pv")
                e.emit(f"{wide} = vector.from_elements {vals[h][2 * j]}, {vals[h][2 * j + 1]} : vector<2xf32>")
                e.emit(f"{vec} = arith.truncf {wide} : vector<2xf32> to vector<2x{dt}>")
                e.emit(f"{word} = vector.bitcast {vec} : vector<2x{dt}> to vector<1xi32>")
                regs.append(e.fresh("pv"))
                e.emit(f"{regs[-1]} = vector.extract {word}[0] : i32 from vector<1xi32>")
        packed = e.fresh("p")
        e.emit(f"{packed} = vector.from_elements {', '.join(regs)} : {p_t}")
        return packed

    def softmax(s: str, t: str, m_old: list[str], l_old: list[str], masked: bool) -> tuple[list, list, list, list]:
        """Tile t's probabilities from its scores: (p [row h][2 j + c], m', l', alpha) for the thread's rows.
        m is kept in raw score units where the scale is positive: p = exp2(s * scale log2(e) - m'). Masked:
        key 8 j + c + q2 of the tile is dropped past the row's limit, 8 j + c > limit - key0 - q2 (i32)."""
        if masked:
            first = e.fresh("k0")
            e.emit(f"{first} = arith.index_cast {e.add(e.mul(t, e.c(BLOCK_K)), q2)} : index to i32")
            room = [e.op("arith.subi", limit, first, "i32") for limit in limits]
        vals = [[None] * (BLOCK_K // 4) for _ in range(2)]     # [row h][2 j + c]; register 4 j + 2 h + c
        for j in range(BLOCK_K // 8):
            for h in (0, 1):
                for c in (0, 1):
                    x = e.fresh("x")
                    e.emit(f"{x} = llvm.extractvalue {s}[{4 * j + 2 * h + c}] : {s_t}")
                    if not raw_scores:
                        x = e.fop("arith.mulf", x, qk_scale)
                    if masked:
                        past = e.fresh("p")
                        e.emit(f"{past} = arith.cmpi sgt, {e.i32(8 * j + c)}, {room[h]} : i32")
                        x = e.select(past, neg_inf, x)
                    vals[h][2 * j + c] = x
        m_new, l_new, alpha = [], [], []
        for h in (0, 1):
            mx = vals[h][0]
            for x in vals[h][1:]:
                mx = e.fop("arith.maximumf", mx, x)
            mn = e.fop("arith.maximumf", m_old[h], e.row_reduce("arith.maximumf", mx))
            floor = e.softmax_base(mn)
            if raw_scores:
                shift = e.fop("arith.negf", e.fop("arith.mulf", floor, qk_scale))
                vals[h] = [e.fop("math.exp2", e.fop("math.fma", x, qk_scale, shift)) for x in vals[h]]
                a = e.fop("math.exp2", e.fop("arith.mulf", e.fop("arith.subf", m_old[h], floor), qk_scale))
            else:
                vals[h] = [e.fop("math.exp2", e.fop("arith.subf", x, floor)) for x in vals[h]]
                a = e.fop("math.exp2", e.fop("arith.subf", m_old[h], floor))
            total = e.fop("arith.mulf", l_old[h], a)
            for x in vals[h]:
                total = e.fop("arith.addf", total, x)
            m_new.append(mn)
            l_new.append(total)
            alpha.append(a)
        return vals, m_new, l_new, alpha

    # Per item: tile 0's scores and P. Then per tile t >= 1: S[t] is issued, then P[t-1] V[t-1], and tile
    # t's softmax runs while that product does; once it is done, O is rescaled and P[t] replaces P[t-1].
    # Each slot is released (its empty barrier) as soon as its product is done. With masking, the loop
    # stops before the last tile, which follows it masked (causal: the diagonal; else the end of Sk).
    (done_k, done_i), (image, head, _, q0, tiles) = items([zero, zero])
    rows = [e.add(e.add(q0, e.add(e.mul(wg, e.c(64)), e.mul(warp, e.c(16)))), g)]
    rows.append(e.add(rows[0], e.c(8)))          # query rows g and g + 8 of this warp's 16
    limits = []                                  # the last key each row sees (i32), read by softmax()
    for r in rows if masking else ():
        limit = e.fresh("lim")
        e.emit(f"{limit} = arith.index_cast {e.op('arith.minui', r, e.c(Sk - 1)) if causal else e.c(Sk - 1)} "
               f": index to i32")
        limits.append(limit)

    def tile(t: str) -> str:
        """Tile t of this item among every tile the block has loaded: its slot and phase."""
        return e.add(done_k, t)

    wait(zero, done_i)
    s0 = scores(tile(zero))
    e.emit("nvvm.wgmma.wait.group.sync.aligned 0")
    arrive(e.add(e.c(EMPTY), e.rem(tile(zero), e.c(SLOTS))))
    p0, m0, l0, _ = softmax(s0, zero, [neg_inf] * 2, [zero_f] * 2, masking)
    p0 = pack_p(p0)
    state_t = ["f32"] * 4 + [o_t, p_t]
    types = ", ".join(state_t)

    def iteration(t: str, state: list[str], masked: bool) -> list[str]:
        m_old, l_old, o, p_old = state[0:2], state[2:4], state[4], state[5]
        prev = tile(e.op("arith.subi", t, one))
        s = scores(tile(t))
        o, p_regs = product(prev, o, p_old)
        e.emit("nvvm.wgmma.wait.group.sync.aligned 1")        # S[t] is done; P[t-1] V[t-1] may still run
        arrive(e.add(e.c(EMPTY), e.rem(tile(t), e.c(SLOTS))))
        p, m_new, l_new, alpha = softmax(s, t, m_old, l_old, masked)
        p = pack_p(p)
        e.emit("nvvm.wgmma.wait.group.sync.aligned 0")
        hold(p_regs)
        arrive(e.add(e.c(EMPTY + SLOTS), e.rem(prev, e.c(SLOTS))))
        for i in range(D // 2):
            x, n = e.fresh("o"), e.fresh("o")
            e.emit(f"{x} = llvm.extractvalue {o}[{i}] : {o_t}")
            e.emit(f"{n} = llvm.insertvalue {e.fop('arith.mulf', x, alpha[(i % 4) // 2])}, {o}[{i}] : {o_t}")
            o = n
        return m_new + l_new + [o, p]

    looped = e.fresh("res")
    names = [e.fresh(x) for x in ("m", "m", "l", "l", "o", "p")]
    # The trip count through an opaque move: LLVM turned loops of at most one trip into straight code whose
    # register copies fell inside a wgmma stage, and ptxas then serialized every wgmma of the kernel.
    end = e.opaque(e.op("arith.subi", tiles, one) if masking else tiles)
    e.open(f"{looped}:6 = scf.for %t = {one} to {end} step {one} "
           f"iter_args({', '.join(f'{n} = {i}' for n, i in zip(names, m0 + l0 + [zero_o(), p0]))}) -> ({types}) {{")
    e.emit(f"scf.yield {', '.join(iteration('%t', names, False))} : {types}")
    e.close()
    def finish(state: list[str]) -> None:
        """The last tile's product, then out = O / l (0 for a row whose every key was masked: l = 0)."""
        arrive(e.c(QEMPTY))                            # every score is done: the next item's Q may come
        final = tile(e.op("arith.subi", tiles, one))
        last, _ = product(final, state[4], state[5])
        e.emit("nvvm.wgmma.wait.group.sync.aligned 0")
        arrive(e.add(e.c(EMPTY + SLOTS), e.rem(final, e.c(SLOTS))))
        for h in (0, 1):
            inv = e.inverse_row_sum(state[2 + h])
            e.open(f"scf.if {e.cmp('ult', rows[h], e.c(Sq))} {{")
            for j in range(D // 8):
                pair = []
                for c in (0, 1):
                    x = e.fresh("o")
                    e.emit(f"{x} = llvm.extractvalue {last}[{4 * j + 2 * h + c}] : {o_t}")
                    pair.append(e.fop("arith.mulf", x, inv))
                wide, narrow = e.fresh("st"), e.fresh("st")
                e.emit(f"{wide} = vector.from_elements {', '.join(pair)} : vector<2xf32>")
                e.emit(f"{narrow} = arith.truncf {wide} : vector<2xf32> to vector<2x{dt}>")
                idx = [image, head, rows[h], e.add(e.c(8 * j), q2)] if layout == "BHSD" else \
                    [image, rows[h], head, e.add(e.c(8 * j), q2)]
                e.emit(f"vector.store {narrow}, {out}[{', '.join(idx)}] {{alignment = 4}} : {out_t}, vector<2x{dt}>")
            e.close()

    # With masking, the masked last tile and the rest are two branches that each finish the item (joined,
    # O and P in phis, ptxas spilled or serialized the products).
    done = [f"{looped}#{i}" for i in range(6)]
    if masking:
        e.open(f"scf.if {e.cmp('ugt', tiles, one)} {{")
        finish(iteration(end, done, True))
        e.close("} else {")
        e.open("// a single key tile: tile 0 was the masked one")
        finish(done)
        e.close()
    else:
        finish(done)
    end_items([e.add(done_k, tiles), e.add(done_i, one)])
    e.close()
    e.emit("gpu.terminator")
    e.close("}")
    return host_function(e, name, signature)
