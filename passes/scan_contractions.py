"""`tidal-scan-contractions`: a scan's thin per-step matmuls run once, at full width, outside it.

Hoisting: a step that multiplies its slice x_t [B, I] by a loop-invariant weight W repeats a thin
[B, I]·[I, N] matmul T times; the stacked xs [T, B, I] times W is one [T·B, I]·[I, N] matmul before
the loop, and the step reads its row block of the product as one more xs (what cuDNN does with an
RNN's input projection). A product much larger than the slice it comes from is left in the loop: a
scan over chunks may exist precisely so that the whole product (a vocabulary's logits) never lives.

Sinking: a carry that only accumulates products, acc' = acc + A_t·B_t (a weight's cotangent in a
reverse scan, the contraction over the batch rows), is Σ_t A_t·B_t: one matmul after the loop over
the per-step operands stacked along the contracted dim. A carry that accumulates sums over some dims
(a bias's cotangent) is one sum after the loop, over time and those dims; with the weights' ones
gone, an RNN's adjoint step no longer mixes batch rows at all (the GPU runs it as one kernel). The carry goes; an operand that is a slice
of an xs is read from that xs, any other is stacked as one more output of the scan. A transposed
operand is stacked untransposed, so that stacking along dim 0 is already the concatenation along
the contracted dim and the transpose folds into the BLAS call.

Sinking a stacked product: a per-step output that is only stacked, y_t = A_t·W by a weight (an
RNN adjoint's dx_t = dz_t·Wᵀ, needed only when x requires grad), is one matmul after the loop of the
stacked A by W; the step yields A_t instead (or nothing new, when A_t is already stacked or is a
slice of an xs). Entry t of a scan's stacked output comes from slice t also in a reverse scan, so the
product keeps the order. Any scanned dim: the stacked A is flattened over its leading dims, moved
to the front first when the scanned dim is the last one.

Hoisting and accumulator sinking need the scanned dim to be 0 (stacked rows are contiguous); all
three match rank-2 matmuls (`aten.mm`) only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch_mlir import ir

from tidal.dialects.build import build_yield, create_region_op, i64_attr
from tidal.passes.registry import ops_named, tidal_pass

# How much larger than the slice it reads a hoisted product may be per step, unless the scan already
# stacks a per-step output at least that large (an RNN's hidden states). A GRU's three gates from an
# input half the hidden width are 6x; a vocabulary's logits from a hidden state are 30x and more.
MAX_HOIST_GROWTH = 8


def _producer(value: ir.Value):
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner


def _tensor_type(t: ir.Type):
    """(shape with None for dynamic dims, dtype text) of a `!torch.vtensor<[..],dt>`, else None."""
    text = str(t)
    if not text.startswith("!torch.vtensor<[") or not text.endswith(">"):
        return None
    dims, dtype = text[len("!torch.vtensor<[") : -1].split("],", 1)
    shape = [] if dims == "" else [None if d == "?" else int(d) for d in dims.split(",")]
    return shape, dtype


def _vtensor(shape, dtype: str) -> ir.Type:
    return ir.Type.parse(f"!torch.vtensor<[{','.join('?' if d is None else str(d) for d in shape)}],{dtype}>")


def _numel(shape) -> int | None:
    n = 1
    for d in shape:
        if d is None:
            return None
        n *= d
    return n


def _const_int_value(value: ir.Value) -> int | None:
    op = _producer(value)
    if op is None or op.name != "torch.constant.int":
        return None
    return ir.IntegerAttr(op.attributes["value"]).value


def _int_list(value: ir.Value) -> list[int] | None:
    op = _producer(value)
    if op is None or op.name != "torch.prim.ListConstruct":
        return None
    items = [_const_int_value(v) for v in op.operands]
    return None if any(i is None for i in items) else items


def _untransposed(value: ir.Value):
    """(v, the transpose op) when `value` is a 2-D transpose of v, else (value, None)."""
    op = _producer(value)
    if op is not None:
        if op.name == "torch.aten.t":
            return op.operands[0], op
        if op.name == "torch.aten.permute" and _int_list(op.operands[1]) == [1, 0]:
            return op.operands[0], op
        if op.name == "torch.aten.transpose.int":
            dims = [_const_int_value(v) for v in op.operands[1:3]]
            if None not in dims and {d % 2 for d in dims} == {0, 1}:
                return op.operands[0], op
    return value, None


def _same(a, b) -> bool:
    return a.operation == b.operation


class _Builder:
    """torch ops inserted before an insertion point (the scan for hoists, after it for sinks)."""

    def __init__(self, loc):
        self.loc = loc

    def op(self, name, operands, result_type, attributes=None):
        return ir.Operation.create(name, results=[result_type], operands=list(operands),
                                   attributes=attributes or {}, loc=self.loc).result

    def int(self, v: int):
        return self.op("torch.constant.int", [], ir.Type.parse("!torch.int"),
                       {"value": i64_attr(v)})

    def int_list(self, items):
        return self.op("torch.prim.ListConstruct", items, ir.Type.parse("!torch.list<int>"))

    def size(self, value, dim):
        return self.op("torch.aten.size.int", [value, self.int(dim)], ir.Type.parse("!torch.int"))

    def flatten(self, value, start, end):
        shape, dtype = _tensor_type(value.type)
        merged = _numel(shape[start : end + 1])
        out = shape[:start] + [merged] + shape[end + 1 :]
        return self.op("torch.aten.flatten.using_ints", [value, self.int(start), self.int(end)], _vtensor(out, dtype))

    def permute(self, value, dims):
        shape, dtype = _tensor_type(value.type)
        return self.op("torch.aten.permute", [value, self.int_list([self.int(d) for d in dims])],
                       _vtensor([shape[d] for d in dims], dtype))

    def mm(self, a, b):
        (m, _), dtype = _tensor_type(a.type)
        (_, n), _ = _tensor_type(b.type)
        return self.op("torch.aten.mm", [a, b], _vtensor([m, n], dtype))

    def view_like_rows(self, flat, stacked, n):
        """`flat` [T·B, N] viewed as [T, B, N], T and B taken from `stacked` [T, B, ...]."""
        shape, dtype = _tensor_type(stacked.type)
        sizes = [self.int(d) if d is not None else self.size(stacked, i) for i, d in enumerate(shape[:2])]
        return self.op("torch.aten.view", [flat, self.int_list(sizes + [self.int(n)])],
                       _vtensor(shape[:2] + [n], _tensor_type(flat.type)[1]))

    def sum_dims(self, value, dims):
        shape, dtype = _tensor_type(value.type)
        out = [d for i, d in enumerate(shape) if i not in dims]
        keepdim = self.op("torch.constant.bool", [], ir.Type.parse("!torch.bool"), {"value": ir.BoolAttr.get(False)})
        none = self.op("torch.constant.none", [], ir.Type.parse("!torch.none"))
        return self.op("torch.aten.sum.dim_IntList", [value, self.int_list([self.int(d) for d in dims]), keepdim, none],
                       _vtensor(out, dtype))

    def view(self, value, shape):
        if _tensor_type(value.type)[0] == list(shape):
            return value
        return self.op("torch.aten.view", [value, self.int_list([self.int(d) for d in shape])],
                       _vtensor(shape, _tensor_type(value.type)[1]))

    def add(self, a, b):
        return self.op("torch.aten.add.Tensor", [a, b, self.int(1)], a.type)


@dataclass
class _Plan:
    hoists: list = field(default_factory=list)  # (mm op, xs index, const index)
    sinks: list = field(default_factory=list)  # (carry index, add op, mm op or _summed's tuple)


class _Scan:
    def __init__(self, op):
        self.op = op
        self.n = ir.IntegerAttr(op.attributes["num_carries"]).value
        self.k = ir.IntegerAttr(op.attributes["num_xs"]).value
        self.body = op.regions[0].blocks[0]
        self.args = list(self.body.arguments)
        self.operands = list(op.operands)
        self.yield_op = list(self.body.operations)[-1]

    def arg_index(self, value) -> int | None:
        """The position of `value` among the body's arguments, None for any other value."""
        if not isinstance(value.owner, ir.Block) or value.owner != self.body:
            return None
        return next(j for j, a in enumerate(self.args) if a == value)

    def role(self, value):
        """('carry'|'xs'|'const', index) of a body argument, None for any other value."""
        i = self.arg_index(value)
        if i is None:
            return None
        if i < self.n:
            return "carry", i
        if i < self.n + self.k:
            return "xs", i - self.n
        return "const", i - self.n - self.k

    def largest_stacked_step(self) -> int:
        types = [_tensor_type(v.type) for v in list(self.yield_op.operands)[self.n :]]
        sizes = [_numel(t[0]) for t in types if t is not None]
        return max([s for s in sizes if s is not None], default=0)


