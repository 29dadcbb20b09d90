"""Per-op fallback on the GPU: an aten op whose lowering the Triton backend does not cover runs as
an ATen call on the current stream inside the GPU program (`tidal.aten_call`, the plan's
`_op_tidal_aten_call`), as the CPU backend does with what torch-mlir leaves unlowered, instead
of the whole graph running in eager.

Which aten op a linalg-level op came from is not known after lowering, so every aten op of the
torch-level module gets an origin tag in its location (a name location wrapping its own, which
the lowerings and fusions carry along and the diagnostics see through). When the plan refuses an
op (`TidalUnsupported`, an invalid kernel included), the aten ops named in its location become
ATen calls in a fresh copy of the torch-level module, and the lowering runs again.
"""

from __future__ import annotations

import re

from torch_mlir import ir

from tidal.conversion.aten_calls import OPERATOR, _NotEncodable, to_aten_call

_TAG = "tidal.origin"
_TAG_PATTERN = re.compile(r'"tidal\.origin(\d+)"')


def tag_origins(module: ir.Module) -> str:
    """Tag every aten op of `module` (a torch-level module, loop bodies included) with its
    origin, in place; returns the tagged module's text, the copy later attempts start from."""
    count = 0

    def visit(op):
        nonlocal count
        if op.name.startswith("torch.aten.") or op.name == OPERATOR:
            op.location = ir.Location.name(f"{_TAG}{count}", childLoc=op.location, context=op.context)
            count += 1
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return module.operation.get_asm(enable_debug_info=True)  # the locations are the point


def origins(location) -> set[int]:
    """The origin tags inside a (possibly fused) location."""
    return {int(m) for m in _TAG_PATTERN.findall(str(location))} if location is not None else set()


def with_aten_calls(text: str, context: ir.Context, tags: set[int]) -> tuple[ir.Module, set[int]]:
    """A copy of the tagged torch-level module in which the aten ops tagged `tags` are ATen
    calls, and the tags that became calls (an op whose call cannot be expressed, with a size
    computed at run time or a Scalar argument, stays as it is)."""
    module = ir.Module.parse(text, context)
    found = []

    def visit(op):
        if (op.name.startswith("torch.aten.") or op.name == OPERATOR) and origins(op.location) & tags:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    converted = set()
    for op in found:
        tag = origins(op.location)
        try:
            to_aten_call(op, scalars=True)
        except _NotEncodable:
            continue
        converted |= tag
    return module, converted
