"""`tidal-matmul-to-blas`: bufferized `linalg.matmul` (f32/f64) → a call into the BLAS in-process.

torch's CPU wheel carries MKL and exports its Fortran `sgemm_`/`dgemm_` from libtorch_cpu, which
is already loaded in every process that runs tidal; the JIT resolves the symbols from it. BLAS is
column-major, so the row-major C += A·B is computed as Cᵀ += Bᵀ·Aᵀ with the operands swapped.
A matmul BLAS cannot take as is (an operand whose inner stride is not 1, integer types) keeps its
loops. One whose inner strides are known only at run time (a nested scan's carry, read through a
view of unknown strides) branches on them: the call where they are 1, its loops elsewhere (the
loops ran a [64, 256]·[256, 1024] step ~30 ms, the call 0.1).
"""

from __future__ import annotations

import re

from torch_mlir import ir
from torch_mlir.dialects import arith, func, linalg, memref, scf, tensor

from tidal.passes.registry import defining_op, is_within, tidal_pass, values_read
from tidal.runtime import externs

_GEMM = {"f32": "sgemm_", "f64": "dgemm_"}
externs.require(*_GEMM.values())
# One BLAS call computes C = op(A)·op(B) + beta·C on row-major data. BLAS is column-major, so it
# gets Cᵀ = op(B)ᵀ·op(A)ᵀ with the operands swapped; a row-major matrix stored transposed is a
# column-major one to transpose ('T').
_SHIM = """
llvm.func @{gemm}(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr,
                  !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr)
func.func private @tidal_{gemm}rowmajor(%ta: i8, %tb: i8, %m: i64, %n: i64, %k: i64, %a: i64, %lda: i64,
                                        %b: i64, %ldb: i64, %beta: {elt}, %c: i64, %ldc: i64) {{
  %one = llvm.mlir.constant(1 : i64) : i64
  %unit = llvm.mlir.constant(1.0 : {elt}) : {elt}
  %pta = llvm.alloca %one x i8 : (i64) -> !llvm.ptr
  llvm.store %ta, %pta : i8, !llvm.ptr
  %ptb = llvm.alloca %one x i8 : (i64) -> !llvm.ptr
  llvm.store %tb, %ptb : i8, !llvm.ptr
  %scale = llvm.alloca %one x {elt} : (i64) -> !llvm.ptr
  llvm.store %unit, %scale : {elt}, !llvm.ptr
  %pbeta = llvm.alloca %one x {elt} : (i64) -> !llvm.ptr
  llvm.store %beta, %pbeta : {elt}, !llvm.ptr
  %pm = llvm.alloca %one x i32 : (i64) -> !llvm.ptr
  %pn = llvm.alloca %one x i32 : (i64) -> !llvm.ptr
  %pk = llvm.alloca %one x i32 : (i64) -> !llvm.ptr
  %plda = llvm.alloca %one x i32 : (i64) -> !llvm.ptr
  %pldb = llvm.alloca %one x i32 : (i64) -> !llvm.ptr
  %pldc = llvm.alloca %one x i32 : (i64) -> !llvm.ptr
  %m32 = llvm.trunc %m : i64 to i32
  %n32 = llvm.trunc %n : i64 to i32
  %k32 = llvm.trunc %k : i64 to i32
  %lda32 = llvm.trunc %lda : i64 to i32
  %ldb32 = llvm.trunc %ldb : i64 to i32
  %ldc32 = llvm.trunc %ldc : i64 to i32
  llvm.store %m32, %pm : i32, !llvm.ptr
  llvm.store %n32, %pn : i32, !llvm.ptr
  llvm.store %k32, %pk : i32, !llvm.ptr
  llvm.store %lda32, %plda : i32, !llvm.ptr
  llvm.store %ldb32, %pldb : i32, !llvm.ptr
  llvm.store %ldc32, %pldc : i32, !llvm.ptr
  %pa = llvm.inttoptr %a : i64 to !llvm.ptr
  %pb = llvm.inttoptr %b : i64 to !llvm.ptr
  %pc = llvm.inttoptr %c : i64 to !llvm.ptr
  llvm.call @{gemm}(%ptb, %pta, %pn, %pm, %pk, %scale, %pb, %pldb, %pa, %plda, %pbeta, %pc, %pldc)
      : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr,
         !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
  return
}}
"""
_NO_TRANS, _TRANS = 78, 84  # 'N', 'T'
_A_MAPS = {"affine_map<(d0,d1,d2)->(d0,d2)>": False, "affine_map<(d0,d1,d2)->(d2,d0)>": True}
_B_MAPS = {"affine_map<(d0,d1,d2)->(d2,d1)>": False, "affine_map<(d0,d1,d2)->(d1,d2)>": True}
_C_MAP = "affine_map<(d0,d1,d2)->(d0,d1)>"


