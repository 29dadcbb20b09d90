"""tidal's own f32 gemm: register-tiled AVX-512 code that `tidal-matmul-to-blas`'s shim calls
instead of MKL where MKL does not use AVX-512.

MKL chooses its kernels by CPU vendor: on AMD CPUs with AVX-512 (this project's 2-core EPYC) it
runs its AVX2 path. Measured there, one thread, row-major C += A·B through `sgemm_`:

    [32,128]·[128,128]   MKL 10.3 µs (101 GFLOP/s)   this kernel's C twin 4.0 µs (260 GFLOP/s)
    [4096,128]·[128,128] MKL 1184 µs (113 GFLOP/s)   518 µs (259 GFLOP/s)
    [64,256]·[256,512]   MKL 158 µs (107 GFLOP/s)    64 µs (263 GFLOP/s)

The kernel is the classic outer-product tile: 8 rows of C by 32 columns (two 16-lane vectors)
held in 16 registers while k runs, each step one row of B (two vector loads) times eight
broadcast elements of A. B is read with unit inner stride ('N'), or, stored transposed ('T', a
Linear's weight), packed 32 columns at a time into a [k, 32] stack panel first (`_bt` variant,
k ≤ MAX_PACKED_K); A any way ('N' or 'T': its elements are broadcast one at a time). Columns past the last full block of 32 are masked, rows
past the last full block of 8 run one at a time. The kernel does not block k: B's [k, 32] panel is
reused by every row block and stays in L1/L2 for the widths torch models use (k ≤ 2048 is 256
KiB); the shim runs a longer k (a weight's cotangent summed over T·B rows) as chunks of K_CHUNK.

Where it is used is decided once per process (`wanted()`): `TIDAL_GEMM=tidal` or `blas` forces
it, otherwise it is used on a CPU with AVX-512 whose vendor is not Intel (on Intel CPUs MKL takes
its AVX-512 kernels, and was the faster path measured on the Xeon VM of earlier sessions).
"""

from __future__ import annotations

import functools
import os

LANES = 16
VECTORS = 2  # vectors per tile row: 32 columns
ROWS = 8
NAME = "tidal_sgemm_tiles"


@functools.lru_cache(maxsize=1)
def wanted() -> bool:
    """Whether f32 gemms run this kernel rather than MKL (B stored transposed with k above
    MAX_PACKED_K stays with MKL either way)."""
    choice = os.environ.get("TIDAL_GEMM", "").strip().lower()
    if choice in ("tidal", "blas"):
        return choice == "tidal"
    if choice:
        raise ValueError(f"TIDAL_GEMM must be 'tidal' or 'blas', got {choice!r}")
    vendor, flags = _cpu()
    return "avx512f" in flags and vendor != "GenuineIntel"


def _cpu() -> tuple[str, set[str]]:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return "", set()
    vendor, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return vendor, flags


class _Writer:
    """Lines of MLIR with unique SSA names (nested regions of one function share one namespace)."""

    def __init__(self):
        self.lines: list[str] = []
        self._n = 0

    def fresh(self, stem: str) -> str:
        self._n += 1
        return f"%{stem}{self._n}"

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def op(self, stem: str, text: str) -> str:
        name = self.fresh(stem)
        self.lines.append(f"{name} = {text}")
        return name


_VEC = f"vector<{LANES}xf32>"
_MASK = f"vector<{LANES}xi1>"


def _gep(w: _Writer, base: str, offset: str) -> str:
    return w.op("p", f"llvm.getelementptr {base}[{offset}] : (!llvm.ptr, i64) -> !llvm.ptr, f32")


def _load(w: _Writer, ptr: str, mask: str | None) -> str:
    if mask is None:
        return w.op("v", f"llvm.load {ptr} {{alignment = 4 : i64}} : !llvm.ptr -> {_VEC}")
    return w.op("v", f"llvm.intr.masked.load {ptr}, {mask}, %zero {{alignment = 4 : i32}} : "
                     f"(!llvm.ptr, {_MASK}, {_VEC}) -> {_VEC}")


