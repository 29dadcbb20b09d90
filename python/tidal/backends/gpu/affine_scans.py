"""`tidal-affine-scans`: a `scan` whose carry is an affine function of itself becomes an
`associative_scan` of the affine maps, with the rest of its step lifted over the whole sequence
(GPU backend, torch level).

A linear recurrence written as a loop step, h' = a_t * h + b_t (HGRN, minGRU, Mamba's scan, a
decayed sum; the adjoint of any of them, λ' = a_t * (λ + ȳ_t)), runs on the GPU as a sequential
loop: one step after another, whatever the width. Its composition is associative, so the same
recurrence is `associative_scan` of the pairs (a_t, b_t) under (a1, b1)∘(a2, b2) = (a1 a2, a2 b1 +
b2), which the GPU scans in parallel (`tt.scan` kernels). The step's elementwise ops that compute
a_t and b_t from the xs, and the per-step outputs computed from the carry, are the same ops over
the stacked xs ("lifted": the scanned dim put in front of their operands), and fuse into
elementwise kernels around the scan.

Matched: one tensor carry h whose new value is affine in h through add/sub (alpha 1), mul and div
by values that do not depend on h, neg and clone, with a_t and b_t depending on the xs (a
constant decay or a plain sum keeps the loop); every op of the step that is lifted is an
elementwise op from `LIFTABLE`; scanned dim 0 (where the importer puts it). Sizes may be dynamic
(Dynamo's graph once the sequence length changes; with no step at all, the final carry is h0 as
the loop's). Per-step outputs may read h (the carry
before the step: the scanned states shifted by one, after h0) and h' (the scanned states). h0 = 0
skips the products' term P_t * h0.

The CPU keeps the loop: its sequential scan is already one vectorized pass over the sequence and
faster than its associative form (bench `linear_recurrence`).
"""

from __future__ import annotations

from torch_mlir import ir

from tidal.dialects.associative_scan import build_associative_scan
from tidal.dialects.build import i64_attr
from tidal.passes.registry import ops_named, tidal_pass
from tidal.passes.scan_contractions import _const_int_value, _tensor_type, _vtensor

# Elementwise torch ops whose result broadcasts their tensor operands: lifted over the stacked xs
# unchanged (scalar operands are constants).
LIFTABLE = frozenset(f"torch.aten.{n}" for n in (
    "exp", "exp2", "expm1", "log", "log1p", "log2", "sigmoid", "tanh", "neg", "relu", "sqrt", "rsqrt",
    "reciprocal", "abs", "sin", "cos", "silu", "gelu", "erf", "sign", "square", "clone", "softplus",
    "mul.Tensor", "add.Tensor", "sub.Tensor", "div.Tensor", "maximum", "minimum", "where.self",
    "mul.Scalar", "add.Scalar", "sub.Scalar", "rsub.Scalar", "div.Scalar", "pow.Tensor_Scalar",
    "pow.Tensor_Tensor", "clamp", "clamp_min", "clamp_max", "leaky_relu", "lerp.Tensor", "lerp.Scalar",
))
_CONSTANTS = ("torch.constant.int", "torch.constant.float", "torch.constant.bool", "torch.constant.none",
              "torch.constant.str", "torch.vtensor.literal")
_INT_MAX = 2**63 - 1
_MINUS_ONE = object()  # the coefficient of -h


class _NotAffine(Exception):
    pass


def _attributes(op) -> dict:
    return {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}


def _producer(value):
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner


def _is_zero(value) -> bool:
    """`value` is a literal or `zeros`/`zeros_like` tensor of zeros."""
    op = _producer(value)
    if op is None:
        return False
    if op.name == "torch.vtensor.literal":
        attr = op.attributes["value"]
        return isinstance(attr, ir.DenseElementsAttr) and attr.is_splat and str(attr.get_splat_value()).split(" : ")[0] in (
            "0.000000e+00", "0.0", "0")
    return op.name in ("torch.aten.zeros", "torch.aten.zeros_like", "torch.aten.new_zeros")


def _broadcast(shapes):
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            raise _NotAffine
        out.append(dims.pop() if dims else 1)
    return out