_BATCH_A_MAPS = {"affine_map<(d0,d1,d2,d3)->(d0,d1,d3)>": False, "affine_map<(d0,d1,d2,d3)->(d0,d3,d1)>": True}
_BATCH_B_MAPS = {"affine_map<(d0,d1,d2,d3)->(d0,d3,d2)>": False, "affine_map<(d0,d1,d2,d3)->(d0,d2,d3)>": True}
_BATCH_C_MAP = "affine_map<(d0,d1,d2,d3)->(d0,d1,d2)>"


def _transposes(op, batched: bool = False) -> tuple[bool, bool] | None:
    """Whether the matmul (each entry of the batch matmul, the batch dim first everywhere) reads
    A and B transposed, from its indexing maps; None for maps BLAS cannot take (broadcasts)."""
    if "indexing_maps" not in op.attributes:
        return False, False
    a_maps, b_maps, c_map = (_BATCH_A_MAPS, _BATCH_B_MAPS, _BATCH_C_MAP) if batched else (_A_MAPS, _B_MAPS, _C_MAP)
    maps = [str(m).replace(" ", "") for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if maps[0] not in a_maps or maps[1] not in b_maps or maps[2] != c_map:
        return None
    return a_maps[maps[0]], b_maps[maps[1]]


def _inner_stride(t: ir.Type) -> str:
    """The inner stride of a memref type as written: "1", another number, or "?" (known at run
    time only)."""
    text = str(t)
    m = re.search(r"strided<\[([^\]]*)\]", text)
    if m:
        return m.group(1).split(",")[-1].strip()
    return "1" if "affine_map" not in text else "affine"  # no layout attribute: the identity (row-major) layout


def _as_i64(v: ir.Value) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), v).result


