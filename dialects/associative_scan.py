"""`tidal.associative_scan`: inclusive prefix scan with an associative combine function.

    %r:k = "tidal.associative_scan"(%xs..., %consts...)
              {num_xs = k : i64, dim = d : i64, reverse = false}
              ({ combine: (lhs..., rhs..., consts...) -> yield out... })
The combine function works on one element position: lhs/rhs are slices of the xs along `dim`.
Result t is x_0 ∘ … ∘ x_t (with `reverse`, x_{T-1} ∘ … ∘ x_t: the steps run from the end and the
accumulated later slices are the combine's lhs, as PyTorch's flip → scan → flip computes), so the
results have the types of the xs. Associativity is the user's promise: it licenses parallel lowerings.
"""

from __future__ import annotations

from tidal.dialects.build import bool_attr, create_region_op, i64_attr
from tidal.dialects.checks import OpChecker, slice_type
from tidal.dialects.registry import OpEntry, register

NAME = "tidal.associative_scan"


def verify_associative_scan(op):
    c = OpChecker(op)
    operands = list(c.op.operands)
    k = c.int_attr("num_xs", 1, len(operands))
    dim = c.int_attr("dim", 0)
    c.bool_attr("reverse")
    xs, consts = operands[:k], operands[k:]
    c.scanned_length(xs, dim, 0, "xs")
    slices = [slice_type(v.type, dim) for v in xs]
    (combine,) = c.entry_blocks(["combine"])
    c.block_args(
        combine,
        "combine",
        [(f"lhs slice of xs[{i}]", t) for i, t in enumerate(slices)]
        + [(f"rhs slice of xs[{i}]", t) for i, t in enumerate(slices)]
        + [(f"const #{i}", v.type) for i, v in enumerate(consts)],
    )
    c.yielded(combine, "combine", [(f"combined xs[{i}]", t) for i, t in enumerate(slices)])
    results = list(c.op.results)
    if len(results) != k:
        c.fail(f"has {len(results)} result(s) but num_xs = {k}")
    for i, (r, v) in enumerate(zip(results, xs)):
        if r.type != v.type:
            c.fail(f"result #{i} has type {r.type} but xs operand #{i} has type {v.type}")


def build_associative_scan(xs, consts, combine_fn=None, dim=0, reverse=False, loc=None):
    slices = [slice_type(v.type, dim) for v in xs]
    return create_region_op(
        NAME,
        results=[v.type for v in xs],
        operands=[*xs, *consts],
        attributes={"num_xs": i64_attr(len(xs)), "dim": i64_attr(dim), "reverse": bool_attr(reverse)},
        region_arg_types=[slices + slices + [v.type for v in consts]],
        bodies=None if combine_fn is None else [combine_fn],
        loc=loc,
    )


ASSOCIATIVE_SCAN = register(
    OpEntry(
        name=NAME,
        summary="inclusive prefix scan with an associative combine (associative_scan)",
        doc=__doc__,
        verify=verify_associative_scan,
        build=build_associative_scan,
        operands=(
            ("xs...", "the first num_xs operands: scanned along dim, all of one length T"),
            ("consts...", "the rest: values the combine captures"),
        ),
        attributes=(
            ("num_xs", "i64 >= 1: how many operands are scanned"),
            ("dim", "i64: the scanned dimension"),
            ("reverse", "bool: prefixes run from the last slice"),
        ),
        regions=(("combine", "(lhs..., rhs..., consts...) -> tidal.yield out... (one slice each)"),),
        results=(("scanned...", "result t = combine(x_0, ..., x_t); the types of the xs"),),
    )
)