def _store(w: _Writer, value: str, ptr: str, mask: str | None) -> None:
    if mask is None:
        w(f"llvm.store {value}, {ptr} {{alignment = 4 : i64}} : {_VEC}, !llvm.ptr")
    else:
        w(f"llvm.intr.masked.store {value}, {ptr}, {mask} {{alignment = 4 : i32}} : {_VEC}, {_MASK} into !llvm.ptr")


def _tile(w: _Writer, rows: int, i: str, j: str, b_col: str, b_stride: str, masks: list[str] | None) -> None:
    """C[i:i+rows, j:j+32] = op(A)[i:i+rows, :]·B[:, 32 columns from `b_col`] + beta·C[...],
    B's rows `b_stride` elements apart; lanes past `masks` neither read nor written."""
    masks = masks or [None] * VECTORS
    types = ", ".join([_VEC] * (rows * VECTORS))
    c_ptrs = []
    for r in range(rows):
        row = w.op("i", f"arith.addi {i}, %c{r} : i64") if r else i
        start = w.op("o", f"arith.addi {w.op('o', f'arith.muli {row}, %ldc : i64')}, {j} : i64")
        c_ptrs.append([_gep(w, "%pc", w.op("o", f"arith.addi {start}, %c{LANES * v} : i64") if v else start)
                       for v in range(VECTORS)])
    init = w.fresh("init")
    w(f"{init}:{rows * VECTORS} = scf.if %fresh -> ({types}) {{")
    w(f"  scf.yield {', '.join(['%zero'] * (rows * VECTORS))} : {types}")
    w("} else {")
    scaled = []
    for r in range(rows):
        for v in range(VECTORS):
            scaled.append(w.op("s", f"arith.mulf {_load(w, c_ptrs[r][v], masks[v])}, %betav : {_VEC}"))
    w(f"  scf.yield {', '.join(scaled)} : {types}")
    w("}")
    # Row bases outside the k loop: inside, one multiply for A's step and one for B's row.
    a_rows = []
    for r in range(rows):
        row = w.op("i", f"arith.addi {i}, %c{r} : i64") if r else i
        a_rows.append(_gep(w, "%pa", w.op("o", f"arith.muli {row}, %sai : i64")))
    acc, kk = w.fresh("acc"), w.fresh("k")
    carried = [w.fresh("x") for _ in range(rows * VECTORS)]
    args = ", ".join(f"{x} = {init}#{n}" for n, x in enumerate(carried))
    w(f"{acc}:{rows * VECTORS} = scf.for {kk} = %c0 to %k step %c1 iter_args({args}) -> ({types}) : i64 {{")
    b_row = _gep(w, b_col, w.op("o", f"arith.muli {kk}, {b_stride} : i64"))
    b = [_load(w, _gep(w, b_row, f"%c{LANES * v}") if v else b_row, masks[v]) for v in range(VECTORS)]
    a_k = w.op("o", f"arith.muli {kk}, %sak : i64")
    updated = []
    for r in range(rows):
        a = w.op("a", f"llvm.load {_gep(w, a_rows[r], a_k)} : !llvm.ptr -> f32")
        splat = w.op("a", f"vector.broadcast {a} : f32 to {_VEC}")
        for v in range(VECTORS):
            updated.append(w.op("y", f"vector.fma {splat}, {b[v]}, {carried[r * VECTORS + v]} : {_VEC}"))
    w(f"scf.yield {', '.join(updated)} : {types}")
    w("}")
    for r in range(rows):
        for v in range(VECTORS):
            _store(w, f"{acc}#{r * VECTORS + v}", c_ptrs[r][v], masks[v])


def _column_block(w: _Writer, j: str, b_col: str, b_stride: str, masks: list[str] | None) -> None:
    i = w.fresh("i")
    w(f"scf.for {i} = %i0 to %mfull step %c{ROWS} : i64 {{")
    _tile(w, ROWS, i, j, b_col, b_stride, masks)
    w("}")
    i = w.fresh("i")
    w(f"scf.for {i} = %mfull to %i1 step %c1 : i64 {{")
    _tile(w, 1, i, j, b_col, b_stride, masks)
    w("}")