def _address(v: ir.Value, md, elements: ir.Value | None = None) -> ir.Value:
    """The byte address (i64) of `v`'s first element (`md`: its strided metadata), or of the one
    `elements` further on."""
    base = memref.ExtractAlignedPointerAsIndexOp(v).result
    elt_bytes = arith.ConstantOp(ir.IndexType.get(), v.type.element_type.width // 8).result
    at = md.offset if elements is None else arith.AddIOp(md.offset, elements).result
    return _as_i64(arith.AddIOp(base, arith.MulIOp(at, elt_bytes).result).result)


def _matrix(v: ir.Value):
    """(byte address as i64, leading dimension as i64, rows, cols) of a 2-D strided memref."""
    md = memref.ExtractStridedMetadataOp(v)
    return _address(v, md), _as_i64(md.strides[0]), md.sizes[0], md.sizes[1]


# Where tidal's own kernel serves f32 (`gemm_kernel.wanted()`), the shim sends every gemm there
# but one whose B is stored transposed with a k longer than its panel allows, which stays with BLAS,
# as does one read in a way none of the module's calls reads B (that variant is not emitted).
#
# A k past MAX_UNBLOCKED_K runs as chunks of K_CHUNK (C accumulating from the second on): the
# kernel does not block k, and the B panel of a long k ([32768, 32] for a weight's cotangent summed
# over T·B rows: 4 MiB) left L2 for every block of 8 rows of C (gemm_kernel.py: measured).
_DISPATCH = """
func.func private @tidal_sgemm_rowmajor(%ta: i8, %tb: i8, %m: i64, %n: i64, %k: i64, %a: i64, %lda: i64,
                                        %b: i64, %ldb: i64, %beta: f32, %c: i64, %ldc: i64) {{
  %c0 = arith.constant 0 : i64
  %c1 = arith.constant 1 : i64
  %bytes = arith.constant 4 : i64
  %chunk = arith.constant {k_chunk} : i64
  %unblocked = arith.constant {max_unblocked_k} : i64
  %long = arith.cmpi sgt, %k, %unblocked : i64
  scf.if %long {{
    %trans = arith.constant 84 : i8
    %ta_t = arith.cmpi eq, %ta, %trans : i8
    %tb_t = arith.cmpi eq, %tb, %trans : i8
    %a_step = arith.select %ta_t, %lda, %c1 : i64
    %b_step = arith.select %tb_t, %c1, %ldb : i64
    %accumulate = arith.constant 1.0 : f32
    scf.for %k0 = %c0 to %k step %chunk : i64 {{
      %left = arith.subi %k, %k0 : i64
      %kk = arith.minsi %left, %chunk : i64
      %first = arith.cmpi eq, %k0, %c0 : i64
      %beta_k = arith.select %first, %beta, %accumulate : f32
      %a_elems = arith.muli %k0, %a_step : i64
      %a_bytes = arith.muli %a_elems, %bytes : i64
      %a_k = arith.addi %a, %a_bytes : i64
      %b_elems = arith.muli %k0, %b_step : i64
      %b_bytes = arith.muli %b_elems, %bytes : i64
      %b_k = arith.addi %b, %b_bytes : i64
      func.call @tidal_sgemm_chunk(%ta, %tb, %m, %n, %kk, %a_k, %lda, %b_k, %ldb, %beta_k, %c, %ldc)
        : (i8, i8, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64) -> ()
    }}
  }} else {{
    func.call @tidal_sgemm_chunk(%ta, %tb, %m, %n, %k, %a, %lda, %b, %ldb, %beta, %c, %ldc)
      : (i8, i8, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64) -> ()
  }}
  return
}}

func.func private @tidal_sgemm_chunk(%ta: i8, %tb: i8, %m: i64, %n: i64, %k: i64, %a: i64, %lda: i64,
                                     %b: i64, %ldb: i64, %beta: f32, %c: i64, %ldc: i64) {{
  %no_trans = arith.constant 78 : i8
  %b_untransposed = arith.cmpi eq, %tb, %no_trans : i8
  %max_k = arith.constant {max_k} : i64
  %short_k = arith.cmpi sle, %k, %max_k : i64
  scf.if %b_untransposed {{
    {untransposed}
  }} else {{
    scf.if %short_k {{
      {transposed}
    }} else {{
      {blas}
    }}
  }}
  return
}}
"""
_KERNEL_CALL = """func.call @{kernel}(%ta, %m, %n, %k, %a, %lda, %b, %ldb, %beta, %c, %ldc)
        : (i8, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64) -> ()"""
_BLAS_CALL = """func.call @tidal_sgemm_blas(%ta, %tb, %m, %n, %k, %a, %lda, %b, %ldb, %beta, %c, %ldc)
        : (i8, i8, i64, i64, i64, i64, i64, i64, i64, f32, i64, i64) -> ()"""


def _shim_text(gemm: str, elt: str, b_transposed: frozenset = frozenset({False, True})) -> str:
    """The row-major gemm shim; for f32 with tidal's kernel wanted, its dispatch and the kernel's
    variants for the ways this module's calls read B (`b_transposed`)."""
    from tidal.backends.cpu import gemm_kernel

    blas = _SHIM.format(gemm=gemm, elt=elt)
    if elt != "f32" or not gemm_kernel.wanted():
        return blas
    blas = blas.replace(f"@tidal_{gemm}rowmajor(", "@tidal_sgemm_blas(", 1)
    kernel = {False: gemm_kernel.NAME, True: gemm_kernel.NAME_B_TRANSPOSED}
    call = {t: _KERNEL_CALL.format(kernel=kernel[t]) if t in b_transposed else _BLAS_CALL for t in (False, True)}
    dispatch = _DISPATCH.format(untransposed=call[False], transposed=call[True], blas=_BLAS_CALL,
                                max_k=gemm_kernel.MAX_PACKED_K, k_chunk=gemm_kernel.K_CHUNK,
                                max_unblocked_k=gemm_kernel.MAX_UNBLOCKED_K)
    return "\n".join([blas, gemm_kernel.kernel_text(frozenset(b_transposed)), dispatch])


def _symbols(block) -> set[str]:
    return {ir.StringAttr(op.operation.attributes["sym_name"]).value
            for op in block.operations if "sym_name" in op.operation.attributes}


def _ensure_shim(module_op, gemm: str, elt: str, b_transposed: frozenset) -> str:
    name = f"tidal_{gemm}rowmajor"
    body = module_op.regions[0].blocks[0]
    present = _symbols(body)
    if name in present:
        return name
    shim = ir.Module.parse(_shim_text(gemm, elt, b_transposed))
    for op in list(shim.body.operations):
        if ir.StringAttr(op.operation.attributes["sym_name"]).value not in present:  # a shared declaration
            op.operation.move_before(body.operations[0]) if len(body.operations) else None
    return name


def _zero_fills_before(matmuls) -> dict:
    """For each matmul (by operation) into C, the `linalg.fill` of zero into C that it follows
    when nothing between them touches C: the BLAS call may then overwrite C (beta = 0) and the fill
    goes. One pass over each block holding a matmul (an unrolled loop has thousands of them)."""
    blocks, fills = [], {}
    for op in matmuls:
        if not any(op.operation.block == b for b in blocks):
            blocks.append(op.operation.block)
    for block in blocks:
        last_fill: dict = {}  # buffer -> the zero fill into it that nothing has touched since
        for cand in block.operations:
            cand = cand.operation
            if cand.name in _BLAS_CONTRACTIONS:
                c = cand.operands[2]
                fills[cand] = last_fill.get(c)
            if cand.name == "linalg.fill":
                last_fill[cand.operands[1]] = cand if _is_zero(cand.operands[0]) else None
                continue
            if cand.name.endswith(".call"):
                last_fill.clear()  # a call may touch anything
                continue
            for v in values_read(cand):
                last_fill.pop(v, None)
    return fills


def _float_value(attr) -> float | None:
    try:
        return ir.FloatAttr(attr).value
    except ValueError:
        return None


_BLAS_CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul")


@tidal_pass("tidal-matmul-to-blas", "Replace bufferized f32/f64 linalg.matmul / batch_matmul by in-process BLAS gemm calls")
def matmul_to_blas(module_op):
    from tidal.passes.registry import ops_named

    calls = [(op, transposed) for op in ops_named(module_op, _BLAS_CONTRACTIONS)
             if (transposed := _blas_transposes(op)) is not None]
    zero_fills = _zero_fills_before([op for op, _ in calls])
    b_transposed = {}  # element type -> the ways its calls read B
    for op, transposed in calls:
        b_transposed.setdefault(str(op.operands[2].type.element_type), set()).add(transposed[1])
    for op, transposed in calls:
        batched = op.name == "linalg.batch_matmul"
        a, b, c = op.operands
        elt = str(c.type.element_type)
        shim = _ensure_shim(module_op, _GEMM[elt], elt, frozenset(b_transposed[elt]))
        zero_fill = zero_fills.get(op.operation)
        checked = [v for v in (a, b, c) if _inner_stride(v.type) == "?"]
        if checked:  # the call where every inner stride is 1 at run time, the loops elsewhere
            zero_fill = None  # the loops accumulate into the fill
            with ir.InsertionPoint(op), op.location:
                index = ir.IndexType.get()
                one = arith.ConstantOp(index, 1).result
                unit = None
                for v in checked:
                    md = memref.ExtractStridedMetadataOp(v)
                    is_one = arith.CmpIOp(arith.CmpIPredicate.eq, md.strides[-1], one).result
                    unit = is_one if unit is None else arith.AndIOp(unit, is_one).result
                branch = scf.IfOp(unit, has_else=True)
            with ir.InsertionPoint(branch.else_block), op.location:
                op.operation.clone()
                scf.YieldOp([])
            with ir.InsertionPoint(branch.then_block), op.location:
                scf.YieldOp([])
            site = branch.then_block.operations[0]
        else:
            site = op
        with ir.InsertionPoint(site), op.location:
            i8 = ir.IntegerType.get_signless(8)
            flags = [arith.ConstantOp(i8, _TRANS if t else _NO_TRANS).result for t in transposed]
            beta = arith.ConstantOp(c.type.element_type, 0.0 if zero_fill is not None else 1.0).result
            if batched:
                _batched_gemm(module_op, shim, flags, beta, a, b, c, transposed[0])
            else:
                pa, lda, a_rows, a_cols = _matrix(a)
                pb, ldb, b_rows, b_cols = _matrix(b)
                pc, ldc, _, _ = _matrix(c)
                m, k = (a_cols, a_rows) if transposed[0] else (a_rows, a_cols)
                n = b_rows if transposed[1] else b_cols
                func.CallOp([], ir.FlatSymbolRefAttr.get(shim),
                            [*flags, _as_i64(m), _as_i64(n), _as_i64(k), pa, lda, pb, ldb, beta, pc, ldc])
        op.erase()
        if zero_fill is not None:
            zero_fill.erase()


def _blas_transposes(op) -> tuple[bool, bool] | None:
    """How a matmul BLAS can run reads A and B (transposed or not); None for one that keeps its
    loops (a broadcast, a strided inner dim, an element type BLAS has no gemm for)."""
    transposed = _transposes(op, op.name == "linalg.batch_matmul")
    if transposed is None:
        return None
    a, b, c = op.operands
    if not all(isinstance(v.type, ir.MemRefType) and _inner_stride(v.type) in ("1", "?") for v in (a, b, c)):
        return None
    elt = str(c.type.element_type)
    if elt not in _GEMM or str(a.type.element_type) != elt or str(b.type.element_type) != elt:
        return None
    return transposed


def bmm_as_batch_matmul(call: ir.Operation) -> bool:
    """An `aten::bmm` ATen call on f32/f64 becomes `linalg.batch_matmul` into zeros (tensor level),
    which this pass turns into per-entry gemm calls after bufferization: no ATen tensors wrapped,
    no dispatcher, no copy of the result into the program's buffer. Returns whether it did."""
    if ir.StringAttr(call.attributes["callee"]).value != "aten::bmm" or len(call.operands) != 2:
        return False
    a, b = call.operands
    out = ir.RankedTensorType(call.results[0].type)
    elt = out.element_type
    if str(elt) not in _GEMM or any(str(ir.RankedTensorType(v.type).element_type) != str(elt) for v in (a, b)):
        return False
    index = ir.IndexType.get()
    with ir.InsertionPoint(call), call.location:
        sizes = [tensor.DimOp(v, arith.ConstantOp(index, d).result).result if out.is_dynamic_dim(i) else out.shape[i]
                 for i, (v, d) in enumerate(((a, 0), (a, 1), (b, 2)))]
        empty = tensor.EmptyOp(sizes, elt).result
        zeros = linalg.fill(arith.ConstantOp(elt, 0.0).result, outs=[empty])
        product = linalg.batch_matmul(a, b, outs=[zeros])
    call.results[0].replace_all_uses_with(product)
    call.erase()
    return True


# A batch of at least this many multiply-adds runs its entries on the thread team when more than
# one thread is allowed (below it, starting the team costs about what the split saves). MKL runs a
# gemm of an attention's sizes ([64, 32]·[32, 64]) on one thread whatever it is allowed, so the
# entries of a bmm are the parallelism: torch's own bmm splits them over its threads the same way.
PARALLEL_BATCH_MACS = 1 << 18


def _batched_gemm(module_op, shim: str, flags, beta, a, b, c, a_transposed: bool) -> None:
    """One gemm per batch entry: [B, M, K]·[B, K, N] → [B, M, N] (an entry of A or B may be
    stored transposed: `flags`), each operand's batch entry found from its strides (MKL's batched
    gemm is not in the Fortran API torch exports; per-entry calls of these sizes run as fast per
    FLOP). With more than one thread allowed and `PARALLEL_BATCH_MACS` of work, the entries are an
    `scf.forall` that `tidal-forall-to-threads` starts on the team, else a sequential loop."""
    from tidal.backends.cpu.threads import ensure_runtime_decl

    index = ir.IndexType.get()
    operands = (a, b, c)
    metadata = [memref.ExtractStridedMetadataOp(v) for v in operands]
    ma, mb, mc = metadata
    m, k, n = mc.sizes[1], ma.sizes[1] if a_transposed else ma.sizes[2], mc.sizes[2]
    batch = mc.sizes[0]

    def gemm(i):
        pa, pb, pc = (_address(v, md, arith.MulIOp(i, md.strides[0]).result) for v, md in zip(operands, metadata))
        func.CallOp([], ir.FlatSymbolRefAttr.get(shim), [*flags, _as_i64(m), _as_i64(n), _as_i64(k), pa,
                    _as_i64(ma.strides[1]), pb, _as_i64(mb.strides[1]), beta, pc, _as_i64(mc.strides[1])])

    zero, one = arith.ConstantOp(index, 0).result, arith.ConstantOp(index, 1).result
    max_threads = ensure_runtime_decl(module_op, "omp_get_max_threads")
    threads = arith.IndexCastOp(index, func.CallOp([ir.IntegerType.get_signless(32)], max_threads, []).result).result
    macs = arith.MulIOp(arith.MulIOp(batch, m).result, arith.MulIOp(n, k).result).result
    sgt = arith.CmpIPredicate.sgt
    parallel = arith.AndIOp(
        arith.AndIOp(arith.CmpIOp(sgt, threads, one).result, arith.CmpIOp(sgt, batch, one).result).result,
        arith.CmpIOp(arith.CmpIPredicate.sge, macs, arith.ConstantOp(index, PARALLEL_BATCH_MACS).result).result,
    ).result
    split = scf.IfOp(parallel, [], has_else=True)
    with ir.InsertionPoint(split.then_block):
        forall = scf.ForallOp([0], [batch], [1], [])
        with ir.InsertionPoint(forall.body):
            gemm(forall.induction_variables[0])
            scf.InParallelOp()
        scf.YieldOp([])
    with ir.InsertionPoint(split.else_block):
        loop = scf.ForOp(zero, batch, one, [])
        with ir.InsertionPoint(loop.body):
            gemm(loop.induction_variable)
            scf.YieldOp([])
        scf.YieldOp([])


def _maps(transpose_a: bool, transpose_b: bool) -> list:
    d0, d1, d2 = (ir.AffineDimExpr.get(i) for i in range(3))
    exprs = [[d2, d0] if transpose_a else [d0, d2], [d1, d2] if transpose_b else [d2, d1], [d0, d1]]
    return [ir.AffineMap.get(3, 0, e) for e in exprs]


def _producer(v: ir.Value, name: str):
    owner = v.owner
    return None if isinstance(owner, ir.Block) or owner.name != name else owner


def _is_zero(v: ir.Value) -> bool:
    """`v` is the float constant 0."""
    const = _producer(v, "arith.constant")
    return const is not None and _float_value(const.attributes["value"]) == 0.0


def _is_zero_fill(v: ir.Value) -> bool:
    fill = _producer(v, "linalg.fill")
    return fill is not None and _is_zero(fill.operands[0])


def _untransposed(v: ir.Value, batched: bool = False) -> tuple[ir.Value, bool]:
    """The matrix (each batch entry of the batch of matrices) `v` transposes (and True), or `v`
    itself (and False)."""
    t = _producer(v, "linalg.transpose")
    if t is not None and list(ir.DenseI64ArrayAttr(t.attributes["permutation"])) == ([0, 2, 1] if batched else [1, 0]):
        return t.operands[0], True
    return v, False


_LOOPS = ("scf.for", "scf.while", "scf.forall")


def _transposed_once(v: ir.Value, matmul) -> bool:
    """Whether `v` is the transpose of a matrix the loop around `matmul` does not change; the
    transpose is then moved before every loop it is invariant in (with its static init). A loop's
    matmul by an invariant weight read with BLAS's 'T' costs each step what its untransposed
    kernel does plus half again or more (MKL, [32,128]x[128,128]: NT 9.6 us, NN 6.0 us through
    torch; an RNN adjoint's dh·Uᵀ), where transposing the weight once is one copy per call."""
    t = _producer(v, "linalg.transpose")
    if t is None or list(ir.DenseI64ArrayAttr(t.attributes["permutation"])) != [1, 0]:
        return False
    loop = matmul.parent
    while loop is not None and loop.name not in _LOOPS:
        loop = loop.parent
    source, init = defining_op(t.operands[0]), _producer(t.operands[1], "tensor.empty")
    if loop is None or is_within(source, loop):
        return False
    while is_within(t, loop) and not is_within(source, loop):
        if init is None or len(init.operands):
            return False  # a dynamic init: left where it is, read with 'T'
        if is_within(init, loop):  # an init shared with an earlier hoisted transpose is there already
            init.move_before(loop)
        t.move_before(loop)
        outer = loop.parent
        while outer is not None and outer.name not in _LOOPS:
            outer = outer.parent
        if outer is None:
            break
        loop = outer
    return True


def _is_plain_add(op) -> bool:
    """`linalg.generic` computing out = x + y elementwise on two operands of one shape."""
    if op.name != "linalg.generic" or len(op.operands) != 3 or len(op.results) != 1:
        return False
    maps = ir.ArrayAttr(op.attributes["indexing_maps"])
    if not all(ir.AffineMapAttr(m).value.is_permutation and str(m) == str(maps[0]) for m in maps):
        return False
    if any("reduction" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
        return False
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    if len(ops) != 2 or ops[0].operation.name != "arith.addf" or ops[1].operation.name != "linalg.yield":
        return False
    args = list(body.arguments)
    return {ops[0].operands[0], ops[0].operands[1]} == {args[0], args[1]} and ops[1].operands[0] == ops[0].result


def _broadcast_matrix(v: ir.Value) -> ir.Value | None:
    """The matrix W when `v` is W repeated along a new leading dim (a linalg.generic that only
    copies W[i, j] to every v[b, i, j]), else None."""
    g = _producer(v, "linalg.generic")
    if g is None or len(g.operands) != 2:
        return None
    maps = [str(m).replace(" ", "") for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    if maps != ["affine_map<(d0,d1,d2)->(d1,d2)>", "affine_map<(d0,d1,d2)->(d0,d1,d2)>"]:
        return None
    body = g.regions[0].blocks[0]
    ops = list(body.operations)
    if len(ops) != 1 or ops[0].operands[0] != body.arguments[0]:
        return None
    return g.operands[0]


def _batch_by_one_matrix_as_matmul(op) -> None:
    """`batch_matmul(a, W repeated B times)` (a Linear on a 3-d input, as torch's attention
    in-projection traces: bmm by the expanded weight) becomes ONE matmul of a's [B·M, K] rows by
    W, viewed back as [B, M, N]: no B copies of W written on every call (12 MiB in a
    TransformerEncoderLayer) and one gemm of B·M rows instead of B gemms of M rows."""
    if _transposes(op, batched=True) != (False, False) or not isinstance(op.results[0].type, ir.RankedTensorType):
        return
    a, b, c = op.operands
    w = _broadcast_matrix(b)
    types = [ir.RankedTensorType(v.type) for v in (a, c)]
    if w is None or not all(t.has_static_shape for t in types):
        return
    (batch, m, k), (_, _, n) = types[0].shape, types[1].shape
    elt = types[1].element_type
    i64 = ir.IntegerType.get_signless(64)
    rows = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in dims]) for dims in ((0, 1), (2,))])
    with ir.InsertionPoint(op), op.location:
        flat_a = tensor.CollapseShapeOp(ir.RankedTensorType.get([batch * m, k], elt), a, rows).result
        flat_c = tensor.CollapseShapeOp(ir.RankedTensorType.get([batch * m, n], elt), c, rows).result
        product = linalg.matmul(flat_a, w, outs=[flat_c])
        out = tensor.expand_shape(op.results[0].type, product, rows, [], [batch, m, n])
    op.results[0].replace_all_uses_with(out)
    op.erase()