def _single_use(value: ir.Value):
    uses = list(value.uses)
    return uses[0] if len(uses) == 1 else None


def _hoistable(scan: _Scan, mm, stacked_step: int):
    """(xs index, const index) when `mm` is x_t·W with a product not much larger than x_t."""
    lhs, rhs = scan.role(mm.operands[0]), scan.role(mm.operands[1])
    if not (lhs and rhs and lhs[0] == "xs" and rhs[0] == "const"):
        return None
    (rows, inner), _ = _tensor_type(mm.operands[0].type)
    (_, cols), _ = _tensor_type(mm.operands[1].type)
    if rows is None or inner is None or cols is None:
        return None
    product = rows * cols
    if product > MAX_HOIST_GROWTH * rows * inner and product > stacked_step:
        return None
    return lhs[1], rhs[1]


def _summed(value):
    """(sum op, view op or None, the summed value, dims) when `value` is sum.dim_IntList(v, dims)
    over constant dims, possibly viewed (keepdim's 1s dropped), each used once."""
    view = _producer(value)
    if view is not None and view.name == "torch.aten.view" and _single_use(view.operands[0]) is not None:
        value = view.operands[0]
    else:
        view = None
    total = _producer(value)
    if total is None or total.name != "torch.aten.sum.dim_IntList" or _single_use(value) is None:
        return None
    dims, dtype = _int_list(total.operands[1]), _producer(total.operands[3])
    if dims is None or dtype is None or dtype.name != "torch.constant.none":
        return None
    rank = len(_tensor_type(total.operands[0].type)[0])
    # no dims is every dim (sum.dim_IntList's convention for a full sum)
    return total, view, total.operands[0], sorted({d % rank for d in dims}) if dims else list(range(rank))


