"""`tidal-nan-semantics`: clamp/maximum/minimum propagate NaN as eager PyTorch does.

A torch-level rewrite, before any target sees the program: torch-mlir lowers these ops to
`cmpf` + `select`, which picks the bound or the other operand when an input is NaN.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.dialects.types import TensorSpec, tensor_spec
from tidal.passes.registry import ops_named, tidal_pass

_NAN_PROPAGATING = {
    # op: indices of the operands whose NaN must reach the result, as in eager PyTorch
    "torch.aten.clamp": (0,),
    "torch.aten.clamp.Tensor": (0,),
    "torch.aten.clamp_min": (0,),
    "torch.aten.clamp_max": (0,),
    "torch.aten.maximum": (0, 1),
    "torch.aten.minimum": (0, 1),
}


@tidal_pass(
    "tidal-nan-semantics",
    "Make clamp/maximum/minimum propagate NaN as eager PyTorch does (torch-mlir's cmp+select does not)",
)
def nan_semantics(module_op):
    """r = op(x, ...) becomes where(x != x, x, r) for each NaN-carrying float operand x.

    torch-mlir lowers these ops to `cmpf ult/ugt/ogt` + `select`, which picks the bound or the
    other operand when an input is NaN; eager PyTorch returns NaN. Patching at the torch level
    keeps user-written comparisons (`torch.where(x > 0, x, y)`) untouched.
    """
    for op in ops_named(module_op, _NAN_PROPAGATING):
        result = op.results[0]
        spec = tensor_spec(result.type)
        if spec is None or not spec.dtype.startswith(("f", "bf")):
            continue
        users_before = list(result.uses)
        value = result
        with ir.InsertionPoint.after(op), op.location:
            for i in reversed(_NAN_PROPAGATING[op.name]):
                x = op.operands[i]
                x_spec = tensor_spec(x.type)
                if x_spec is None or not x_spec.torch:
                    continue
                mask_type = TensorSpec(x_spec.shape, "i1", torch=True).to_type(x.type.context)
                # x != x is the NaN test torch-mlir lowers (cmpf une); aten.isnan is decomposed
                # into it earlier in the pipeline, so it no longer has a lowering here.
                mask = ir.Operation.create("torch.aten.ne.Tensor", results=[mask_type], operands=[x, x]).result
                value = ir.Operation.create(
                    "torch.aten.where.self", results=[result.type], operands=[mask, x, value]
                ).result
        if value is not result:
            for use in users_before:
                use.owner.operands[use.operand_number] = value
