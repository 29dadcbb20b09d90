"""Checks that raise eager's error from compiled code: `if flag: <the eager operator>(...)`.

Where eager raises on bad values (a zero integer divisor, an index out of range) and the lowered
code cannot (native code has no exceptions; a failed `cf.assert` aborts the process), tidal calls
the same ATen operator on operands that make it raise eager's own error, under a `torch.prim.If`
on the bad condition; the error reaches the caller after the compiled function returns
(`tidal.runtime.errors`). The code after the check must stay safe with the bad values (divide by
1, read index 0): it runs on until the function returns.

The call is marked `tidal.error_check`. Eager CUDA does not check what eager CPU checks (no zero
divisor check; a bad index is a device-side assert, which poisons the CUDA context), so the GPU
backend drops the checks (`tidal-drop-error-checks`) and keeps the safe values.
"""

from __future__ import annotations

from collections.abc import Callable

from torch_mlir import ir

from tidal.dialects.aten_call import NAME as ATEN_CALL
from tidal.passes.registry import ops_named, tidal_pass

ERROR_CHECK = "tidal.error_check"  # unit attribute of an ATen call that raises eager's error


def raise_if(flag: ir.Value, make_call: Callable[[], ir.Operation]) -> ir.Operation:
    """`torch.prim.If flag { make_call() }` at the current insertion point; `flag` is a
    `!torch.bool`, `make_call` builds the raising `tidal.aten_call` (returned, marked)."""
    guard = ir.Operation.create("torch.prim.If", results=[], operands=[flag], regions=2)
    for region in guard.regions:
        region.blocks.append()
    with ir.InsertionPoint(guard.regions[0].blocks[0]):
        call = make_call()
        call.attributes[ERROR_CHECK] = ir.UnitAttr.get()
        ir.Operation.create("torch.prim.If.yield", results=[], operands=[])
    with ir.InsertionPoint(guard.regions[1].blocks[0]):
        ir.Operation.create("torch.prim.If.yield", results=[], operands=[])
    return call


@tidal_pass("tidal-drop-error-checks", "Drop the ATen calls that raise eager CPU's errors (eager CUDA does not check those)")
def drop_error_checks(module_op):
    for op in ops_named(module_op, (ATEN_CALL,)):
        if ERROR_CHECK in op.attributes:
            op.erase()