def _lane_masks(w: _Writer, remaining: str) -> list[str]:
    """Masks of each tile vector's lanes below `remaining` (the columns left)."""
    remv = w.op("rem", f"vector.broadcast {remaining} : i64 to vector<{LANES}xi64>")
    masks = []
    for v in range(VECTORS):
        lanes = w.op("l", f"arith.addi %lanes, {w.op('l', f'vector.broadcast %c{LANES * v} : i64 to vector<{LANES}xi64>')} : vector<{LANES}xi64>")
        masks.append(w.op("mask", f"arith.cmpi slt, {lanes}, {remv} : vector<{LANES}xi64>"))
    return masks


def _transpose(w: _Writer, rows: list[str]) -> list[str]:
    """The 16x16 transpose of 16 row vectors: four rounds of two-source shuffles, each swapping the
    off-diagonal b x b blocks of every 2b x 2b block (b = 8, 4, 2, 1); one vpermt2ps each."""
    n = len(rows)
    block = n // 2
    while block:
        out = list(rows)
        for i in range(n):
            if i & block:
                continue
            lo = [k if not k & block else n + k - block for k in range(n)]
            hi = [k + block if not k & block else n + k for k in range(n)]
            for dst, idx in ((i, lo), (i + block, hi)):
                out[dst] = w.op("t", f"vector.shuffle {rows[i]}, {rows[i + block]} [{', '.join(map(str, idx))}] : {_VEC}, {_VEC}")
        rows = out
        block //= 2
    return rows


def _pack_transposed(w: _Writer, j: str) -> None:
    """Copies Bᵀ[:, j:j+32] (B stored [n, k] with rows `ldb` apart) into `%panel` as [k, 32] rows,
    16x16 blocks at a time (vector reads along k, a transpose in registers, vector writes); columns
    past n and rows past k are zeros (the panel's rows are rounded up to 16)."""
    for half in range(VECTORS):
        kb = w.fresh("kb")
        w(f"scf.for {kb} = %c0 to %k step %c{LANES} : i64 {{")
        k_left = w.op("rem", f"arith.subi %k, {kb} : i64")
        k_mask = w.op("mask", f"arith.cmpi slt, %lanes, {w.op('rem', f'vector.broadcast {k_left} : i64 to vector<{LANES}xi64>')} : vector<{LANES}xi64>")
        loaded = []
        for jj in range(LANES):
            row = w.op("r", f"arith.addi {j}, %c{LANES * half + jj} : i64")
            valid = w.op("r", f"arith.cmpi slt, {row}, %n : i64")
            mask = w.op("mask", f"arith.select {valid}, {k_mask}, %none : {_MASK}")
            at = w.op("o", f"arith.addi {w.op('o', f'arith.muli {row}, %ldb : i64')}, {kb} : i64")
            loaded.append(_load(w, _gep(w, "%pb", at), mask))
        for kk, column in enumerate(_transpose(w, loaded)):
            panel_row = w.op("o", f"arith.addi {kb}, %c{kk} : i64")
            row_start = w.op("o", f"arith.muli {panel_row}, %c{LANES * VECTORS} : i64")
            at = w.op("o", f"arith.addi {row_start}, %c{LANES * half} : i64")
            _store(w, column, _gep(w, "%panel", at), None)
        w("}")


_SIGNATURE = ("(%ta: i8, %m: i64, %n: i64, %k: i64, %a: i64, %lda: i64, %b: i64, %ldb: i64, %beta: f32, "
              "%c: i64, %ldc: i64)")
