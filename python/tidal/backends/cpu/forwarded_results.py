"""`tidal-forward-aliased-results`: a result that is one of the function's arguments, or a value
already returned at an earlier position, leaves the compiled function; the runtime hands out the
tensor it already holds instead.

aot_autograd's forward graphs return a residual that is a view of an input (the `a` of `a * h`,
saved for the backward) or an alias of a user output (a scan's results); backward graphs pass a
cotangent through. Compiled as results, each would be a fresh buffer and a full copy (a 4 MB
recurrence: 1000 page faults and 8 MB of traffic per copy), where Inductor returns the tensor
itself.

Value semantics cannot tell `x` from `x.clone()` (both fold to the argument), and handing out the
input for a clone would let a write to the output reach the input. So a result is forwarded only
where the program says its output aliases that tensor: the importer's caller sets
`tidal.output_aliases` (per result: `""`, `"arg N"`, `"result N"`; from the FX graph's view
chains, `output_aliases`), and the pass forwards a result when its value is that argument or that
earlier result. `tidal.forwarded_results` then records, per original result, `""` (computed),
`"arg N"` or `"result N"` (an earlier result's original position).

Runs on the linalg-level functions of the JIT (`tidal.compiler.native_function`), before their
signature is read; the AOT export keeps every result (its C callers free each output).
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import func

from tidal.passes.registry import tidal_pass

ALLOWED = "tidal.output_aliases"
ATTR = "tidal.forwarded_results"


def output_aliases(gm) -> list[str]:
    """Per output of an FX graph: `"arg N"` when it is placeholder N or a view of it, `"result J"`
    when it is a view of the same tensor as the earlier output J, else `""`."""
    import torch

    def base(node):
        while isinstance(node.target, torch._ops.OpOverload) and node.target.is_view:
            node = node.args[0]
        return node

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    outputs = [r for r in (out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]) if r is not None]
    bases = [base(r) if isinstance(r, torch.fx.Node) else None for r in outputs]
    aliases = []
    for r, b in enumerate(bases):
        if b is None:
            aliases.append("")
        elif b in placeholders:
            aliases.append(f"arg {placeholders.index(b)}")
        else:
            aliases.append(f"result {bases.index(b)}" if bases.index(b) < r else "")
    return aliases


def _rewrite(fn: ir.Operation) -> None:
    entry = fn.regions[0].blocks[0]
    ret = list(entry.operations)[-1]
    if ALLOWED not in fn.attributes or ret.name != "func.return":
        return
    allowed = [ir.StringAttr(a).value for a in ir.ArrayAttr(fn.attributes[ALLOWED])]
    values = list(ret.operands)
    args = list(entry.arguments)
    plan, kept = [], []
    for r, value in enumerate(values):
        kind, _, n = allowed[r].partition(" ")
        if (kind == "arg" and value == args[int(n)]) or (kind == "result" and value == values[int(n)] and not plan[int(n)]):
            plan.append(allowed[r])
        else:
            plan.append("")
            kept.append(value)
    if len(kept) == len(values):
        return
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ftype.inputs, [v.type for v in kept]))
    if "res_attrs" in fn.attributes:
        del fn.attributes["res_attrs"]
    fn.attributes[ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(p) for p in plan])
    with ret.location, ir.InsertionPoint(ret):
        func.ReturnOp(kept)
    ret.erase()


def forwarded_results(fn: ir.Operation) -> list[tuple[str, int] | None] | None:
    """Per original result: None (computed: the next of the function's results), ("arg", N) or
    ("result", N); None for a function that forwards nothing."""
    if ATTR not in fn.attributes:
        return None
    plan = []
    for p in ir.ArrayAttr(fn.attributes[ATTR]):
        kind, _, n = ir.StringAttr(p).value.partition(" ")
        plan.append((kind, int(n)) if kind else None)
    return plan


@tidal_pass(
    "tidal-forward-aliased-results",
    "Functions stop returning the arguments and repeated values their outputs alias (the runtime forwards them)",
)
def forward_aliased_results(module_op):
    for op in module_op.regions[0].blocks[0].operations:
        if op.operation.name != "func.func" or not len(op.regions[0].blocks):
            continue
        _rewrite(op.operation)