class _Lifter:
    """Builds, before the scan, the step's values over the whole sequence."""

    def __init__(self, scan):
        self.scan = scan
        self.loc = scan.location
        attr = lambda n: ir.IntegerAttr(scan.attributes[n]).value  # noqa: E731
        self.n, self.k = attr("num_carries"), attr("num_xs")
        self.reverse = ir.BoolAttr(scan.attributes["reverse"]).value
        self.block = scan.regions[0].blocks[0]
        self.args = list(self.block.arguments)
        self.operands = list(scan.operands)
        self.h = self.args[0]
        self.length = _tensor_type(self.operands[self.n].type)[0][0]
        self.created: list = []
        self.lifted: dict = {}  # body value -> its value over the sequence, or an outer value
        for j in range(self.k):
            self.lifted[self.args[self.n + j]] = self.operands[self.n + j]
        for c, v in enumerate(self.operands[self.n + self.k :]):
            self.lifted[self.args[self.n + self.k + c]] = v
        self.stacked = {self.operands[self.n + j] for j in range(self.k)}
        self.new_carry = list(self.block.operations)[-1].operands[0]
        self.states = None  # the carry after each step, once scanned
        self._states_before = None
        self._padded = None
        self._reads_h: dict = {}

    # -- building ---------------------------------------------------------------------------
    def op(self, name, operands, result_type, attributes=None):
        op = ir.Operation.create(name, results=[result_type], operands=list(operands),
                                 attributes=attributes or {}, loc=self.loc)
        self.created.append(op)
        return op.result

    def int(self, v):
        return self.op("torch.constant.int", [], ir.Type.parse("!torch.int"), {"value": i64_attr(v)})

    def _aligned(self, operands, rank: int) -> bool:
        """Whether an elementwise op of result rank `rank` (per step) reads a stacked operand; then
        each stacked operand must have the step's full rank (its steps along the new dim 0) and
        each other one at most that rank, so that broadcasting lines their dims up as in the step."""
        tensors = [(v, len(_tensor_type(v.type)[0])) for v in operands if _tensor_type(v.type) is not None]
        stacked = any(v in self.stacked for v, _ in tensors)
        if stacked and any((r != rank + 1) if v in self.stacked else (r > rank) for v, r in tensors):
            raise _NotAffine
        return stacked

    def binary(self, name, a, b):
        self._aligned([a, b], max(len(_tensor_type(v.type)[0]) - (v in self.stacked) for v in (a, b)))
        shape = _broadcast([_tensor_type(a.type)[0], _tensor_type(b.type)[0]])
        operands = [a, b, self.int(1)] if name in ("torch.aten.add.Tensor", "torch.aten.sub.Tensor") else [a, b]
        out = self.op(name, operands, _vtensor(shape, _tensor_type(a.type)[1]))
        if a in self.stacked or b in self.stacked:
            self.stacked.add(out)
        return out

    def slice(self, value, start, end):
        """value[start:end] along dim 0 (`end` may be _INT_MAX, either may be negative)."""
        shape, dtype = _tensor_type(value.type)
        size = 1 if (start, end) in ((-1, _INT_MAX), (0, 1)) else None  # one row of a source that has one
        if shape[0] is not None:
            lo, hi = (max(0, min(i + shape[0] if i < 0 else i, shape[0])) for i in (start, end))
            size = max(0, hi - lo)
        return self.op("torch.aten.slice.Tensor", [value, self.int(0), self.int(start), self.int(end), self.int(1)],
                       _vtensor([size, *shape[1:]], dtype))

    def squeeze0(self, value):
        shape, dtype = _tensor_type(value.type)
        return self.op("torch.aten.squeeze.dim", [value, self.int(0)], _vtensor(shape[1:], dtype))

    def unsqueeze0(self, value):
        shape, dtype = _tensor_type(value.type)
        return self.op("torch.aten.unsqueeze", [value, self.int(0)], _vtensor([1, *shape], dtype))

    def cat0(self, parts):
        shapes = [_tensor_type(p.type)[0] for p in parts]
        items = self.op("torch.prim.ListConstruct", parts, ir.Type.parse("!torch.list<vtensor>"))
        rows = None if any(s[0] is None for s in shapes) else sum(s[0] for s in shapes)
        out = self.op("torch.aten.cat", [items, self.int(0)], _vtensor([rows, *shapes[0][1:]], _tensor_type(parts[0].type)[1]))
        self.stacked.add(out)
        return out

    # -- lifting ----------------------------------------------------------------------------
    def padded(self):
        """h0 and the scanned states in scan order (T + 1 rows, h0 first): row t of it is the
        carry before step t, its last row the final carry, h0 itself when there is no step."""
        if self._padded is None:
            h0 = self.unsqueeze0(self.operands[0])
            self._padded = self.cat0([self.states, h0] if self.reverse else [h0, self.states])
        return self._padded

    def states_before(self):
        """The carry before each step: h0 where the scan starts, the scanned states shifted by one."""
        if self._states_before is None:
            padded = self.padded()
            self._states_before = self.slice(padded, 1, _INT_MAX) if self.reverse else self.slice(padded, 0, -1)
            self.stacked.add(self._states_before)
        return self._states_before

    def final_carry(self):
        if self.length is None:  # maybe no step at all: the padded states' end, h0 then
            padded = self.padded()
            last = self.slice(padded, 0, 1) if self.reverse else self.slice(padded, -1, _INT_MAX)
        else:
            last = self.slice(self.states, 0, 1) if self.reverse else self.slice(self.states, -1, _INT_MAX)
        return self.squeeze0(last)

    def lift(self, value):
        if value in self.lifted:
            return self.lifted[value]
        if value == self.h:
            if self.states is None:
                raise _NotAffine  # a_t or b_t reads h
            return self.states_before()
        if self.states is not None and value == self.new_carry:
            return self.states
        op = _producer(value)
        if op is None:
            raise _NotAffine
        if op.name in _CONSTANTS:
            out = self.op(op.name, [], value.type, _attributes(op))
        elif op.name in LIFTABLE:
            operands = [self.lift(v) for v in op.operands]
            result = _tensor_type(value.type)
            if result is None:
                raise _NotAffine
            stacked = self._aligned(operands, len(result[0]))
            out = self.op(op.name, operands, _vtensor([self.length, *result[0]] if stacked else result[0], result[1]),
                          _attributes(op))
            if stacked:
                self.stacked.add(out)
        else:
            raise _NotAffine
        self.lifted[value] = out
        return out

    def depends_on_h(self, value) -> bool:
        if value not in self._reads_h:
            op = _producer(value)
            self._reads_h[value] = value == self.h or (op is not None and any(self.depends_on_h(v) for v in op.operands))
        return self._reads_h[value]

    def affine(self, value):
        """(a, b) over the sequence with value = a * h + b; a is None for 1 (_MINUS_ONE for -1), b
        None for 0."""
        if value == self.h:
            return None, None
        op = _producer(value)
        if op is None:
            raise _NotAffine
        dep = [self.depends_on_h(v) for v in op.operands]
        name = op.name
        if name == "torch.aten.clone":
            return self.affine(op.operands[0])
        if name == "torch.aten.neg":
            a, b = self.affine(op.operands[0])
            a = _MINUS_ONE if a is None else None if a is _MINUS_ONE else self._neg(a)
            return a, (None if b is None else self._neg(b))
        if name in ("torch.aten.add.Tensor", "torch.aten.sub.Tensor"):
            if _const_int_value(op.operands[2]) != 1:
                raise _NotAffine
            p, q = op.operands[:2]
            sub = name.endswith("sub.Tensor")
            if dep[0] and not dep[1]:
                a, b = self.affine(p)
                return a, self._add(b, self.lift(q), sub)
            if dep[1] and not dep[0] and not sub:
                a, b = self.affine(q)
                return a, self._add(b, self.lift(p), False)
            raise _NotAffine  # h on both sides (h + h, h - h) or subtracted
        if name in ("torch.aten.mul.Tensor", "torch.aten.div.Tensor"):
            p, q = op.operands
            if name.endswith("div.Tensor") and dep[1]:
                raise _NotAffine
            if dep[0] == dep[1]:
                raise _NotAffine
            inner, factor = (p, q) if dep[0] else (q, p)
            a, b = self.affine(inner)
            f = self.lift(factor)
            kind = "torch.aten.mul.Tensor" if name.endswith("mul.Tensor") else "torch.aten.div.Tensor"
            if a is None or a is _MINUS_ONE:
                scaled = f if kind.endswith("mul.Tensor") else self._unary("torch.aten.reciprocal", f)
                a = self._neg(scaled) if a is _MINUS_ONE else scaled
            else:
                a = self.binary(kind, a, f)
            return a, (None if b is None else self.binary(kind, b, f))
        raise _NotAffine

    def _unary(self, name, v):
        out = self.op(name, [v], v.type)
        if v in self.stacked:
            self.stacked.add(out)
        return out

    def _neg(self, v):
        return self._unary("torch.aten.neg", v)

    def _add(self, b, q, sub):
        if b is None:
            return self._neg(q) if sub else q
        return self.binary("torch.aten.sub.Tensor" if sub else "torch.aten.add.Tensor", b, q)

    def drop(self):
        for op in reversed(self.created):
            op.erase()