def _batch_maps(transpose_a: bool, transpose_b: bool) -> list:
    d0, d1, d2, d3 = (ir.AffineDimExpr.get(i) for i in range(4))
    exprs = [[d0, d3, d1] if transpose_a else [d0, d1, d3], [d0, d2, d3] if transpose_b else [d0, d3, d2], [d0, d1, d2]]
    return [ir.AffineMap.get(4, 0, e) for e in exprs]


def _rebuild(at, a, b, c, transposed, batched: bool = False):
    with ir.InsertionPoint(at), at.location:
        if batched:
            return linalg.batch_matmul(a, b, outs=[c], indexing_maps=_batch_maps(*transposed))
        return linalg.matmul(a, b, outs=[c], indexing_maps=_maps(*transposed))


@tidal_pass(
    "tidal-fold-into-matmul",
    "Fold transposed operands and accumulating adds into linalg.matmul, so that one BLAS call does them",
)
def fold_into_matmul(module_op):
    """`matmul(transpose(x), y)` reads x transposed (BLAS's 'T': no copy of x), unless a loop
    around the matmul leaves x unchanged (see `_transposed_once`); `acc + matmul(x, y)` into zeros becomes `matmul(x, y)` into acc
    (BLAS's beta = 1: an RNN adjoint's weight cotangents accumulate in place, with no zero fill
    and no extra pass over the sum)."""
    from tidal.passes.registry import ops_named

    for op in ops_named(module_op, ("linalg.batch_matmul",)):
        _batch_by_one_matrix_as_matmul(op)
    for op in ops_named(module_op, ("linalg.matmul", "linalg.batch_matmul")):
        batched = op.name == "linalg.batch_matmul"
        transposed = _transposes(op, batched)
        if transposed is None or not isinstance(op.results[0].type, ir.RankedTensorType):
            continue
        (a, flip_a), (b, flip_b) = ((v, False) if not batched and _transposed_once(v, op) else _untransposed(v, batched)
                                    for v in op.operands[:2])
        c = op.operands[2]
        ta, tb = transposed[0] != flip_a, transposed[1] != flip_b
        users = [u.owner for u in op.results[0].uses]
        accumulate = None
        if len(users) == 1 and _is_zero_fill(c) and _is_plain_add(users[0]):
            x, y = users[0].operands[0], users[0].operands[1]
            other = y if x == op.results[0] else x
            if other != op.results[0] and other.type == op.results[0].type:
                accumulate = (users[0], other)
        if (ta, tb) == transposed and accumulate is None:
            continue
        # the accumulator may be defined after the matmul, the operands always dominate the add
        replaced, init = accumulate if accumulate else (op, c)
        new = _rebuild(replaced, a, b, init, (ta, tb), batched)
        replaced.results[0].replace_all_uses_with(new)
        if accumulate:
            replaced.erase()
        op.erase()
