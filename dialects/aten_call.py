"""`tidal.aten_call`: one ATen operator called as a library kernel, by name and overload.

    %r... = "tidal.aten_call"(%tensors...)
              {callee = "aten::convolution", overload = "", args = [0 : index, 1 : index, unit, ...]}
`args` holds the operator's schema arguments in order. An `index` entry k stands for operand k (a
tensor); `unit` is None; i64/f64/bool/string attributes are the Python scalars; `array<i64: ...>`
is an int list; an array of index/unit entries is a `Tensor[]` / `Tensor?[]` list. Results are the
operator's tensor results. The op names the kernel rather than its math, so each transformation
finds the operator's counterpart (a native call on the CPU, a derivative for autodiff, a CUDA
kernel) by `callee` and `overload`.
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.dialects.checks import OpChecker
from tidal.dialects.registry import OpEntry, register
from tidal.dialects.types import tensor_spec

NAME = "tidal.aten_call"


def is_operand_ref(a: ir.Attribute) -> bool:
    return isinstance(a, ir.IntegerAttr) and isinstance(a.type, ir.IndexType)


def is_none(a: ir.Attribute) -> bool:
    return isinstance(a, ir.UnitAttr)


def operand_refs(args: ir.ArrayAttr) -> list[int]:
    """Operand numbers the args refer to, in order (tensor lists included)."""
    refs = []
    for a in args:
        if is_operand_ref(a):
            refs.append(a.value)
        elif isinstance(a, ir.ArrayAttr):
            refs += [e.value for e in a if is_operand_ref(e)]
    return refs


def verify_aten_call(op):
    c = OpChecker(op)
    attrs = c.op.attributes
    for name in ("callee", "overload"):
        if name not in attrs or not isinstance(attrs[name], ir.StringAttr):
            c.fail(f"requires string attribute '{name}'")
    callee = ir.StringAttr(attrs["callee"]).value
    if "::" not in callee:
        c.fail(f"callee '{callee}' must be a qualified operator name such as 'aten::convolution'")
    if "args" not in attrs or not isinstance(attrs["args"], ir.ArrayAttr):
        c.fail("requires array attribute 'args' (the operator's schema arguments)")
    operands = list(c.op.operands)
    refs = operand_refs(ir.ArrayAttr(attrs["args"]))
    if sorted(refs) != list(range(len(operands))):
        c.fail(
            f"args must refer to each of its {len(operands)} operand(s) exactly once, "
            f"got references {refs}"
        )
    for i, v in enumerate(operands):
        if tensor_spec(v.type) is None:
            c.fail(f"operand #{i} must be a ranked tensor, got {v.type}")
    for i, r in enumerate(c.op.results):
        if tensor_spec(r.type) is None:
            c.fail(f"result #{i} must be a ranked tensor, got {r.type}")
    if list(c.op.regions):
        c.fail("takes no regions")


def build_aten_call(callee: str, overload: str, operands, args, result_types, loc=None):
    """`args`: attributes as described in the module docstring (operand refs as index attrs)."""
    return ir.Operation.create(
        NAME,
        results=list(result_types),
        operands=list(operands),
        attributes={
            "callee": ir.StringAttr.get(callee),
            "overload": ir.StringAttr.get(overload),
            "args": ir.ArrayAttr.get(list(args)),
        },
        loc=loc or ir.Location.current,
    )


ATEN_CALL = register(
    OpEntry(
        name=NAME,
        summary="an ATen operator called as a library kernel (convolution, sort, index_put, ...)",
        doc=__doc__,
        verify=verify_aten_call,
        build=build_aten_call,
        operands=(("tensors...", "the operator's tensor arguments, referred to from args by index"),),
        attributes=(
            ("callee", "string: the operator, e.g. 'aten::convolution'"),
            ("overload", "string: the overload name ('' for the default)"),
            ("args", "array: every schema argument (index = operand, unit = None, or the constant)"),
        ),
        regions=(),
        results=(("results...", "the operator's tensor results"),),
    )
)
