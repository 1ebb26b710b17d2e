"""Resources of compiled GPU kernels (registers, shared/LDS, scratch) read from the code objects themselves.

`openprim inspect` shows them without a GPU and without vendor tools: an AMDGPU hsaco carries them as a
msgpack document in its NT_AMDGPU_METADATA note, a CUDA cubin in its `.nv.info*` sections and
`.nv.shared.<kernel>` sizes, and PTX only declares static shared arrays (registers are allocated later, by
ptxas or the driver). Pure Python: the runtime runs where only numpy and a driver are installed.
"""
from __future__ import annotations

import re
import struct

from openprim.base.errors import OpenPrimError

EM_AMDGPU, EM_CUDA = 224, 190
NT_AMDGPU_METADATA = 32
EIATTR_FRAME_SIZE, EIATTR_REGCOUNT = 0x11, 0x2f
EIFMT_SVAL = 0x04
# sm_90 cubins mark the shared memory the driver reserves for every block (cudaDevAttrReservedSharedMemoryPerBlock)
# with a `.nv.shared.reserved.N` section and count it into each kernel's `.nv.shared.<kernel>` size.
RESERVED_SHARED_BYTES = 1024


class _Elf:
    """The sections (name -> (type, bytes, size, info)) and symbol names of a 64-bit little-endian ELF."""

    def __init__(self, data: bytes, machine: int, what: str):
        self.what = what
        bad = self.bad
        if data[:4] != b"\x7fELF":
            raise bad("no ELF magic")
        if data[4:6] != b"\x02\x01":
            raise bad("not a 64-bit little-endian ELF")
        try:
            e_machine, = struct.unpack_from("<H", data, 18)
            if e_machine != machine:
                raise bad(f"e_machine {e_machine}, expected {machine}")
            shoff, = struct.unpack_from("<Q", data, 0x28)
            shnum, shstrndx = struct.unpack_from("<HH", data, 0x3c)
            headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]
            strtab = headers[shstrndx]
            self.sections, self.symbols = {}, []
            for name, typ, _, _, off, size, link, info, _, _ in headers:
                body = data[off:off + size] if typ != 8 else b""          # SHT_NOBITS has no bytes
                self.sections[_cstr(data, strtab[4] + name)] = (typ, body, size, info)
                if typ == 2:                                             # SHT_SYMTAB
                    names = headers[link][4]
                    self.symbols = [_cstr(data, names + struct.unpack_from("<I", body, i)[0])
                                    for i in range(0, len(body), 24)]
        except (struct.error, IndexError, ValueError) as e:
            raise bad(f"truncated or corrupt ELF: {e}") from None

    def bad(self, why: str) -> OpenPrimError:
        return OpenPrimError(f"not {self.what} ({why})")


def _cstr(data: bytes, at: int) -> str:
    return data[at:data.index(b"\0", at)].decode()


def _msgpack(data: bytes, at: int = 0):
    """(value, next offset) of the msgpack object at `at`: nil, bools, ints, floats, str, bin, arrays, maps."""
    b = data[at]
    at += 1

    def take(fmt):
        return struct.unpack_from(">" + fmt, data, at)[0], at + struct.calcsize(fmt)

    def items(n, at):
        out = []
        for _ in range(n):
            v, at = _msgpack(data, at)
            out.append(v)
        return out, at

    def mapping(n, at):
        kv, at = items(2 * n, at)
        return dict(zip(kv[0::2], kv[1::2])), at

    if b <= 0x7f:
        return b, at
    if b >= 0xe0:
        return b - 0x100, at
    if 0x80 <= b <= 0x8f:
        return mapping(b & 0x0f, at)
    if 0x90 <= b <= 0x9f:
        return items(b & 0x0f, at)
    if 0xa0 <= b <= 0xbf:
        n = b & 0x1f
        return data[at:at + n].decode(), at + n
    if b in (0xc0, 0xc2, 0xc3):
        return {0xc0: None, 0xc2: False, 0xc3: True}[b], at
    scalars = {0xca: "f", 0xcb: "d", 0xcc: "B", 0xcd: "H", 0xce: "I", 0xcf: "Q",
               0xd0: "b", 0xd1: "h", 0xd2: "i", 0xd3: "q"}
    if b in scalars:
        return take(scalars[b])
    lengths = {0xc4: "B", 0xc5: "H", 0xc6: "I", 0xd9: "B", 0xda: "H", 0xdb: "I",
               0xdc: "H", 0xdd: "I", 0xde: "H", 0xdf: "I"}
    if b not in lengths:
        raise ValueError(f"unsupported msgpack type 0x{b:02x}")
    n, at = take(lengths[b])
    if b in (0xc4, 0xc5, 0xc6):
        return data[at:at + n], at + n
    if b in (0xd9, 0xda, 0xdb):
        return data[at:at + n].decode(), at + n
    return items(n, at) if b in (0xdc, 0xdd) else mapping(n, at)


