"""tidal's own f32 gemm: register-tiled AVX-512 code that `tidal-matmul-to-blas`'s shim calls
instead of MKL where MKL does not use AVX-512.

MKL chooses its kernels by CPU vendor: on AMD CPUs with AVX-512 (this project's 2-core EPYC) it
runs its AVX2 path. Measured there, one thread, row-major C += A·B through `sgemm_`:

    [32,128]·[128,128]   MKL 10.3 µs (101 GFLOP/s)   this kernel's C twin 4.0 µs (260 GFLOP/s)
    [4096,128]·[128,128] MKL 1184 µs (113 GFLOP/s)   518 µs (259 GFLOP/s)
    [64,256]·[256,512]   MKL 158 µs (107 GFLOP/s)    64 µs (263 GFLOP/s)

The kernel is the classic outer-product tile: 8 rows of C by 32 columns (two 16-lane vectors)
held in 16 registers while k runs, each step one row of B (two vector loads) times eight
broadcast elements of A. B is read with unit inner stride ('N'); A any way ('N' or 'T': its
elements are broadcast one at a time). Columns past the last full block of 32 are masked, rows
past the last full block of 8 run one at a time. k is not blocked: B's [k, 32] panel is reused by
every row block and stays in L1/L2 for the widths torch models use (k ≤ 2048 is 256 KiB).

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
    """Whether f32 gemms with B read untransposed run this kernel rather than MKL."""
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


def _tile(w: _Writer, rows: int, i: str, j: str, masks: list[str] | None) -> None:
    """C[i:i+rows, j:j+32] = op(A)[i:i+rows, :]·B[:, j:j+32] + beta·C[...], lanes past `masks`
    neither read nor written."""
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
    b_col = _gep(w, "%pb", j)
    acc, kk = w.fresh("acc"), w.fresh("k")
    carried = [w.fresh("x") for _ in range(rows * VECTORS)]
    args = ", ".join(f"{x} = {init}#{n}" for n, x in enumerate(carried))
    w(f"{acc}:{rows * VECTORS} = scf.for {kk} = %c0 to %k step %c1 iter_args({args}) -> ({types}) : i64 {{")
    b_row = _gep(w, b_col, w.op("o", f"arith.muli {kk}, %ldb : i64"))
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


def _column_block(w: _Writer, j: str, masks: list[str] | None) -> None:
    i = w.fresh("i")
    w(f"scf.for {i} = %c0 to %mfull step %c{ROWS} : i64 {{")
    _tile(w, ROWS, i, j, masks)
    w("}")
    i = w.fresh("i")
    w(f"scf.for {i} = %mfull to %m step %c1 : i64 {{")
    _tile(w, 1, i, j, masks)
    w("}")


@functools.lru_cache(maxsize=1)
def kernel_text() -> str:
    """`func.func private @tidal_sgemm_tiles(ta, m, n, k, a, lda, b, ldb, beta, c, ldc)`: row-major
    C = op(A)·B + beta·C on byte addresses, `ta` BLAS's 'N' (78) or 'T' (84) for A."""
    width = LANES * VECTORS
    w = _Writer()
    w(f"func.func private @{NAME}(%ta: i8, %m: i64, %n: i64, %k: i64, %a: i64, %lda: i64, %b: i64, "
      "%ldb: i64, %beta: f32, %c: i64, %ldc: i64) {")
    for value in sorted({0, 1, ROWS, width} | {LANES * v for v in range(VECTORS)} | set(range(ROWS))):
        w(f"%c{value} = arith.constant {value} : i64")
    w("%trans = arith.constant 84 : i8")
    w("%ta_t = arith.cmpi eq, %ta, %trans : i8")
    w("%sai = arith.select %ta_t, %c1, %lda : i64")  # element step between rows of op(A)
    w("%sak = arith.select %ta_t, %lda, %c1 : i64")  # and along k
    w("%f0 = arith.constant 0.0 : f32")
    w("%fresh = arith.cmpf oeq, %beta, %f0 : f32")  # beta = 0: C is not read (it may hold NaNs)
    w(f"%betav = vector.broadcast %beta : f32 to {_VEC}")
    w(f"%zero = arith.constant dense<0.0> : {_VEC}")
    for name in ("a", "b", "c"):
        w(f"%p{name} = llvm.inttoptr %{name} : i64 to !llvm.ptr")
    w(f"%nrem = arith.remsi %n, %c{width} : i64")
    w("%nfull = arith.subi %n, %nrem : i64")
    w(f"%mrem = arith.remsi %m, %c{ROWS} : i64")
    w("%mfull = arith.subi %m, %mrem : i64")
    j = w.fresh("j")
    w(f"scf.for {j} = %c0 to %nfull step %c{width} : i64 {{")
    _column_block(w, j, None)
    w("}")
    w("%tail = arith.cmpi sgt, %nrem, %c0 : i64")
    w("scf.if %tail {")
    w(f"%lanes = arith.constant dense<[{', '.join(str(x) for x in range(LANES))}]> : vector<{LANES}xi64>")
    w(f"%remv = vector.broadcast %nrem : i64 to vector<{LANES}xi64>")
    masks = []
    for v in range(VECTORS):
        lanes = w.op("l", f"arith.addi %lanes, {w.op('l', f'vector.broadcast %c{LANES * v} : i64 to vector<{LANES}xi64>')} : vector<{LANES}xi64>")
        masks.append(w.op("mask", f"arith.cmpi slt, {lanes}, %remv : vector<{LANES}xi64>"))
    _column_block(w, "%nfull", masks)
    w("}")
    w("return")
    w("}")
    return "\n".join(w.lines)
