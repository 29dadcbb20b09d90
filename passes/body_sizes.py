"""`tidal-hoist-body-sizes`: a size read inside a `linalg.generic` body is read once, before it.

torch-mlir lowers a broadcast with a dynamic size to a gather-style generic whose body reads the
source's size (`tensor.dim %src, %c0`, to select index 0 where that size is 1) at every point. The
size is the same at every point; inside the body it is a tensor read that neither the GPU kernel
builder nor the batching of a region (conversion/batching.py) can carry, outside it is one index
scalar the body captures. A `tensor.dim` whose source and index are both defined above the generic
moves in front of it (its constant index with it).
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass


def _defined_above(value: ir.Value, generic: ir.Operation) -> bool:
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner
    while op is not None:
        if op == generic:
            return False
        op = op.parent
    return True


@tidal_pass("tidal-hoist-body-sizes", "Move a tensor.dim of a captured tensor out of a linalg.generic body")
def hoist_body_sizes(module_op):
    for dim in ops_named(module_op, ("tensor.dim",)):
        generic = dim.parent
        while generic is not None and generic.name != "linalg.generic":
            generic = generic.parent
        if generic is None or not _defined_above(dim.operands[0], generic):
            continue
        index = dim.operands[1]
        if not _defined_above(index, generic):
            if not (isinstance(index, ir.OpResult) and index.owner.name == "arith.constant"):
                continue  # a dim chosen by the body
            index.owner.move_before(generic)
        dim.move_before(generic)