def _sinkable(scan: _Scan, i: int):
    """(add, term) when carry i is only ever acc + term, the term a product A_t·B_t of factors that
    vary per step, or a sum over some dims of a value that does (a bias's cotangent)."""
    use = _single_use(scan.args[i])
    add = use.owner if use else None
    if add is None or add.name != "torch.aten.add.Tensor" or _const_int_value(add.operands[2]) != 1:
        return None
    term = add.operands[1] if use.operand_number == 0 else add.operands[0]
    acc_type = _tensor_type(scan.args[i].type)
    if term.type != scan.args[i].type or not acc_type[1].startswith("f"):
        return None  # a broadcasting or mixed-dtype accumulation
    out_use = _single_use(add.result)
    if out_use is None or not _same(out_use.owner, scan.yield_op) or out_use.operand_number != i:
        return None
    mm = _producer(term)
    if mm is not None and mm.name == "torch.aten.mm" and _single_use(term) is not None:
        for factor in mm.operands:
            role = scan.role(_untransposed(factor)[0])
            if role and role[0] == "const":
                return None  # Σ_t C·B_t is C·ΣB_t: nothing to stack
        return add, mm
    summed = _summed(term)
    if summed is None or None in acc_type[0] or (scan.role(summed[2]) or ("",))[0] == "const":
        return None
    return add, summed
def _plan(scan: _Scan) -> _Plan:
    plan = _Plan()
    stacked_step = scan.largest_stacked_step()
    for op in list(scan.body.operations):
        if op.name == "torch.aten.mm":
            where = _hoistable(scan, op, stacked_step)
            if where:
                plan.hoists.append((op, *where))
    for i in range(scan.n):
        found = _sinkable(scan, i)
        if found:
            plan.sinks.append((i, *found))
    return plan


