"""Shared structural checks used by the per-op verifiers.

Messages follow one shape: `'tidal.scan' op <what>: expected <type> but got <type>` so that a user
can find the operand/result/block argument by position.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.diagnostics import TidalVerifyError
from tidal.dialects.registry import YIELD
from tidal.dialects.types import TensorSpec, dims_compatible, tensor_spec


class OpChecker:
    def __init__(self, op):
        self.op = op.operation
        self.name = self.op.name

    def fail(self, message: str):
        raise TidalVerifyError(f"'{self.name}' op {message}", self.op.location)

    # -- attributes -------------------------------------------------------------------------
    def int_attr(self, attr: str, lo: int = 0, hi: int | None = None) -> int:
        if attr not in self.op.attributes:
            self.fail(f"requires integer attribute '{attr}'")
        a = self.op.attributes[attr]
        if not isinstance(a, ir.IntegerAttr) or isinstance(a, ir.BoolAttr):
            self.fail(f"attribute '{attr}' must be an integer attribute (e.g. 1 : i64), got {a}")
        v = a.value
        if v < lo or (hi is not None and v > hi):
            bound = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
            self.fail(f"attribute '{attr}' = {v} is out of range: must be {bound}")
        return v

    def bool_attr(self, attr: str, default: bool | None = None) -> bool:
        if attr not in self.op.attributes:
            if default is not None:
                return default
            self.fail(f"requires bool attribute '{attr}'")
        a = self.op.attributes[attr]
        if not isinstance(a, ir.BoolAttr):
            self.fail(f"attribute '{attr}' must be a bool attribute (true/false), got {a}")
        return a.value

    # -- regions ----------------------------------------------------------------------------
    def entry_blocks(self, names: list[str]) -> list[ir.Block]:
        regions = list(self.op.regions)
        if len(regions) != len(names):
            self.fail(f"expects {len(names)} region(s) ({', '.join(names)}) but has {len(regions)}")
        blocks = []
        for name, region in zip(names, regions):
            bs = list(region.blocks)
            if len(bs) != 1:
                self.fail(f"{name} region must have exactly one block, has {len(bs)}")
            blocks.append(bs[0])
        return blocks

    def block_args(self, block: ir.Block, region: str, expected: list[tuple[str, ir.Type]]):
        args = list(block.arguments)
        if len(args) != len(expected):
            self.fail(
                f"{region} region takes {len(args)} block argument(s) but expects {len(expected)} "
                f"({', '.join(w for w, _ in expected) or 'none'})"
            )
        for i, (arg, (what, ty)) in enumerate(zip(args, expected)):
            if arg.type != ty:
                self.fail(
                    f"{region} region block argument #{i} ({what}) has type {arg.type} "
                    f"but expected {ty}"
                )

    def terminator(self, block: ir.Block, region: str):
        ops = list(block.operations)
        if not ops or ops[-1].name != YIELD:
            self.fail(f"{region} region must end with '{YIELD}'")
        return ops[-1]

    def yielded(self, block: ir.Block, region: str, expected: list[tuple[str, ir.Type]]):
        y = self.terminator(block, region)
        values = list(y.operands)
        if len(values) != len(expected):
            self.fail(
                f"{region} region yields {len(values)} value(s) but expects {len(expected)} "
                f"({', '.join(w for w, _ in expected) or 'none'})"
            )
        for i, (v, (what, ty)) in enumerate(zip(values, expected)):
            if v.type != ty:
                self.fail(f"{region} region yield #{i} ({what}) has type {v.type} but expected {ty}")
        return values

    # -- tensor operands ----------------------------------------------------------------------
    def ranked(self, value_type: ir.Type, what: str) -> TensorSpec:
        spec = tensor_spec(value_type)
        if spec is None:
            self.fail(f"{what} must be a ranked tensor, got {value_type}")
        return spec

    def scanned_length(self, xs: list[ir.Value], dim: int, first_index: int, what: str):
        """Common size of `dim` over all xs (None if all dynamic); checks rank and agreement."""
        length = None
        first = None
        for i, x in enumerate(xs):
            spec = self.ranked(x.type, f"operand #{first_index + i} ({what}[{i}])")
            if dim >= spec.rank:
                self.fail(
                    f"dim = {dim} is out of range for operand #{first_index + i} ({what}[{i}]) "
                    f"of type {x.type} (rank {spec.rank})"
                )
            size = spec.shape[dim]
            if size == 0:
                self.fail(f"operand #{first_index + i} ({what}[{i}]) has an empty scanned dim {dim}")
            if not dims_compatible(length, size):
                self.fail(
                    f"{what} disagree on the size of scanned dim {dim}: operand #{first} has "
                    f"{xs[first - first_index].type} but operand #{first_index + i} has {x.type}"
                )
            if size is not None and length is None:
                length, first = size, first_index + i
            elif first is None:
                first = first_index + i
        return length

    def stacked_result(self, result: ir.Value, index: int, y_t: ir.Type, dim: int, length, what: str):
        """`result` must be `y_t` stacked along `dim` with `length` entries."""
        y = self.ranked(y_t, f"yielded {what}")
        if dim > y.rank:
            self.fail(f"dim = {dim} is out of range to stack {what} of type {y_t}")
        expected = y.with_dim(dim, length)
        got = self.ranked(result.type, f"result #{index}")
        ok = (
            got.dtype == expected.dtype
            and got.torch == expected.torch
            and got.rank == expected.rank
            and all(
                dims_compatible(g, e) if k == dim else g == e
                for k, (g, e) in enumerate(zip(got.shape, expected.shape))
            )
        )
        if not ok:
            self.fail(
                f"result #{index} ({what}) has type {result.type} but stacking the yielded "
                f"{y_t} along dim {dim} gives {expected.to_type(y_t.context)}"
            )


def slice_type(t: ir.Type, dim: int) -> ir.Type:
    return tensor_spec(t).without_dim(dim).to_type(t.context)
