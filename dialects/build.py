"""Helpers shared by the per-op builders."""

from __future__ import annotations

from typing import Callable, Sequence

from torch_mlir import ir

from tidal.dialects.registry import YIELD

BodyFn = Callable[..., Sequence[ir.Value]]


def i64_attr(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


def bool_attr(v: bool) -> ir.Attribute:
    return ir.BoolAttr.get(bool(v))


def build_yield(values: Sequence[ir.Value], loc: ir.Location | None = None) -> ir.Operation:
    return ir.Operation.create(YIELD, operands=list(values), loc=loc)


def create_region_op(
    name: str,
    *,
    results: Sequence[ir.Type],
    operands: Sequence[ir.Value],
    attributes: dict[str, ir.Attribute],
    region_arg_types: Sequence[Sequence[ir.Type]],
    bodies: Sequence[BodyFn] | None = None,
    loc: ir.Location | None = None,
) -> ir.Operation:
    """Create a tidal region op at the current insertion point, one entry block per region.

    With `bodies`, each body function is called on its block's arguments and must return the
    values to yield; without, the blocks are left empty for the caller (e.g. the importer) to fill
    and terminate with `build_yield`.
    """
    loc = loc or ir.Location.current
    op = ir.Operation.create(
        name,
        results=list(results),
        operands=list(operands),
        attributes=dict(attributes),
        regions=len(region_arg_types),
        loc=loc,
    )
    blocks = [
        region.blocks.append(*types, arg_locs=[loc] * len(types))
        for region, types in zip(op.regions, region_arg_types)
    ]
    if bodies is not None:
        for block, body in zip(blocks, bodies):
            with ir.InsertionPoint(block):
                build_yield(list(body(*block.arguments)), loc)
    return op