# Bᵀ's panel lives on the stack: k is at most this (256 KiB); a longer k stays with BLAS.
MAX_PACKED_K = 2048
# The shim (`blas._DISPATCH`) runs a gemm whose k passes MAX_UNBLOCKED_K as chunks of K_CHUNK, C
# accumulating. An LSTM adjoint's dU = Hᵀ·dG, [256, 32768]·[32768, 1024], one thread on the EPYC:
# unchunked 352-384 ms (45-49 GFLOP/s), chunks of 1024 124 ms, 512 90 ms, 256 86 ms (200 GFLOP/s;
# MKL 162 ms); chunking a k of 1024 cost 5-15% (dG·Wᵀ), hence chunks only past 2048.
MAX_UNBLOCKED_K = 2048
K_CHUNK = 256


def _part(name: str, b_transposed: bool) -> str:
    """`@<name>_part(<gemm arguments>, i0, i1, j0, j1)`: rows [i0, i1) and columns [j0, j1) of C
    (i0 a multiple of 8, j0 of 32)."""
    width = LANES * VECTORS
    w = _Writer()
    w(f"func.func private @{name}_part{_SIGNATURE[:-1]}, %i0: i64, %i1: i64, %j0: i64, %j1: i64) {{")
    constants = {0, 1, ROWS, width} | {LANES * v for v in range(VECTORS)} | set(range(ROWS))
    if b_transposed:
        constants |= set(range(width)) | {LANES - 1}
    for value in sorted(constants):
        w(f"%c{value} = arith.constant {value} : i64")
    w("%trans = arith.constant 84 : i8")
    w("%ta_t = arith.cmpi eq, %ta, %trans : i8")
    w("%sai = arith.select %ta_t, %c1, %lda : i64")  # element step between rows of op(A)
    w("%sak = arith.select %ta_t, %lda, %c1 : i64")  # and along k
    w("%f0 = arith.constant 0.0 : f32")
    w("%fresh = arith.cmpf oeq, %beta, %f0 : f32")  # beta = 0: C is not read (it may hold NaNs)
    w(f"%betav = vector.broadcast %beta : f32 to {_VEC}")
    w(f"%zero = arith.constant dense<0.0> : {_VEC}")
    w(f"%lanes = arith.constant dense<[{', '.join(str(x) for x in range(LANES))}]> : vector<{LANES}xi64>")
    for name_ in ("a", "b", "c"):
        w(f"%p{name_} = llvm.inttoptr %{name_} : i64 to !llvm.ptr")
    w(f"%nrem = arith.remsi %n, %c{width} : i64")
    w("%nfull = arith.subi %n, %nrem : i64")
    w(f"%mrem = arith.remsi {w.op('o', 'arith.subi %i1, %i0 : i64')}, %c{ROWS} : i64")
    w("%mfull = arith.subi %i1, %mrem : i64")
    if b_transposed:
        w(f"%none = arith.constant dense<false> : {_MASK}")
        w(f"%k16 = arith.andi {w.op('o', f'arith.addi %k, %c{LANES - 1} : i64')}, {w.op('o', f'arith.constant {-LANES} : i64')} : i64")
        w(f"%panel = llvm.alloca {w.op('o', f'arith.muli %k16, %c{width} : i64')} x f32 {{alignment = 64 : i64}} : (i64) -> !llvm.ptr")
    w("%has_rows = arith.cmpi sgt, %i1, %i0 : i64")
    w("%columns = arith.select %has_rows, %j1, %j0 : i64")  # no rows: B is not read (nor packed)
    j = w.fresh("j")
    w(f"scf.for {j} = %j0 to %columns step %c{width} : i64 {{")
    if b_transposed:
        _pack_transposed(w, j)
        b_col, b_stride = "%panel", f"%c{width}"
    else:
        b_col, b_stride = _gep(w, "%pb", j), "%ldb"
    full = w.op("full", f"arith.cmpi slt, {j}, %nfull : i64")
    w(f"scf.if {full} {{")
    _column_block(w, j, b_col, b_stride, None)
    w("} else {")
    _column_block(w, j, b_col, b_stride, _lane_masks(w, "%nrem"))
    w("}")
    w("}")
    w("return")
    w("}")
    return "\n".join(w.lines)


# A gemm of at least this many multiply-adds is split over the thread team when more than one
# thread is allowed: by blocks of 32 columns, or by blocks of 8 rows when there is one column
# block. Below it (about 2 µs of one thread's work) starting the team costs about what it saves.
PARALLEL_MACS = 1 << 19

