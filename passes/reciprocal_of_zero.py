"""`tidal-reciprocal-of-zero`: `1 / 0` is infinity, as in eager PyTorch, not an abort.

torch-mlir lowers `aten.reciprocal` to a generic that asserts its input is nonzero (`cf.assert
... "unimplemented: tensor with zero element"`). On the CPU a failed `cf.assert` calls `abort()`:
`torch.reciprocal` of a tensor holding a zero killed the Python process, where eager returns inf.
The check also costs: a BatchNorm's `1 / sqrt(var + eps)` is a reciprocal, and once elementwise
fusion folds it into the ops over the activation, the assert (with its sqrt) ran once per
activation element, in a loop of its own: 4 extra passes over the tensor per BatchNorm.

The assert goes; the division it guarded stays, and gives +-inf (or NaN) exactly as eager does.
Runs at linalg level, right after torch-mlir's lowering.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.passes.registry import ops_named, tidal_pass

MESSAGE = "unimplemented: tensor with zero element"


@tidal_pass("tidal-reciprocal-of-zero", "Drop torch-mlir's nonzero assert in aten.reciprocal's lowering (1/0 is inf, as in eager)")
def reciprocal_of_zero(module_op):
    for op in ops_named(module_op, ("cf.assert",)):
        if ir.StringAttr(op.attributes["msg"]).value == MESSAGE:
            op.erase()