def _amdgpu_metadata(hsaco: bytes) -> dict:
    elf = _Elf(hsaco, EM_AMDGPU, "an AMDGPU code object")
    for typ, body, _, _ in elf.sections.values():
        at = 0
        while typ == 7 and at + 12 <= len(body):                         # SHT_NOTE entries
            namesz, descsz, ntype = struct.unpack_from("<III", body, at)
            name_end = at + 12 + namesz
            desc = at + 12 + (namesz + 3) // 4 * 4
            if body[at + 12:name_end].rstrip(b"\0") == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                try:
                    return _msgpack(body[desc:desc + descsz])[0]
                except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
                    raise elf.bad(f"corrupt metadata: {e}") from None
            at = desc + (descsz + 3) // 4 * 4
    raise elf.bad("no NT_AMDGPU_METADATA note")


def amdgpu_kernels(hsaco: bytes) -> list[dict]:
    """Per kernel: name, sgpr/vgpr(/agpr) counts, LDS, scratch, wavefront size, kernarg bytes, max workgroup."""
    keys = {"name": ".name", "sgpr_count": ".sgpr_count", "vgpr_count": ".vgpr_count", "agpr_count": ".agpr_count",
            "lds_bytes": ".group_segment_fixed_size", "scratch_bytes": ".private_segment_fixed_size",
            "wavefront_size": ".wavefront_size", "kernarg_bytes": ".kernarg_segment_size",
            "max_flat_workgroup_size": ".max_flat_workgroup_size"}
    return [{k: kernel[m] for k, m in keys.items() if m in kernel}
            for kernel in _amdgpu_metadata(hsaco).get("amdhsa.kernels", [])]


def amdgpu_target(hsaco: bytes) -> str:
    """The code object's target, e.g. 'amdgcn-amd-amdhsa--gfx942'."""
    return _amdgpu_metadata(hsaco).get("amdhsa.target", "")


def cubin_kernels(cubin: bytes) -> list[dict]:
    """Per kernel: name, registers, static shared bytes and stack frame (local) bytes, as `ptxas -v` prints."""
    elf = _Elf(cubin, EM_CUDA, "a CUDA cubin")
    attrs = {}                                                            # (attribute, symbol name) -> value
    for name, (_, body, _, _) in elf.sections.items():
        at = 0
        while name.startswith(".nv.info") and at + 4 <= len(body):
            fmt, attr, size = struct.unpack_from("<BBH", body, at)
            at += 4
            if fmt == EIFMT_SVAL:
                if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and size == 8:
                    sym, value = struct.unpack_from("<II", body, at)
                    attrs[attr, elf.symbols[sym]] = value
                at += size
    reserved = RESERVED_SHARED_BYTES if any(n.startswith(".nv.shared.reserved.") for n in elf.sections) else 0
    kernels = []
    for section in elf.sections:
        if section.startswith(".text."):
            name = section[len(".text."):]
            shared = elf.sections.get(".nv.shared." + name, (0, b"", reserved, 0))[2] - reserved
            kernels.append({"name": name, "registers": attrs.get((EIATTR_REGCOUNT, name)),
                            "shared_bytes": shared, "local_bytes": attrs.get((EIATTR_FRAME_SIZE, name), 0)})
    return kernels


_SHARED = re.compile(r"\.shared\s+(?:\.align\s+\d+\s+)?\.(?:b|u|s|f)(\d+)\s+[\w$]+((?:\[\d+\])*)")


def ptx_kernels(ptx: str) -> list[dict]:
    """Per `.entry`: name and static `.shared` bytes (registers are unknown until ptxas allocates them)."""
    kernels = []
    for entry in re.finditer(r"\.entry\s+([\w$]+)", ptx):
        start = ptx.find("{", entry.end())
        depth, end = 0, start
        for end in range(start, len(ptx)):                               # the body: up to the matching brace
            depth += {"{": 1, "}": -1}.get(ptx[end], 0)
            if depth == 0:
                break
        shared = 0
        for bits, dims in _SHARED.findall(ptx[start:end]):
            count = 1
            for d in re.findall(r"\d+", dims):
                count *= int(d)
            shared += int(bits) // 8 * count
        kernels.append({"name": entry[1], "registers": None, "shared_bytes": shared})
    return kernels