def _rewrite(scan: _Scan, plan: _Plan) -> None:
    op, n, k = scan.op, scan.n, scan.k
    b = _Builder(op.location)
    init, xs, consts = scan.operands[:n], scan.operands[n : n + k], scan.operands[n + k :]

    with ir.InsertionPoint(op):
        new_xs = [
            b.view_like_rows(b.mm(b.flatten(xs[xi], 0, 1), consts[ci]), xs[xi], _tensor_type(mm.result.type)[0][1])
            for mm, xi, ci in plan.hoists
        ]

    # Where each sunk product's factors come from after the loop: an xs (old or hoisted) as it is,
    # or a new stacked output of the scan.
    extra_ys: list[ir.Value] = []

    def stacked(value):
        role = scan.role(value)
        if role and role[0] == "xs":
            return xs[role[1]]
        for h, (mm, _, _) in enumerate(plan.hoists):
            if value == mm.result:
                return new_xs[h]
        for j, v in enumerate(list(scan.yield_op.operands)[n:]):
            if v == value:
                return -1 - j  # already a stacked output of the scan
        for j, v in enumerate(extra_ys):
            if v == value:
                return j
        extra_ys.append(value)
        return len(extra_ys) - 1

    factors, transposes = [], []
    for _, _, term in plan.sinks:
        if isinstance(term, tuple):  # a sum: its summed value stacked
            factors.append(stacked(term[2]))
            continue
        (a, a_t), (f, f_t) = _untransposed(term.operands[0]), _untransposed(term.operands[1])
        factors.append(((stacked(a), a_t is not None), (stacked(f), f_t is not None)))
        transposes += [t for t in (a_t, f_t) if t is not None]

    dropped = {i for i, _, _ in plan.sinks}
    kept = [i for i in range(n) if i not in dropped]
    num_ys = len(op.results) - n
    length = _tensor_type(xs[0].type)[0][0]
    with ir.InsertionPoint(op):
        new_op = create_region_op(
            op.name,
            results=[init[i].type for i in kept] + [r.type for r in list(op.results)[n:]]
            + [_vtensor([length] + _tensor_type(v.type)[0], _tensor_type(v.type)[1]) for v in extra_ys],
            operands=[init[i] for i in kept] + xs + new_xs + consts,
            attributes={name: op.attributes[name] for name in op.attributes},
            region_arg_types=[[init[i].type for i in kept] + [a.type for a in scan.args[n : n + k]]
                              + [_slice_type(v) for v in new_xs] + [c.type for c in consts]],
            loc=op.location,
        )
    new_op.attributes["num_carries"] = i64_attr(len(kept))
    new_op.attributes["num_xs"] = i64_attr(k + len(new_xs))

    body = new_op.regions[0].blocks[0]
    new_args = list(body.arguments)
    arg_map = dict(zip(kept, new_args))
    arg_map.update({n + j: new_args[len(kept) + j] for j in range(k)})
    arg_map.update({n + k + j: new_args[len(kept) + k + len(new_xs) + j] for j in range(len(consts))})
    for o in list(scan.body.operations):
        body.append(o)
    for idx, new_arg in arg_map.items():
        scan.args[idx].replace_all_uses_with(new_arg)
    for h, (mm, _, _) in enumerate(plan.hoists):
        mm.result.replace_all_uses_with(new_args[len(kept) + k + h])
        mm.erase()
    yielded = list(scan.yield_op.operands)  # read after the replacements: a yield may return an argument
    old_ys = yielded[n:]
    with ir.InsertionPoint(scan.yield_op):
        build_yield([yielded[i] for i in kept] + old_ys + [_renamed(v, scan, arg_map) for v in extra_ys],
                    scan.yield_op.location)
    scan.yield_op.erase()
    for _, add, term in plan.sinks:
        add.erase()
        for dead in ([term[1], term[0]] if isinstance(term, tuple) else [term]):
            if dead is not None:
                dead.erase()
    for t in transposes:
        if not list(t.result.uses):
            t.erase()

    old_results, new_results = list(op.results), list(new_op.results)
    for pos, i in enumerate(kept):
        old_results[i].replace_all_uses_with(new_results[pos])
    for j in range(num_ys):
        old_results[n + j].replace_all_uses_with(new_results[len(kept) + j])
    with ir.InsertionPoint(op):
        def source(f):
            if not isinstance(f, int):
                return f
            return new_results[len(kept) + (-1 - f if f < 0 else num_ys + f)]

        for (i, _, term), factor in zip(plan.sinks, factors):
            if isinstance(term, tuple):  # Σ_t sum_dims(v_t) = one sum of the stacked v over time and dims
                total = b.sum_dims(source(factor), [0] + [d + 1 for d in term[3]])
                old_results[i].replace_all_uses_with(b.add(init[i], b.view(total, _tensor_type(init[i].type)[0])))
                continue
            (sa, a_t), (sf, f_t) = factor
            sa, sf = source(sa), source(sf)
            # Σ_t A_t·B_t = [A_1 … A_T]·[B_1; …; B_T] = [A_1ᵀ; …; A_Tᵀ]ᵀ·[B_1; …; B_T]: only leading
            # dims are merged (a dynamic length stays one dim), the outer transpose is BLAS's flag.
            a_rows = b.flatten(sa if a_t else b.permute(sa, [0, 2, 1]), 0, 1)
            b_cat = b.flatten(b.permute(sf, [0, 2, 1]) if f_t else sf, 0, 1)
            a_cat = b.permute(a_rows, [1, 0])
            old_results[i].replace_all_uses_with(b.add(init[i], b.mm(a_cat, b_cat)))
    op.erase()


