"""`tidal-vectorize`: small 1-D elementwise linalg ops → `vector` dialect code, before bufferization.

Lowered to loops, a small linalg op (a 16-channel step of a scan body) becomes a scalar loop
whose loads and stores LLVM cannot reorder or vectorize (every memref may alias every other), so
a loop step costs tens of scalar instructions per element. MLIR's structured vectorization (the
transform dialect's `structured.vectorize` on the ops `_elementwise_static` marks, then the
patterns folding slices into vector transfers) turns each such op into whole vector reads,
arithmetic and writes; every other op keeps its loops (linear recurrence, T=131072: 5.2 → 0.86 ms).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects.transform import interpreter

from tidal.passes.registry import tidal_pass

_MARK = "tidal.vectorize"
MAX_VECTOR_ELEMENTS = 1024
_SCALAR_ONLY = {"math.fpowi", "math.ipowi"}


# Elementwise 1-D generics only: matmuls stay whole for `tidal-matmul-to-blas`, and reductions keep
# their loops (their vector form needs multi-reduction lowerings this pipeline does not run).
_SCRIPT = """
module attributes {transform.with_named_sequence} {
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
    %ops = transform.structured.match attributes{tidal.vectorize} in %root : (!transform.any_op) -> !transform.any_op
    transform.structured.vectorize %ops : !transform.any_op
    %funcs = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    transform.apply_patterns to %funcs {
      transform.apply_patterns.tensor.fold_tensor_subset_ops_into_vector_transfers
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } : !transform.any_op
    transform.yield
  }
}
"""


def _elementwise_static(op) -> bool:
    if op.name != "linalg.generic":
        return False
    if any("parallel" not in str(t) for t in op.attributes["iterator_types"]):
        return False
    values = list(op.operands) + list(op.results)
    if not all(isinstance(v.type, ir.RankedTensorType) and v.type.has_static_shape for v in values):
        return False
    # One-dimensional, same-shaped operands only (identity maps): broadcasts of 0-d operands and
    # multi-dimensional vectors need vector lowerings (transfer broadcasts, n-D extracts) this
    # pipeline does not run; the per-step slices of a scan over channels are of this kind.
    if any(v.type.rank != 1 or v.type.shape != values[0].type.shape for v in values):
        return False
    # A vector of i1 is stored as packed bits, a memref of i1 holds a byte per element: the
    # vector form of a boolean result writes the wrong bytes (found by the corpus gradients).
    if any(str(v.type.element_type) == "i1" for v in values):
        return False
    # Large vectors blow up LLVM's compile time (one op per register-sized piece, unrolled);
    # large ops are left to the loop vectorizer.
    if values[0].type.shape[0] > MAX_VECTOR_ELEMENTS:
        return False
    # vector<0xf32> is not a type: the transform fails on an op with no elements
    if values[0].type.shape[0] == 0:
        return False
    # Scalar arithmetic on the block arguments only: a body that indexes (linalg.index,
    # tensor.extract: flip, gather) is not a plain vector computation.
    # math.fpowi/ipowi: LLVM's powi takes a scalar exponent only.
    body = op.regions[0].blocks[0]
    return all((o.name.split(".")[0] in ("arith", "math") and o.name not in _SCALAR_ONLY) or o.name == "linalg.yield"
               for o in body.operations)


@tidal_pass("tidal-vectorize", "Vectorize elementwise linalg.generic ops of static shape (transform dialect), before bufferization")
def vectorize(module_op):
    marked = []

    def mark(op):
        if _elementwise_static(op):
            op.attributes[_MARK] = ir.UnitAttr.get()
            marked.append(op)
        return ir.WalkResult.ADVANCE

    module_op.walk(mark)
    if not marked:
        return
    script = ir.Module.parse(_SCRIPT)
    interpreter.apply_named_sequence(module_op, script.body.operations[0], script)


@tidal_pass("tidal-scalarize-0d", "Compute 0-d elementwise linalg.generic ops on scalars (no 0-d buffers)")
def scalarize_0d(module_op):
    """A generic over 0-d tensors (a loop counter's `i + 1`, a predicate `i < n`) becomes its body's
    scalar ops between `tensor.extract` and `tensor.from_elements`. Bufferized, each such op
    allocates a one-element buffer, every loop iteration; as scalars, next to carries that travel
    in registers (`tidal.while`'s lowering), the extract/from_elements pairs fold away."""
    from torch_mlir.dialects import tensor

    from tidal.passes.registry import ops_named

    for op in ops_named(module_op, ("linalg.generic",)):
        values = [*op.operands, *op.results]
        if len(op.attributes["iterator_types"]) or not all(
            isinstance(v.type, ir.RankedTensorType) and v.type.rank == 0 for v in values
        ):
            continue
        body = op.regions[0].blocks[0]
        if any(inner.name == "linalg.index" for inner in body.operations):
            continue
        with ir.InsertionPoint(op), op.location:
            for arg, v in zip(body.arguments, op.operands):
                if list(arg.uses):
                    arg.replace_all_uses_with(tensor.extract(v, []))
            *inner_ops, terminator = list(body.operations)
            for inner in inner_ops:
                inner.move_before(op)
            results = [tensor.from_elements(r.type, [v]) for r, v in zip(op.results, terminator.operands)]
        for old, new in zip(op.results, results):
            old.replace_all_uses_with(new)
        op.erase()


_REASSOCIABLE = ("arith.addf", "arith.mulf")


@tidal_pass(
    "tidal-reassociate-reductions",
    "Let float sums and products of linalg reductions be reassociated (fastmath reassoc), so LLVM vectorizes them",
)
def reassociate_reductions(module_op):
    """A float reduction loop (a softmax's sum, a layer norm's mean) is a chain of adds LLVM may not
    reorder, so it stays scalar: one add per element, each waiting for the last. With `reassoc`
    on the reduction body's adds and multiplies it becomes vector partial sums combined at the end,
    which is how eager's reductions sum too (the order of a float sum is not part of its contract)."""
    from tidal.passes.registry import ops_named

    flag = ir.Attribute.parse("#arith.fastmath<reassoc>")
    for op in ops_named(module_op, ("linalg.generic",)):
        if not any("reduction" in str(t) for t in ir.ArrayAttr(op.attributes["iterator_types"])):
            continue
        for inner in op.regions[0].blocks[0].operations:
            if inner.operation.name in _REASSOCIABLE:
                inner.operation.attributes["fastmath"] = flag
