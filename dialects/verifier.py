"""Module-wide verification of tidal ops.

MLIR cannot verify unregistered ops, so this runs after import, after parsing in `tidal-opt`, and
after every pass. Besides each op's own rule (see its registration entry) it enforces two things
no single op can see: `tidal.yield` only terminates tidal regions, and tidal regions are isolated
from above (every value a body uses comes in as a block argument).
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.diagnostics import TidalVerifyError
from tidal.dialects.registry import YIELD, op_entry, op_names, region_op_names


def _scope_op(value: ir.Value):
    """The op whose region directly contains the definition of `value`."""
    if isinstance(value, ir.BlockArgument):
        return value.owner.owner
    return value.owner.operation.parent


def _defined_inside(value: ir.Value, region_op) -> bool:
    scope = _scope_op(value)
    while scope is not None:
        if scope == region_op:
            return True
        scope = scope.parent
    return False


def _verify_yield(op, parent):
    if parent is None or parent.name not in region_op_names():
        where = f"'{parent.name}'" if parent is not None else "the top level"
        raise TidalVerifyError(
            f"'{YIELD}' op must terminate a region of a tidal op "
            f"({', '.join(region_op_names())}), but its parent is {where}",
            op.location,
        )
    block_ops = list(op.block.operations) if hasattr(op, "block") else None
    if block_ops is not None and block_ops[-1] != op:
        raise TidalVerifyError(f"'{YIELD}' op must be the last operation in its block", op.location)


def verify_module(root) -> list[TidalVerifyError]:
    """All tidal rule violations under `root`, in source order (empty when valid)."""
    errors: list[TidalVerifyError] = []
    tidal_ops = set(region_op_names())
    stack = [(root.operation, None)]
    while stack:
        op, enclosing = stack.pop()
        name = op.name
        try:
            if name == YIELD:
                _verify_yield(op, op.parent)
            elif name.startswith("tidal."):
                entry = op_entry(name)
                if entry is None:
                    raise TidalVerifyError(
                        f"unknown tidal op '{name}' (known: {', '.join(sorted(op_names()))}, {YIELD})",
                        op.location,
                    )
                entry.verify(op)
            if enclosing is not None:
                for i, v in enumerate(op.operands):
                    if not _defined_inside(v, enclosing):
                        raise TidalVerifyError(
                            f"'{name}' op operand #{i} uses a value defined outside the enclosing "
                            f"'{enclosing.name}': tidal regions are isolated from above, so pass "
                            f"the value in as an operand of the '{enclosing.name}'",
                            op.location,
                        )
        except TidalVerifyError as e:
            errors.append(e)
        inner = op if name in tidal_ops else enclosing
        for region in reversed(list(op.regions)):
            for block in reversed(list(region.blocks)):
                for child in reversed(list(block.operations)):
                    stack.append((child.operation, inner))
    errors.sort(key=lambda e: (e.loc.file, e.loc.line, e.loc.col) if e.loc else ("", 0, 0))
    return errors


def check_module(root) -> None:
    """Raise the first tidal verification error under `root`, if any."""
    errors = verify_module(root)
    if errors:
        raise errors[0]
