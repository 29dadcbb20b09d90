"""torch dialect → linalg/tensor/arith/math, with tidal region ops present.

torch-mlir's own passes do the aten lowering and reach into tidal regions (they see unknown ops
with regions and leave them alone, converting the ops inside). What they cannot do is retype the
tidal ops themselves: `tidal-retype` converts every `!torch.vtensor` operand, result and block
argument of a tidal op to the matching builtin tensor, bridging with `torch_c` casts that
canonicalization folds away. `tidal-backend-contract` then replaces torch-mlir's
`torch-verify-linalg-on-tensors-backend-contract`, which rejects unknown ops by design.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.diagnostics import TidalError, TidalUnsupported
from tidal.dialects import YIELD, op_names
from tidal.dialects.types import TensorSpec, tensor_spec
from tidal.passes.registry import tidal_pass, tidal_pipeline

TO_BUILTIN = "torch_c.to_builtin_tensor"
FROM_BUILTIN = "torch_c.from_builtin_tensor"


def builtin_tensor_type(t: ir.Type) -> ir.Type | None:
    """`!torch.vtensor<[3,?],si64>` → `tensor<3x?xi64>` (dynamic dims kept); None if not a vtensor."""
    spec = tensor_spec(t)
    if spec is None or not spec.torch:
        return None
    dtype = spec.dtype
    if dtype.startswith(("si", "ui")):
        dtype = "i" + dtype[2:]
    return TensorSpec(spec.shape, dtype, torch=False).to_type(t.context)


def _cast(kind: str, value: ir.Value, to: ir.Type, loc) -> ir.Value:
    return ir.Operation.create(kind, results=[to], operands=[value], loc=loc).result


def _cast_operands(op: ir.Operation, loc) -> None:
    """Cast each torch-typed operand of `op` to builtin right before it."""
    with ir.InsertionPoint(op):
        for i, v in enumerate(list(op.operands)):
            bt = builtin_tensor_type(v.type)
            if bt is not None:
                op.operands[i] = _cast(TO_BUILTIN, v, bt, loc)


def _retype_value(value: ir.Value, insertion_point: ir.InsertionPoint, loc) -> None:
    """Give `value` its builtin type; its remaining torch-typed users get a cast back."""
    torch_type = value.type
    bt = builtin_tensor_type(torch_type)
    if bt is None:
        return
    value.set_type(bt)
    if list(value.uses):
        with insertion_point:
            back = ir.Operation.create(FROM_BUILTIN, results=[torch_type], operands=[value], loc=loc)
        value.replace_all_uses_except(back.result, back)


def _retype_op(op: ir.Operation) -> None:
    loc = op.location
    _cast_operands(op, loc)
    for region in op.regions:
        for block in region.blocks:
            for arg in block.arguments:
                _retype_value(arg, ir.InsertionPoint.at_block_begin(block), loc)
            ops = list(block.operations)
            if ops and ops[-1].name == YIELD:
                _cast_operands(ops[-1], loc)
    for r in op.results:
        _retype_value(r, ir.InsertionPoint.after(op), loc)


def _collect(root, names) -> list[ir.Operation]:
    found = []

    def visit(op):
        if op.name in names:
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


@tidal_pass("tidal-retype", "Retype tidal ops from !torch.vtensor to builtin tensors (torch_c casts at the edges)")
def retype(module_op):
    for op in _collect(module_op, set(op_names())):
        _retype_op(op)


@tidal_pass(
    "tidal-check-supported",
    "Refuse, with a located error, what would crash or differ from eager in native code",
)
def check_supported(module_op):
    """Run before torch-mlir's conversions, which crash on some inputs instead of failing.

    - 8-bit integer tensors: convert-torch-to-linalg aborts the process on si8/ui8 arithmetic.
    (Integer division, which would trap on a zero divisor, is made safe by tidal-integer-division
    and tidal-guard-integer-division.)
    """
    problems: list[TidalUnsupported] = []

    def visit(op):
        for v in list(op.results) + list(op.operands):
            spec = tensor_spec(v.type)
            if spec is not None and spec.dtype in ("si8", "ui8"):
                problems.append(TidalUnsupported(
                    f"'{op.name}' op works on 8-bit integer tensors ({v.type}), which torch-mlir's "
                    f"lowering does not handle", op.location))
                return ir.WalkResult.ADVANCE
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    if problems:
        raise problems[0]


@tidal_pass(
    "tidal-check-torch-lowered",
    "Fail on the first aten/prims op torch-mlir's conversions left behind, naming it and its source",
)
def check_torch_lowered(module_op):
    left: list = []

    def visit(op):
        if op.name.startswith(("torch.aten.", "torch.prims.", "torch.prim.")) and op.name != "torch.prim.ListConstruct":
            left.append(op)
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    if left:
        op = left[0]
        notes = (f"and {len(left) - 1} more op(s) were not lowered",) if len(left) > 1 else ()
        raise TidalUnsupported(
            f"'{op.name}' op has no lowering to linalg in torch-mlir (types: "
            f"{', '.join(str(v.type) for v in op.operands)} -> {', '.join(str(r.type) for r in op.results)})",
            op.location,
            notes,
        )


ALLOWED_DIALECTS = ("builtin", "func", "linalg", "tensor", "arith", "math", "scf", "tm_tensor", "tidal")
# Runtime checks torch-mlir emits (e.g. index bounds) lower to LLVM as they are.
ALLOWED_OPS = ("cf.assert",)


@tidal_pass(
    "tidal-backend-contract",
    "Check that only linalg/tensor/arith/math/scf/tm_tensor/func/tidal ops and builtin types remain",
)
def backend_contract(module_op):
    errors: list[TidalError] = []

    def visit(op):
        name = op.name
        dialect = name.split(".", 1)[0]
        if dialect not in ALLOWED_DIALECTS and name not in ALLOWED_OPS:
            hint = (
                "torch-mlir could not lower this op to linalg"
                if dialect in ("torch", "torch_c")
                else f"the '{dialect}' dialect is outside tidal's tensor-level contract"
            )
            errors.append(TidalUnsupported(f"'{name}' op remains after lowering to linalg: {hint}", op.location))
            return ir.WalkResult.ADVANCE
        for v in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.arguments]:
            if str(v.type).startswith("!torch."):
                errors.append(
                    TidalUnsupported(f"'{name}' op still has a torch-typed value ({v.type})", op.location)
                )
                break
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    if errors:
        first = errors[0]
        if len(errors) > 1:
            first = TidalUnsupported(first.message, first.loc, (f"and {len(errors) - 1} more op(s) like it",))
        raise first


# torchdynamo-export-to-torch-backend-pipeline, minus its leading `inline`: MLIR treats an
# unregistered op with ONE region as a potential symbol table, and the inliner's symbol walk
# crashes (SIGSEGV in SymbolRefAttr::getRootReference) on tidal.scan/map/associative_scan. tidal's
# importer never emits calls (subgraphs become regions), so there is nothing to inline.
TORCH_BACKEND_PASSES = (
    "tidal-empty-tensors, tidal-negative-pads, tidal-integer-division, tidal-aten-calls, func.func(torch-match-quantized-custom-ops), "
    "func.func(canonicalize, torch-reduce-op-variants, canonicalize, torch-decompose-complex-ops, torch-recompose-complex-ops, "
    "canonicalize), tidal-negative-pads, tidal-index-bounds, tidal-nan-semantics, tidal-fold-reversals, tidal-scan-contractions"
)
# torch-backend-to-linalg-on-tensors-backend-pipeline without its last two passes (the finalizing
# type conversion needs tidal-retype first; the contract check rejects tidal ops).
LINALG_PASSES = (
    "tidal-check-supported, tidal-empty-tensors, func.func(torch-restructure-non-constant-axes), func.func(torch-fuse-quantized-ops), "
    "func.func(convert-torch-to-tmtensor), func.func(canonicalize), func.func(convert-torch-to-linalg), "
    "func.func(canonicalize), func.func(convert-torch-to-scf), func.func(convert-torch-to-arith), "
    "func.func(convert-torch-to-tensor), tidal-aten-calls{leftovers=1}, tidal-check-torch-lowered, convert-torch-conversion-to-mlprogram, "
    "func.func(memref-expand), func.func(canonicalize), func.func(resolve-shaped-type-result-dims), "
    "func.func(cse), torch-func-backend-type-conversion, func.func(canonicalize)"
)

TORCH_SIMPLIFY = tidal_pipeline(
    "tidal-torch-simplify",
    "torch-level cleanup (op variants, decompositions) with tidal ops present",
    TORCH_BACKEND_PASSES,
)
_SIMPLIFIED_TO_LINALG = (
    f"{LINALG_PASSES}, tidal-reciprocal-of-zero, tidal-guard-integer-division, tidal-retype, canonicalize, "
    "func.func(torch-finalizing-backend-type-conversion), lower-affine, canonicalize, tidal-backend-contract"
)
TORCH_TO_LINALG_FROM_SIMPLIFIED = tidal_pipeline(
    "tidal-torch-to-linalg-from-simplified",
    "the second half of tidal-torch-to-linalg: simplified torch IR → linalg level",
    _SIMPLIFIED_TO_LINALG,
)
TORCH_TO_LINALG = tidal_pipeline(
    "tidal-torch-to-linalg",
    "torch dialect + tidal ops → linalg/tensor/arith/math + tidal ops on builtin tensors",
    "tidal-torch-simplify, tidal-torch-to-linalg-from-simplified",
)
