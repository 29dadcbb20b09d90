"""`tidal-results-to-arguments`: the entry function writes its results into buffers the caller
passes, when every result has a static shape.

The runtime then allocates each output as a torch tensor before the call and hands its data
pointer in: no result descriptor to read back, no adoption of malloc'ed memory, no copy of small
results, and the descriptors of static shapes are filled once (the per-call cost of a small
compiled graph was mostly this bookkeeping). A returned buffer that the function allocates itself
(`memref.alloc` of the result's type) becomes the caller's buffer: the code writes straight into
the output. Any other returned value (an argument, a constant, a loop's result, a value returned
twice) is copied into it.

Runs after bufferization and before the deallocation pipeline, on the function the runtime calls
(`llvm.emit_c_interface`). The runtime and the AOT export decide the calling convention by the
same rule (`tidal.runtime.memref.results_as_arguments`).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func, memref

from tidal.passes.registry import tidal_pass


def _static_identity(t: ir.Type) -> bool:
    if not isinstance(t, ir.MemRefType):
        return False
    m = ir.MemRefType(t)
    return m.has_static_shape and m.affine_map == ir.AffineMap.get_identity(m.rank)


def _rewrite(fn: ir.Operation) -> None:
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    if not ftype.results or not all(_static_identity(t) for t in ftype.results):
        return
    entry = fn.regions[0].blocks[0]
    outs = [entry.add_argument(t, fn.location) for t in ftype.results]
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get([*ftype.inputs, *ftype.results], []))
    if "arg_attrs" in fn.attributes:
        old = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
        fn.attributes["arg_attrs"] = ir.ArrayAttr.get(old + [ir.DictAttr.get({})] * len(outs))
    returns = []

    def collect(op):
        if op.name == "func.return":
            returns.append(op.operation)
        return ir.WalkResult.ADVANCE

    fn.walk(collect)
    (ret,) = returns  # bufferized bodies are one block until scf→cf
    for i, out in enumerate(outs):
        value = ret.operands[i]  # read again: an earlier result may have adopted this buffer
        owner = value.owner
        if (not isinstance(owner, ir.Block) and owner.operation.name == "memref.alloc"
                and owner.operation.block == entry and value.type == out.type):
            value.replace_all_uses_with(out)
            owner.operation.erase()
    with ret.location, ir.InsertionPoint(ret):
        for value, out in zip(ret.operands, outs):
            if value != out:
                memref.CopyOp(value, out)
        func.ReturnOp([])
    ret.erase()


@tidal_pass(
    "tidal-results-to-arguments",
    "The entry function (llvm.emit_c_interface) writes static-shaped results into caller-given buffers",
)
def results_to_arguments(module_op):
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name == "func.func" and "llvm.emit_c_interface" in op.attributes and len(op.regions[0].blocks):
            _rewrite(op.operation)