def _renamed(value, scan: _Scan, arg_map):
    """`value` in the new body: an old body argument maps to its new one."""
    i = scan.arg_index(value)
    return value if i is None else arg_map[i]


def _slice_type(value):
    shape, dtype = _tensor_type(value.type)
    return _vtensor(shape[1:], dtype)


def _stacked_products(scan: _Scan):
    """[(mm, const index, transposed)] for each y_t = A_t·W (W a const, or its 2-D transpose) whose
    result the step only yields as per-step outputs, A_t varying per step."""
    found = []
    for mm in scan.body.operations:
        if mm.name != "torch.aten.mm":
            continue
        uses = list(mm.result.uses)
        if not uses or any(not _same(u.owner, scan.yield_op) or u.operand_number < scan.n for u in uses):
            continue
        w, w_t = _untransposed(mm.operands[1])
        role, a_role = scan.role(w), scan.role(mm.operands[0])
        if not role or role[0] != "const" or (a_role and a_role[0] == "const"):
            continue
        if any(t is None or len(t[0]) != 2 for t in map(_tensor_type, (mm.operands[0].type, mm.result.type))):
            continue
        found.append((mm, role[1], w_t is not None))
    return found


def _sink_stacked_products(op):
    """The scan with its only-stacked products A_t·W computed after it as (stacked A)·W; returns
    the scan now in place of `op` (`op` itself when nothing matched)."""
    scan = _Scan(op)
    n, k = scan.n, scan.k
    dim = ir.IntegerAttr(op.attributes["dim"]).value
    yielded = list(scan.yield_op.operands)
    if not 0 <= dim <= 2 or len(yielded) == n:
        return op  # a product's slices are 2-D: stacked along dim 0, 1 or 2
    length = _tensor_type(scan.operands[n].type)[0][dim]

    def stacked_shape(step_value):
        """A per-step value's shape stacked as the scan stacks its outputs (T inserted at dim)."""
        shape = _tensor_type(step_value.type)[0]
        return shape[:dim] + [length] + shape[dim:]

    found = []
    for mm, ci, transposed in _stacked_products(scan):
        # the product's stacked type must be the output's exactly (a static size where the output
        # has a dynamic one would change the function's types)
        product_shape = stacked_shape(mm.operands[0])
        product_shape[1 if dim == 2 else 2] = _tensor_type(mm.result.type)[0][1]
        outs = [j for j in range(n, len(yielded)) if yielded[j] == mm.result]
        if all(_tensor_type(op.results[j].type) == (product_shape, _tensor_type(mm.result.type)[1]) for j in outs):
            found.append((mm, ci, transposed, outs))
    sunk = {j for *_, outs in found for j in outs}
    if not found or len(sunk) == len(op.results):
        return op  # nothing, or a scan left with no result at all: leave it whole
    xs, consts = scan.operands[n : n + k], scan.operands[n + k :]
    kept = [j for j in range(n, len(yielded)) if j not in sunk]

    extra_ys: list[ir.Value] = []

    def stacked(value):
        """Where A's stacked steps come from: ('xs', i), ('ys', old result position) or ('new', j)."""
        role = scan.role(value)
        if role and role[0] == "xs":
            return "xs", role[1]
        for j in kept:
            if yielded[j] == value:
                return "ys", j
        if value not in extra_ys:
            extra_ys.append(value)
        return "new", extra_ys.index(value)

    sources = [stacked(mm.operands[0]) for mm, *_ in found]
    with ir.InsertionPoint(op):
        new_op = create_region_op(
            op.name,
            results=[r.type for r in list(op.results)[:n]] + [op.results[j].type for j in kept]
            + [_vtensor(stacked_shape(v), _tensor_type(v.type)[1]) for v in extra_ys],
            operands=scan.operands,
            attributes={name: op.attributes[name] for name in op.attributes},
            region_arg_types=[[a.type for a in scan.args]],
            loc=op.location,
        )
    body = new_op.regions[0].blocks[0]
    arg_map = dict(enumerate(body.arguments))
    for o in list(scan.body.operations):
        body.append(o)
    for old, new in zip(scan.args, body.arguments):
        old.replace_all_uses_with(new)
    now = list(scan.yield_op.operands)  # read after the replacements: a yield may return an argument
    with ir.InsertionPoint(scan.yield_op):
        build_yield(now[:n] + [now[j] for j in kept] + [_renamed(v, scan, arg_map) for v in extra_ys],
                    scan.yield_op.location)
    scan.yield_op.erase()

    old_results, new_results = list(op.results), list(new_op.results)
    for i in range(n):
        old_results[i].replace_all_uses_with(new_results[i])
    for pos, j in enumerate(kept):
        old_results[j].replace_all_uses_with(new_results[n + pos])
    b = _Builder(op.location)
    with ir.InsertionPoint(op):
        for (mm, ci, transposed, outs), (kind, where) in zip(found, sources):
            if kind == "xs":
                a = xs[where]
            else:
                a = new_results[n + (kept.index(where) if kind == "ys" else len(kept) + where)]
            w = b.permute(consts[ci], [1, 0]) if transposed else consts[ci]
            # (stacked A)·W over its leading dims, [T, B, K] or [B, T, K] -> [·, ·, N]; a [B, K, T]
            # moved to [T, B, K] first and the product moved back.
            rows = b.permute(a, [2, 0, 1]) if dim == 2 else a
            product = b.view_like_rows(b.mm(b.flatten(rows, 0, 1), w), rows, _tensor_type(mm.result.type)[0][1])
            product = b.permute(product, [1, 2, 0]) if dim == 2 else product
            for j in outs:
                old_results[j].replace_all_uses_with(product)
    transposes = []
    for mm, *_ in found:
        t = _untransposed(mm.operands[1])[1]
        if t is not None and all(not _same(t, u) for u in transposes):
            transposes.append(t)
        mm.erase()
    for t in transposes:
        if not list(t.result.uses):
            t.erase()
    op.erase()
    return new_op