def _combine(a1, b1, a2, b2):
    """(a1, b1) then (a2, b2): h ↦ a2 (a1 h + b1) + b2."""
    one = ir.Operation.create("torch.constant.int", results=[ir.Type.parse("!torch.int")],
                              attributes={"value": i64_attr(1)}).result
    mul = lambda x, y: ir.Operation.create("torch.aten.mul.Tensor", results=[x.type], operands=[x, y]).result  # noqa: E731
    b = ir.Operation.create("torch.aten.add.Tensor", results=[b1.type], operands=[mul(a2, b1), b2, one]).result
    return [mul(a1, a2), b]


def _eligible(scan) -> bool:
    attr = lambda n: ir.IntegerAttr(scan.attributes[n]).value  # noqa: E731
    if attr("num_carries") != 1 or attr("num_xs") < 1 or attr("dim") != 0 or len(scan.regions[0].blocks) != 1:
        return False
    operands, results = list(scan.operands), list(scan.results)
    types = [_tensor_type(v.type) for v in [*operands, *results]]
    if any(t is None for t in types):
        return False
    carry, first_result = types[0], types[len(operands)]
    return carry == first_result and carry[1] in ("f32", "f64", "f16", "bf16")


def _rewrite(scan) -> bool:
    lifter = _Lifter(scan)
    with ir.InsertionPoint(scan), lifter.loc:
        try:
            a, b = lifter.affine(lifter.new_carry)
            if a is None or a is _MINUS_ONE or b is None or a not in lifter.stacked or b not in lifter.stacked:
                raise _NotAffine  # a constant decay or a plain sum: no per-step pair to scan
            slice_shape = _tensor_type(lifter.operands[0].type)[0]
            want = [lifter.length, *slice_shape]
            if _tensor_type(a.type)[0] != want or _tensor_type(b.type)[0] != want or a.type != b.type:
                raise _NotAffine
            pairs = build_associative_scan([a, b], [], _combine, dim=0, reverse=lifter.reverse, loc=lifter.loc)
            lifter.created.append(pairs)
            lifter.stacked.update(pairs.results)
            states = pairs.results[1]
            if not _is_zero(lifter.operands[0]):
                states = lifter.binary("torch.aten.add.Tensor",
                                       lifter.binary("torch.aten.mul.Tensor", pairs.results[0], lifter.operands[0]), states)
            lifter.states = states
            results = list(scan.results)
            ys = [lifter.lift(v) for v in list(lifter.block.operations)[-1].operands[1:]]
            if any(y not in lifter.stacked or y.type != r.type for y, r in zip(ys, results[1:])):
                raise _NotAffine
            final = None
            if list(results[0].uses):
                final = lifter.final_carry()
                if final.type != results[0].type:
                    raise _NotAffine
        except _NotAffine:
            lifter.drop()
            return False
    if final is not None:
        results[0].replace_all_uses_with(final)
    for r, y in zip(results[1:], ys):
        r.replace_all_uses_with(y)
    scan.erase()
    return True


@tidal_pass("tidal-affine-scans",
            "A scan whose carry is affine in itself becomes an associative_scan of the affine maps, the rest "
            "of its step lifted over the sequence (GPU backend)")
def affine_scans(module_op):
    for scan in ops_named(module_op, {"tidal.scan"}):
        if _eligible(scan):
            _rewrite(scan)