_SPLIT = """
func.func private @{name}{signature} {{
  %threads32 = func.call @omp_get_max_threads() : () -> i32
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %rows = arith.constant {rows} : i64
  %width = arith.constant {width} : i64
  %threads = arith.extsi %threads32 : i32 to i64
  %mn = arith.muli %m, %n : i64
  %macs = arith.muli %mn, %k : i64
  %min_macs = arith.constant {min_macs} : i64
  %big = arith.cmpi sge, %macs, %min_macs : i64
  %team = arith.cmpi sgt, %threads, %c1 : i64
  %parallel = arith.andi %big, %team : i1
  %column_blocks = arith.ceildivsi %n, %width : i64
  %row_blocks = arith.ceildivsi %m, %rows : i64
  %by_columns = arith.cmpi sgt, %column_blocks, %c1 : i64
  %blocks = arith.select %by_columns, %column_blocks, %row_blocks : i64
  %parts = arith.minsi %threads, %blocks : i64
  %split = arith.cmpi sgt, %parts, %c1 : i64
  %go = arith.andi %parallel, %split : i1
  scf.if %go {{
    %per = arith.ceildivsi %blocks, %parts : i64
    %count = arith.index_cast %parts : i64 to index
    scf.forall (%t) in (%count) {{
      %t64 = arith.index_cast %t : index to i64
      %b0 = arith.muli %t64, %per : i64
      %b1 = arith.addi %b0, %per : i64
      scf.if %by_columns {{
        %j0 = arith.muli %b0, %width : i64
        %j1w = arith.muli %b1, %width : i64
        %j1 = arith.minsi %j1w, %n : i64
        func.call @{name}_part(%ta, %m, %n, %k, %a, %lda, %b, %ldb, %beta, %c, %ldc, %c0, %m, %j0, %j1) : {part_type}
      }} else {{
        %i0 = arith.muli %b0, %rows : i64
        %i1r = arith.muli %b1, %rows : i64
        %i1 = arith.minsi %i1r, %m : i64
        func.call @{name}_part(%ta, %m, %n, %k, %a, %lda, %b, %ldb, %beta, %c, %ldc, %i0, %i1, %c0, %n) : {part_type}
      }}
    }}
  }} else {{
    func.call @{name}_part(%ta, %m, %n, %k, %a, %lda, %b, %ldb, %beta, %c, %ldc, %c0, %m, %c0, %n) : {part_type}
  }}
  return
}}
"""
_PART_TYPE = "(i8, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64, i64, i64, i64, i64) -> ()"


def _function(name: str, b_transposed: bool) -> str:
    split = _SPLIT.format(name=name, signature=_SIGNATURE, rows=ROWS, width=LANES * VECTORS,
                          min_macs=PARALLEL_MACS, part_type=_PART_TYPE)
    return "\n".join([_part(name, b_transposed), split])


NAME_B_TRANSPOSED = NAME + "_bt"


@functools.lru_cache(maxsize=4)
def kernel_text(variants: frozenset = frozenset({False, True})) -> str:
    """`func.func private @tidal_sgemm_tiles(ta, m, n, k, a, lda, b, ldb, beta, c, ldc)`: row-major
    C = op(A)·B + beta·C on byte addresses, `ta` BLAS's 'N' (78) or 'T' (84) for A; and
    `@tidal_sgemm_tiles_bt`, the same with B stored transposed (k ≤ MAX_PACKED_K): each block of
    32 columns of Bᵀ is first packed into a [k, 32] panel that every row block then reads.
    `variants`: the values of "B stored transposed" to emit a function for (each is about 1,500
    lines of MLIR, ~0.08 s of a module's compile)."""
    declarations = "func.func private @omp_get_max_threads() -> i32"  # libgomp's: the team's size
    names = {False: NAME, True: NAME_B_TRANSPOSED}
    return "\n".join([declarations, *(_function(names[t], t) for t in sorted(variants))])