def _fold_double_transposes(body: ir.Block) -> None:
    """A transpose of a transpose is the value itself: nn.LSTM's adjoint accumulates its weight's
    cotangent as (A_t·B_t)ᵀᵀ (weights stored [4H, H]), which hides the product from `_sinkable`."""
    for inner in list(body.operations):
        outer_source, outer = _untransposed(inner.result) if len(inner.results) == 1 else (None, None)
        if outer is None:
            continue
        source, first = _untransposed(outer_source)
        if first is None:
            continue
        outer.result.replace_all_uses_with(source)
        outer.erase()
        if not list(first.result.uses):
            first.erase()


def _eligible(op) -> bool:
    if len(op.regions[0].blocks) != 1:
        return False
    return all(_tensor_type(v.type) is not None for v in list(op.operands) + list(op.results))


@tidal_pass("tidal-scan-contractions",
            "Hoist a scan's per-step matmuls of xs by weights before it; sink accumulated and only-stacked "
            "matmuls after it")
def scan_contractions(module_op):
    for op in ops_named(module_op, {"tidal.scan"}):
        if not _eligible(op):
            continue
        _fold_double_transposes(op.regions[0].blocks[0])
        op = _sink_stacked_products(op)
        if ir.IntegerAttr(op.attributes["dim"]).value != 0:
            continue
        scan = _Scan(op)
        plan = _plan(scan)
        if plan.hoists or plan.sinks:
            _rewrite(scan, plan)
