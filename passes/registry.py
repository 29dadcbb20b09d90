"""tidal's own passes and named pipelines, as seen by `tidal-opt --pass-pipeline`.

A tidal pass is a Python function over the `builtin.module` operation. It raises `TidalError` to
fail with a located diagnostic. Named pipelines expand to pipeline text that may mix tidal passes
and any pass of the bundled MLIR/torch-mlir.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class TidalPass:
    name: str
    summary: str
    run: Callable  # run(module_op, **options) -> None
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class TidalPipeline:
    name: str
    summary: str
    text: str  # comma-separated module-level pipeline elements


_PASSES: dict[str, TidalPass] = {}
_PIPELINES: dict[str, TidalPipeline] = {}


def tidal_pass(name: str, summary: str, options: tuple[str, ...] = ()):
    """Decorator registering `fn(module_op, **options)` as the module pass `name`."""

    def register(fn):
        if name in _PASSES or name in _PIPELINES:
            raise ValueError(f"pass {name} registered twice")
        _PASSES[name] = TidalPass(name, summary, fn, options)
        return fn

    return register


def tidal_pipeline(name: str, summary: str, text: str) -> TidalPipeline:
    if name in _PASSES or name in _PIPELINES:
        raise ValueError(f"pipeline {name} registered twice")
    _PIPELINES[name] = p = TidalPipeline(name, summary, text)
    return p


def lookup_pass(name: str) -> TidalPass | None:
    return _PASSES.get(name)


def lookup_pipeline(name: str) -> TidalPipeline | None:
    return _PIPELINES.get(name)


def all_passes() -> list[TidalPass]:
    return sorted(_PASSES.values(), key=lambda p: p.name)


def all_pipelines() -> list[TidalPipeline]:
    return sorted(_PIPELINES.values(), key=lambda p: p.name)


def function_named(module, name: str):
    """The `func.func` called `name` at the top of `module` (KeyError if there is none)."""
    from torch_mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op.operation
    raise KeyError(name)


def defining_op(v):
    """The op that defines `v`: its producer, or for a block argument the op owning the block."""
    from torch_mlir import ir

    owner = v.owner
    return owner.owner if isinstance(owner, ir.Block) else owner


def map_dims(affine_map) -> list[int | None] | None:
    """Per result of an indexing map: the loop dim it reads (None: the constant 0 of a size-1
    dim); None for a map with any other expression."""
    from torch_mlir import ir

    dims = []
    for e in affine_map.results:
        e = e.maybe_downcast()
        if isinstance(e, ir.AffineDimExpr):
            dims.append(e.position)
        elif isinstance(e, ir.AffineConstantExpr) and e.value == 0:
            dims.append(None)
        else:
            return None
    return dims


def is_within(op, ancestor) -> bool:
    """`op` is `ancestor` or nested in one of its regions."""
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def values_read(op) -> list:
    """The operands of `op` and of every op nested in it."""
    from torch_mlir import ir

    found = []

    def visit(o):
        found.extend(o.operands)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def ops_named(module_op, names) -> list:
    """Every op in `module_op` (nested regions included) whose name is in `names`, collected
    before a pass rewrites any of them."""
    from torch_mlir import ir

    found = []

    def visit(op):
        if op.name in names:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    return found
