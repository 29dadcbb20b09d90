"""`tidal-matmul-to-blas`: bufferized `linalg.matmul` (f32/f64) → a call into the BLAS in-process.

torch's CPU wheel carries MKL and exports its Fortran `sgemm_`/`dgemm_` from libtorch_cpu, which
is already loaded in every process that runs tidal; the JIT resolves the symbols from it. BLAS is
column-major, so the row-major C += A·B is computed as Cᵀ += Bᵀ·Aᵀ with the operands swapped.
A matmul BLAS cannot take as is (an operand whose inner stride is not 1, integer types) keeps its
loops.
"""

from __future__ import annotations

import itertools
import re

from torch_mlir import ir
from torch_mlir.dialects import arith, func, memref

from tidal.passes.registry import tidal_pass
from tidal.runtime import externs

_GEMM = {"f32": "sgemm_", "f64": "dgemm_"}
externs.require(*_GEMM.values())
_DEFAULT_MAPS = (
    "[affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, "
    "affine_map<(d0, d1, d2) -> (d0, d1)>]"
)

_SHIM = """
llvm.func @{gemm}(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr,
                  !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr)
func.func private @tidal_{gemm}rowmajor(%m: i64, %n: i64, %k: i64, %a: i64, %lda: i64, %b: i64,
                                        %ldb: i64, %c: i64, %ldc: i64) {{
  %one = llvm.mlir.constant(1 : i64) : i64
  %no_trans = llvm.mlir.constant(78 : i8) : i8
  %unit = llvm.mlir.constant(1.0 : {elt}) : {elt}
  %trans = llvm.alloca %one x i8 : (i64) -> !llvm.ptr
  llvm.store %no_trans, %trans : i8, !llvm.ptr
  %scale = llvm.alloca %one x {elt} : (i64) -> !llvm.ptr
  llvm.store %unit, %scale : {elt}, !llvm.ptr
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
  llvm.call @{gemm}(%trans, %trans, %pn, %pm, %pk, %scale, %pb, %pldb, %pa, %plda, %scale, %pc, %pldc)
      : (!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr,
         !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
  return
}}
"""


def _inner_stride_is_one(t: ir.Type) -> bool:
    text = str(t)
    m = re.search(r"strided<\[([^\]]*)\]", text)
    if m:
        return m.group(1).split(",")[-1].strip() == "1"
    return "affine_map" not in text  # no layout attribute: the identity (row-major) layout


def _as_i64(v: ir.Value) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), v).result


def _matrix(v: ir.Value):
    """(byte address as i64, leading dimension as i64, rows, cols) of a 2-D strided memref."""
    t = v.type
    md = memref.ExtractStridedMetadataOp(v)
    base = memref.ExtractAlignedPointerAsIndexOp(v).result
    elt_bytes = arith.ConstantOp(ir.IndexType.get(), t.element_type.width // 8).result
    offset_bytes = arith.MulIOp(md.offset, elt_bytes).result
    address = arith.AddIOp(base, offset_bytes).result
    return _as_i64(address), _as_i64(md.strides[0]), md.sizes[0], md.sizes[1]


def _ensure_shim(module_op, gemm: str, elt: str) -> str:
    name = f"tidal_{gemm}rowmajor"
    body = module_op.regions[0].blocks[0]
    for op in body.operations:
        if "sym_name" in op.operation.attributes and ir.StringAttr(op.operation.attributes["sym_name"]).value == name:
            return name
    shim = ir.Module.parse(_SHIM.format(gemm=gemm, elt=elt))
    for op in list(shim.body.operations):
        op.operation.move_before(body.operations[0]) if len(body.operations) else None
    return name


@tidal_pass("tidal-matmul-to-blas", "Replace bufferized f32/f64 linalg.matmul by in-process BLAS gemm calls")
def matmul_to_blas(module_op):
    matmuls = []

    def collect(op):
        if op.name == "linalg.matmul":
            matmuls.append(op.operation)
        return ir.WalkResult.ADVANCE

    module_op.walk(collect)
    for op in matmuls:
        maps = str(op.attributes["indexing_maps"]) if "indexing_maps" in op.attributes else _DEFAULT_MAPS
        if maps.replace(" ", "") != _DEFAULT_MAPS.replace(" ", ""):
            continue  # transposed/broadcast variants keep their loops
        a, b, c = op.operands
        if not all(isinstance(v.type, ir.MemRefType) and _inner_stride_is_one(v.type) for v in (a, b, c)):
            continue
        elt = str(c.type.element_type)
        if elt not in _GEMM or str(a.type.element_type) != elt or str(b.type.element_type) != elt:
            continue
        shim = _ensure_shim(module_op, _GEMM[elt], elt)
        with ir.InsertionPoint(op), op.location:
            pa, lda, m, k = _matrix(a)
            pb, ldb, _, n = _matrix(b)
            pc, ldc, _, _ = _matrix(c)
            func.CallOp([], ir.FlatSymbolRefAttr.get(shim), [_as_i64(m), _as_i64(n), _as_i64(k), pa, lda, pb, ldb, pc, ldc])
        op.erase()


# Elementwise fusion (`linalg-fuse-elementwise-ops`) folds the reshapes around a named contraction
# into it, generalizing it into a higher-rank generic that neither BLAS nor cuBLAS receives (a
# matmul of [T·B, H] views becomes naive loops). The contractions step aside while it runs: each
# moves into a holder module, an opaque placeholder keeps its operands and uses, and it comes back
# in the placeholder's place (with whatever operands fusion left it).
CONTRACTIONS = ("linalg.matmul", "linalg.batch_matmul", "linalg.matvec", "linalg.vecmat", "linalg.dot")
_hidden: dict[int, tuple] = {}
_hidden_ids = itertools.count(1)
_HIDDEN_ATTR = "tidal.hidden_contractions"


@tidal_pass("tidal-hide-contractions", "Move named contractions out of the way of elementwise fusion (see tidal-restore-contractions)")
def hide_contractions(module_op):
    from tidal.passes.registry import ops_named

    with module_op.context, module_op.location:
        holder = ir.Module.create()
        with ir.InsertionPoint(holder.body):
            anchor = ir.Operation.create("hidden.anchor")
        pairs = []
        for op in ops_named(module_op, CONTRACTIONS):
            with ir.InsertionPoint(op), op.location:
                placeholder = ir.Operation.create(
                    "hidden.contraction", results=[r.type for r in op.results], operands=list(op.operands)
                )
            for old, new in zip(op.results, placeholder.results):
                old.replace_all_uses_with(new)
            op.move_before(anchor)
            pairs.append((op, placeholder))
        key = next(_hidden_ids)
        _hidden[key] = (holder, anchor, pairs)
        module_op.attributes[_HIDDEN_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), key)


@tidal_pass("tidal-restore-contractions", "Put back the contractions tidal-hide-contractions moved aside")
def restore_contractions(module_op):
    if _HIDDEN_ATTR not in module_op.attributes:
        return
    key = ir.IntegerAttr(module_op.attributes[_HIDDEN_ATTR]).value
    del module_op.attributes[_HIDDEN_ATTR]
    _holder, _anchor, pairs = _hidden.pop(key)
    for op, placeholder in pairs:
        op.move_before(placeholder)
        for i, v in enumerate(placeholder.operands):
            op.operands[i] = v
        for old, new in zip(placeholder.results, op.results):
            old.replace_all_uses_with(new)
        placeholder.erase()
