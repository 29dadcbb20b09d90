"""Random valid PyTorch programs with control flow, for differential fuzzing of tidal against eager.

A program is described by a small tree of frozen dataclasses (`Program` → `Block` → ops), drawn by
the hypothesis strategy `programs()`, so hypothesis shrinks a failing program op by op. The
description is rendered to Python source (`source_of`), which is what a failure prints: paste it
into a file, add `model = program` and `example_inputs = make_inputs(desc)`, and `tidal-compile
--run` reproduces it.

Every block maps a "state" tensor `v` to a tensor of the SAME shape and dtype, so any block may
appear anywhere: as a cond branch, a while_loop body, a scan step (on the scanned slice's shape), a
map body (on a row's shape). Control-flow ops nest up to `MAX_DEPTH` deep:

  cond             pred is computed data (`v.sum() > t`, `v.amax() > t`) or a captured input
  while_loop       an int64 counter carry (`i < n`, n in 1..3), optionally AND a data predicate
  scan             over any dim of the state, reverse or not, zeros/first-slice/input init, an
                   optional extra int64 counter carry; ys are stacked on that dim and the final
                   carry is broadcast back, so the output keeps the state's shape
  map              over dim 0, optionally with an explicit extra argument
  associative_scan (generic mode) add / mul / max (where) / the (a, b) linear-recurrence combine

Leaves are elementwise ops (add/sub/mul/where with the state itself, a captured input of a
broadcastable shape — size-1 dims included — or a Python scalar; tanh/sigmoid/relu/exp of clamped
values/abs/neg), matmul with a captured square weight, and reductions (sum/mean/amax over a dim,
keepdim) combined back into the state. Values are kept bounded with `clamp` after every op that can
grow them, so float32 results stay comparable with `rtol=1e-4, atol=1e-5` and int64 never
overflows. dtypes: float32, float64 and int64 (int64 programs use no division, mean, or
transcendental functions).

Every captured input is a top-level argument of `program`, referenced by closure inside bodies.
Scans always have length >= 1 (torch rejects length-0 scans).

Gradient mode (`grad_programs()`, `check_gradients`): float programs only, at most
`GRAD_MAX_DEPTH` deep and `GRAD_MAX_OPS` ops a block, always through
`torch.compile(backend="tidal", options={"fallback": "error"})` with every input requiring grad.
Values are bounded by `10 * tanh(x / 10)` instead of clamp (whose gradient is 0 wherever it
bounds, and a subgradient at the bounds) and exp's argument by `3 * tanh(x / 3) - 1`. The
reference is `loop_source_of(desc)`: the same rendering with Python loops for the control-flow
ops, differentiated by eager autograd; its forward is checked against eager's HOPs first. Kinks
are left in (relu, abs, where-based max/min, amax): the inputs are random, so a kink is met only
where a value is exactly 0 or two values exactly equal by construction (`v - v`, a broadcast copy),
and there tidal and eager take PyTorch's same subgradient.

Left out on purpose:
  * associative_scan nested inside another control-flow body: tidal cannot capture it yet
    (test_regressions.py::test_regression_associative_scan_nested_in_cond);
    TIDAL_FUZZ_NESTED_ASSOC_SCAN=1 generates it anyway.
  * matmul of a rank-3 state inside a body: torch.export itself fails on it (a symbolic stride
    `(s**2)//s` in cond), so tidal never sees the program.
  * integer division/remainder (tidal refuses integer division by a tensor since a zero divisor
    crashed the process: test_regressions.py::test_regression_integer_division_by_zero_sigfpe) and
    NaN/inf inputs: values are random in [-2, 2] (float) or [-5, 5] (int64).
  * programs on which eager PyTorch itself fails with a known Dynamo bug (EAGER_TORCH_BUGS) are
    discarded; any other eager failure is reported as a GeneratorBug.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import types
import warnings
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree
from hypothesis import strategies as st

MAX_DEPTH = 3
MAX_OPS = 3  # per block
# A training step compiles a forward and a backward program, and eager runs the HOPs and the loop
# reference: gradient-mode programs are smaller, so that 200 of them fit CI's budget.
GRAD_MAX_DEPTH = 2
GRAD_MAX_OPS = 2
MAX_DIM = 4
MAX_RANK = 3

# associative_scan inside another control-flow body cannot be compiled yet (test_regressions.py::
# test_regression_associative_scan_nested_in_cond): set TIDAL_FUZZ_NESTED_ASSOC_SCAN=1 to fuzz it.
NESTED_ASSOCIATIVE_SCAN = os.environ.get("TIDAL_FUZZ_NESTED_ASSOC_SCAN", "0") == "1"

FLOAT_BOUND = 10.0
INT_BOUND = 1000

# ---------------------------------------------------------------------------------------------
# The description
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    shape: tuple[int, ...]
    dtype: str  # "float32" | "float64" | "int64"


@dataclass(frozen=True)
class Operand:
    """The right-hand side of a binary op: the state itself, captured input #k, or a scalar."""

    kind: str  # "self" | "input" | "scalar"
    value: float | int = 0


@dataclass(frozen=True)
class Unary:
    op: str  # tanh sigmoid relu exp abs neg


@dataclass(frozen=True)
class Binary:
    op: str  # add sub mul max min
    rhs: Operand


@dataclass(frozen=True)
class MatMul:
    weight: int  # captured input index of an (n, n) weight


@dataclass(frozen=True)
class Reduce:
    kind: str  # sum mean amax
    dim: int
    combine: str  # add sub mul


@dataclass(frozen=True)
class Block:
    ops: tuple


@dataclass(frozen=True)
class Cond:
    pred: str  # "sum" | "amax" | "input"
    threshold: float | int
    pred_input: int  # captured input index for pred == "input" (else -1)
    then: Block
    orelse: Block


@dataclass(frozen=True)
class While:
    n: int
    data_pred: bool
    body: Block


@dataclass(frozen=True)
class Scan:
    dim: int
    reverse: bool
    init: str  # "zeros" | "first" | "input"
    init_input: int
    counter: bool
    body: Block


@dataclass(frozen=True)
class Map:
    extra_arg: int  # captured input passed as map's explicit arg, or -1
    body: Block


@dataclass(frozen=True)
class AssocScan:
    combine: str  # add mul max linrec
    dim: int
    reverse: bool


@dataclass(frozen=True)
class Program:
    state: Spec
    inputs: tuple[Spec, ...]
    body: Block
    seed: int
    via: str = "export"  # "export" (compile_program) | "dynamo" (torch.compile(backend="tidal"))
    grad: bool = False  # gradient mode: bounded smoothly (tanh) instead of by clamp


CONTROL_FLOW = (Cond, While, Scan, Map, AssocScan)


def depth_of(block: Block) -> int:
    d = 0
    for op in block.ops:
        if isinstance(op, Cond):
            d = max(d, 1 + max(depth_of(op.then), depth_of(op.orelse)))
        elif isinstance(op, (While, Scan, Map)):
            d = max(d, 1 + depth_of(op.body))
        elif isinstance(op, AssocScan):
            d = max(d, 1)
    return d


# ---------------------------------------------------------------------------------------------
# The strategy
# ---------------------------------------------------------------------------------------------


class _Drawer:
    """Draws blocks for one program, collecting the captured inputs they reference."""

    def __init__(self, draw, dtype: str, max_depth: int = MAX_DEPTH, max_ops: int = MAX_OPS, grad: bool = False,
                 integer_matmul: bool = True):
        self.draw = draw
        self.dtype = dtype
        self.grad = grad
        self.integer_matmul = integer_matmul
        self.max_depth = max_depth
        self.max_ops = max_ops
        self.inputs: list[Spec] = []

    @property
    def is_int(self) -> bool:
        return self.dtype == "int64"

    def new_input(self, shape) -> int:
        self.inputs.append(Spec(tuple(shape), self.dtype))
        return len(self.inputs) - 1

    def broadcast_input(self, shape) -> int:
        """A captured input whose shape broadcasts to `shape` (some dims 1, maybe fewer dims)."""
        draw = self.draw
        drop = draw(st.integers(0, len(shape)))
        kept = shape[drop:]
        ones = draw(st.lists(st.booleans(), min_size=len(kept), max_size=len(kept)))
        return self.new_input(tuple(1 if one else d for d, one in zip(kept, ones)))

    def scalar(self):
        if self.is_int:
            return self.draw(st.integers(-3, 3))
        return self.draw(st.sampled_from([0.5, -1.0, 1.5, 0.25, -0.75, 2.0]))

    def operand(self, shape) -> Operand:
        kind = self.draw(st.sampled_from(["input", "scalar", "self"]))
        if kind == "input":
            return Operand("input", self.broadcast_input(shape))
        if kind == "scalar":
            return Operand("scalar", self.scalar())
        return Operand("self")

    def block(self, shape, depth: int) -> Block:
        n = self.draw(st.integers(1, self.max_ops))
        return Block(tuple(self.op(shape, depth) for _ in range(n)))

    def op(self, shape, depth: int):
        draw = self.draw
        rank = len(shape)
        kinds = ["unary", "binary"]
        if rank >= 1:
            kinds += ["reduce"]
        # torch.export (not tidal) fails on a 3-d matmul followed by an elementwise op inside a cond
        # branch when two dims are equal: "cond's output stride is not a simple accumulative
        # multiplication of sizes" (size (s, (s**2)//s, k)). Rank-3 matmuls stay at the top level.
        # Eager CUDA has no integer matmul ("addmm_cuda" not implemented for 'Long'): a program
        # drawn for CUDA (integer_matmul=False) multiplies integers elementwise only.
        if (1 <= rank <= 2 or (rank == 3 and depth == 0)) and (self.integer_matmul or not self.is_int):
            kinds += ["matmul"]
        if depth < self.max_depth:
            kinds += ["cond", "while"]
            if rank >= 1:
                kinds += ["scan", "map"]
                if depth == 0 or NESTED_ASSOCIATIVE_SCAN:
                    kinds += ["assoc_scan"]
        kind = draw(st.sampled_from(kinds))
        if kind == "unary":
            ops = ["neg", "abs", "relu"] if self.is_int else ["neg", "tanh", "abs", "relu", "sigmoid", "exp"]
            return Unary(draw(st.sampled_from(ops)))
        if kind == "binary":
            return Binary(draw(st.sampled_from(["add", "mul", "sub", "max", "min"])), self.operand(shape))
        if kind == "reduce":
            kinds = ["sum", "amax"] if self.is_int else ["sum", "mean", "amax"]
            return Reduce(draw(st.sampled_from(kinds)), draw(st.integers(0, rank - 1)),
                          draw(st.sampled_from(["sub", "add", "mul"])))
        if kind == "matmul":
            n = shape[-1]
            return MatMul(self.new_input((n, n)))
        if kind == "cond":
            pred = draw(st.sampled_from(["sum", "amax", "input"]))
            pred_input = self.broadcast_input(shape) if pred == "input" else -1
            threshold = self.scalar() if pred != "input" else 0
            then, orelse = self.block(shape, depth + 1), self.block(shape, depth + 1)
            return Cond(pred, threshold, pred_input, then, orelse)
        if kind == "while":
            n, data_pred = draw(st.integers(1, 3)), draw(st.booleans())
            return While(n, data_pred, self.block(shape, depth + 1))
        if kind == "scan":
            dim = draw(st.integers(0, rank - 1))
            slice_shape = shape[:dim] + shape[dim + 1:]
            init = draw(st.sampled_from(["zeros", "first", "input"]))
            init_input = self.new_input(slice_shape) if init == "input" else -1
            reverse, counter = draw(st.booleans()), draw(st.booleans())
            body = self.block(slice_shape, depth + 1)
            return Scan(dim, reverse, init, init_input, counter, body)
        if kind == "map":
            extra = self.broadcast_input(shape[1:]) if draw(st.booleans()) else -1
            return Map(extra, self.block(shape[1:], depth + 1))
        assert kind == "assoc_scan"
        combine = draw(st.sampled_from(["add", "max", "mul", "linrec"]))
        dim = draw(st.integers(0, rank - 1))
        return AssocScan(combine, dim, draw(st.booleans()))


@st.composite
def programs(draw, dtypes=("float32", "float64", "int64"), dynamo_fraction: int = 5, integer_matmul: bool = True):
    """A random valid `Program`. One in `dynamo_fraction` goes through torch.compile (0: never).
    `integer_matmul=False`: no matmul in int64 programs (for CUDA, whose eager has none)."""
    # Drawn first: a choice drawn after a large body is starved (hypothesis' buffer runs out).
    via = "export"
    if dynamo_fraction and draw(st.integers(0, dynamo_fraction - 1)) == dynamo_fraction - 1:
        via = "dynamo"
    return _program(draw, dtypes, via, MAX_DEPTH, MAX_OPS, grad=False, integer_matmul=integer_matmul)


@st.composite
def grad_programs(draw):
    """A random valid float `Program` for gradient mode (`check_gradients`): always through
    torch.compile, at most `GRAD_MAX_DEPTH` deep and `GRAD_MAX_OPS` ops a block."""
    return _program(draw, ("float32", "float64"), "dynamo", GRAD_MAX_DEPTH, GRAD_MAX_OPS, grad=True)


def _program(draw, dtypes, via: str, max_depth: int, max_ops: int, grad: bool, integer_matmul: bool = True) -> Program:
    dtype = draw(st.sampled_from(tuple(dtypes) + ("float32",) * ("float32" in dtypes)))  # float32: x2 weight
    rank = draw(st.integers(0, MAX_RANK))
    shape = tuple(draw(st.integers(1, MAX_DIM)) for _ in range(rank))
    drawer = _Drawer(draw, dtype, max_depth, max_ops, grad, integer_matmul)
    body = drawer.block(shape, 0)
    seed = draw(st.integers(0, 2**16))
    return Program(Spec(shape, dtype), tuple(drawer.inputs), body, seed, via, grad)


# ---------------------------------------------------------------------------------------------
# Rendering to Python source
# ---------------------------------------------------------------------------------------------


@dataclass
class _Emitter:
    dtype: str
    smooth: bool = False
    lines: list[str] = field(default_factory=list)
    counter: int = 0

    @property
    def is_int(self) -> bool:
        return self.dtype == "int64"

    @property
    def bound(self) -> str:
        return f"{INT_BOUND}" if self.is_int else f"{FLOAT_BOUND}"

    def clamp(self, expr: str) -> str:
        if self.smooth:
            # clamp's gradient is 0 wherever it bounds a value, which would hide most of a deep
            # program's gradient, and is a subgradient choice at the bounds themselves.
            return f"{self.bound} * torch.tanh(({expr}) / {self.bound})"
        return f"({expr}).clamp(-{self.bound}, {self.bound})"

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def operand(self, rhs: Operand) -> str:
        if rhs.kind == "self":
            return "v"
        if rhs.kind == "input":
            return f"in{rhs.value}"
        return repr(rhs.value)

    def block(self, block: Block, indent: int) -> None:
        for op in block.ops:
            self.op(op, indent)

    def op(self, op, ind: int) -> None:  # noqa: C901 - one case per op kind
        e = self.emit
        if isinstance(op, Unary):
            expr = {
                "neg": "-v",
                "abs": "v.abs()",
                "relu": "torch.relu(v)",
                "tanh": "torch.tanh(v)",
                "sigmoid": "torch.sigmoid(v)",
                "exp": "torch.exp(3.0 * torch.tanh(v / 3.0) - 1.0)" if self.smooth else "torch.exp(v.clamp(-4.0, 2.0))",
            }[op.op]
            e(ind, f"v = {expr}")
        elif isinstance(op, Binary):
            r = self.operand(op.rhs)
            if op.op in ("max", "min"):
                cmp = ">" if op.op == "max" else "<"
                # `in_k` broadcasts to v's shape; a Python scalar keeps v's dtype.
                e(ind, f"v = torch.where(v {cmp} {r}, v, {r})")
            else:
                sym = {"add": "+", "sub": "-", "mul": "*"}[op.op]
                e(ind, f"v = {self.clamp(f'v {sym} {r}')}")
        elif isinstance(op, MatMul):
            # `.reshape(v.shape)` ties the result's last dim to v's: torch traces bodies with symbolic
            # sizes, and `v @ w` would get w's size symbol, so the two branches of a cond inside a
            # while_loop body would disagree (an unbacked size; eager rejects the carry).
            e(ind, f"v = (v @ in{op.weight}).reshape(v.shape)")
        elif isinstance(op, Reduce):
            red = f"v.{op.kind}(dim={op.dim}, keepdim=True)"
            sym = {"add": "+", "sub": "-", "mul": "*"}[op.combine]
            e(ind, f"v = {self.clamp(f'v {sym} {red}')}")
        elif isinstance(op, Cond):
            t, f = self.fresh("then"), self.fresh("orelse")
            for name, body in ((t, op.then), (f, op.orelse)):
                e(ind, f"def {name}(v):")
                self.block(body, ind + 1)
                e(ind + 1, "return v")
            pred = {
                "sum": f"v.sum() > {op.threshold!r}",
                "amax": f"v.amax() > {op.threshold!r}",
                "input": f"in{op.pred_input}.sum() > 0",
            }[op.pred]
            e(ind, f"v = cond({pred}, {t}, {f}, (v,))")
        elif isinstance(op, While):
            c, b = self.fresh("while_cond"), self.fresh("while_body")
            e(ind, f"def {c}(i, v):")
            limit = "50" if self.is_int else "5.0"
            pred = f"(i < {op.n}) & (v.abs().amax() < {limit})" if op.data_pred else f"i < {op.n}"
            e(ind + 1, f"return {pred}")
            e(ind, f"def {b}(i, v):")
            self.block(op.body, ind + 1)
            e(ind + 1, "return i + 1, v")
            # every tensor the program makes is on the state's device (v.device): a counter made
            # without one would be on the CPU beside CUDA data, or depend on a torch.device context
            e(ind, f"_, v = while_loop({c}, {b}, (torch.zeros((), dtype=torch.int64, device=v.device), v))")
        elif isinstance(op, Scan):
            s = self.fresh("scan_step")
            carry = "(c, k)" if op.counter else "c"
            e(ind, f"def {s}({'carry' if op.counter else 'c'}, xt):")
            if op.counter:
                e(ind + 1, "c, k = carry")
            e(ind + 1, f"v = _dense({self.clamp('c + xt')})")
            self.block(op.body, ind + 1)
            nxt = "(_dense(v), k + 1)" if op.counter else "_dense(v)"
            e(ind + 1, f"return {nxt}, _dense(v)")
            init = {
                "zeros": f"_dense(torch.zeros_like(v.select({op.dim}, 0)))",
                "first": f"_dense(v.select({op.dim}, 0))",
                "input": f"in{op.init_input}",
            }[op.init]
            if op.counter:
                init = f"({init}, torch.zeros((), dtype=torch.int64, device=v.device))"
            e(ind, f"{carry}, ys = scan({s}, {init}, v, dim={op.dim}, reverse={op.reverse})")
            extra = " + k" if op.counter else ""
            e(ind, f"v = _dense({self.clamp(f'ys + c.unsqueeze({op.dim}){extra}')})")
        elif isinstance(op, Map):
            m = self.fresh("map_fn")
            if op.extra_arg >= 0:
                e(ind, f"def {m}(xt, a):")
                e(ind + 1, f"v = _dense({self.clamp('xt + a')})")
            else:
                e(ind, f"def {m}(xt):")
                e(ind + 1, "v = _dense(xt)")
            self.block(op.body, ind + 1)
            e(ind + 1, "return v")
            args = f", in{op.extra_arg}" if op.extra_arg >= 0 else ""
            e(ind, f"v = map({m}, v{args})")
        elif isinstance(op, AssocScan):
            c = self.fresh("combine")
            kw = f"dim={op.dim}, reverse={op.reverse}, combine_mode=\"generic\""
            if op.combine == "linrec":
                e(ind, f"def {c}(left, right):")
                e(ind + 1, "a1, b1 = left")
                e(ind + 1, "a2, b2 = right")
                e(ind + 1, "return a1 * a2, a2 * b1 + b2")
                decay = "v.clamp(-1, 1)" if self.is_int else "torch.sigmoid(v)"
                e(ind, f"_, v = associative_scan({c}, ({decay}, v), {kw})")
            else:
                e(ind, f"def {c}(a, b):")
                body = {"add": "a + b", "mul": "a * b", "max": "torch.where(a > b, a, b)"}[op.combine]
                e(ind + 1, f"return {body}")
                e(ind, f"v = associative_scan({c}, v, {kw})")
            e(ind, f"v = _dense({self.clamp('v')})")
        else:
            raise TypeError(op)


_DENSE = """

def _dense(t):
    # A fresh row-major copy: torch requires scan carries and cond branches to agree on strides
    # (size-1 dims included), and slices along dim > 0 are strided.
    return t.clone(memory_format=torch.contiguous_format)
"""

HEADER = """import torch
from torch._higher_order_ops import associative_scan, cond, map, scan, while_loop
""" + _DENSE

# The same program with every control-flow op run as a Python loop (or `if`): the gradient
# reference, differentiated by eager autograd of plain aten ops, not by PyTorch's HOP autograd
# (wrong for a while_loop that runs zero times: shared/design/FOUNDATION.md "Eager's own mistakes").
LOOP_HEADER = """import torch
from fuzz_programs import python_associative_scan as associative_scan
from fuzz_programs import python_cond as cond
from fuzz_programs import python_map as map
from loop_reference import python_scan as scan
from loop_reference import python_while_loop as while_loop
""" + _DENSE


def python_cond(pred, true_fn, false_fn, operands):
    return true_fn(*operands) if bool(pred) else false_fn(*operands)


def python_map(fn, xs, *args):
    return torch.stack([fn(x, *args) for x in xs.unbind(0)])


def python_associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="generic"):
    """The inclusive prefix of `xs` along `dim`, one combine per step, left to right (right to
    left if `reverse`: torch scans the flipped input, so the running value is the left operand)."""
    leaves, spec = pytree.tree_flatten(xs)
    steps = range(leaves[0].shape[dim])
    running, out = None, {}
    for t in reversed(steps) if reverse else steps:
        x = pytree.tree_unflatten([leaf.select(dim, t) for leaf in leaves], spec)
        running = x if running is None else combine_fn(running, x)
        out[t] = pytree.tree_leaves(running)
    stacked = [torch.stack(column, dim) for column in zip(*(out[t] for t in steps))]
    return pytree.tree_unflatten(stacked, spec)


def _render(desc: Program, header: str) -> str:
    em = _Emitter(desc.state.dtype, smooth=desc.grad)
    params = ", ".join(["v"] + [f"in{i}" for i in range(len(desc.inputs))])
    em.emit(0, f"def program({params}):")
    em.block(desc.body, 1)
    em.emit(1, "return v")
    return header + "\n\n" + "\n".join(em.lines) + "\n"


def source_of(desc: Program) -> str:
    """Python source defining `program(v, in0, in1, ...)` for `desc`."""
    return _render(desc, HEADER)


def loop_source_of(desc: Program) -> str:
    """`source_of(desc)` with Python loops and `if`s for the control-flow ops (test/python must be
    on sys.path: the loops are this module's and loop_reference.py's)."""
    return _render(desc, LOOP_HEADER)


_built = 0


def build(desc: Program, loops: bool = False):
    """(the `program` callable, its source): `source_of(desc)`, or `loop_source_of(desc)` if
    `loops`. The source is registered with linecache, so tracebacks and tidal's diagnostics show
    the generated lines."""
    global _built
    src = loop_source_of(desc) if loops else source_of(desc)
    _built += 1
    filename = f"<tidal-fuzz-{_built}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    # A real module in sys.modules: Dynamo imports the module of the function's globals.
    module = types.ModuleType(f"tidal_fuzz_{_built}")
    sys.modules[module.__name__] = module
    exec(compile(src, filename, "exec"), module.__dict__)  # noqa: S102 - our own generated source
    return module.program, src


def make_inputs(desc: Program, device="cpu") -> tuple:
    """The state and the captured inputs, deterministic in `desc.seed` (drawn on the CPU, then
    moved to `device`)."""
    g = torch.Generator().manual_seed(desc.seed)

    def tensor(spec: Spec, scale: float = 1.0):
        if spec.dtype == "int64":
            return torch.randint(-5, 6, spec.shape, generator=g, dtype=torch.int64, device="cpu")
        t = (torch.rand(spec.shape, generator=g, dtype=torch.float64, device="cpu") * 4 - 2) * scale
        return t.to(getattr(torch, spec.dtype))

    out = [tensor(desc.state)]
    for spec in desc.inputs:
        square = len(spec.shape) == 2 and spec.shape[0] == spec.shape[1]
        # A weight (n, n) scaled by 1/n keeps matmul non-expansive (in the max norm).
        out.append(tensor(spec, 1.0 / spec.shape[0] / 2 if square and spec.dtype != "int64" else 1.0))
    return tuple(t.to(device) for t in out)


def tolerances(dtype: str) -> dict:
    if dtype == "int64":
        return {"rtol": 0, "atol": 0}
    if dtype == "float64":
        return {"rtol": 1e-7, "atol": 1e-9}
    return {"rtol": 1e-4, "atol": 1e-5}


_VIA = {"dynamo": 'torch.compile(program, backend="tidal")', "export": "tidal.compiler.compile_program"}
_VIA_GRAD = 'torch.compile(program, backend="tidal", options={"fallback": "error"}), inputs requiring grad'



def reproduction(desc: Program) -> str:
    """What a failure prints: the description, the source, and how to rerun it."""
    return (
        f"description:\n  {desc!r}\n"
        f"compiled via: {_VIA_GRAD if desc.grad else _VIA[desc.via]}\n"
        f"input shapes: v={desc.state.shape} {desc.state.dtype}, "
        + ", ".join(f"in{i}={s.shape}" for i, s in enumerate(desc.inputs))
        + f"\nseed: {desc.seed} (fuzz_programs.make_inputs(desc))\n"
        f"---- generated source ----\n{source_of(desc)}--------------------------"
        + (f"\n---- its Python-loop reference (loop_source_of) ----\n{loop_source_of(desc)}"
           "--------------------------" if desc.grad else "")
    )


# Eager PyTorch itself fails on a few valid programs (Dynamo bugs in its eager HOP tracing). Such a
# program is discarded; any other eager failure means the generator is wrong (GeneratorBug).
EAGER_TORCH_BUGS = (
    # scan -> map(fn, xs, extra_arg) -> while_loop, ~1 program in 130 (torch 2.13)
    "lift_tracked_freevar_to_input should not be called on root SubgraphTracer",
)


class FuzzFailure(AssertionError):
    """tidal disagrees with eager, rejects, crashes on or falls back on a valid program."""


class GeneratorBug(Exception):
    """The generated program is not valid PyTorch (eager raises): fix fuzz_programs.py."""


class ReferenceMismatch(AssertionError):
    """The Python-loop reference's forward differs from eager's HOPs: a bug in the loops
    (`loop_source_of`, loop_reference.py) or in eager PyTorch."""


def _eager(fn, inputs, desc: Program):
    """`fn(*inputs)` in eager; a program eager rejects is the generator's fault (or torch's)."""
    try:
        return fn(*inputs)
    except Exception as exc:  # noqa: BLE001 - the generator's fault (or torch's), not tidal's
        if any(known in str(exc) for known in EAGER_TORCH_BUGS):
            from hypothesis import event, reject

            event("eager PyTorch failed (known torch bug): program discarded")
            reject()
        raise GeneratorBug(f"eager PyTorch rejected a generated program: {exc}\n{reproduction(desc)}") from exc


def _making_tensors_on(device):
    """Tensors the program makes without a device (a while_loop's counter) made on `device`."""
    return contextlib.nullcontext() if torch.device(device).type == "cpu" else torch.device(device)


def check(desc: Program, device="cpu") -> None:
    """Compile `desc` with tidal and compare with eager; raises FuzzFailure with a reproduction.
    On another device than the CPU (test_gpu_suites.py: CUDA) every program goes through
    torch.compile, strictly (options={"fallback": "error"}: a fallback raises TidalCompileError),
    and eager runs there too."""
    from tidal.compiler import compile_program
    from tidal.diagnostics import TidalError
    from tidal.dynamo import TidalFallbackWarning

    fn, _ = build(desc)
    inputs = make_inputs(desc, device)
    on_cpu = torch.device(device).type == "cpu"
    with torch.no_grad(), warnings.catch_warnings(), _making_tensors_on(device):
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        expected = _eager(fn, inputs, desc)
        if desc.via == "dynamo" or not on_cpu:
            torch._dynamo.reset()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", TidalFallbackWarning)
                strict = {} if on_cpu else {"options": {"fallback": "error"}}
                got = torch.compile(fn, backend="tidal", **strict)(*inputs)
            fallbacks = [str(w.message) for w in caught if issubclass(w.category, TidalFallbackWarning)]
            if fallbacks:
                raise FuzzFailure(f"valid program fell back to eager: {fallbacks[0]}\n{reproduction(desc)}")
        else:
            try:
                program = compile_program(fn, inputs)
            except TidalError as exc:
                raise FuzzFailure(f"tidal rejected a valid program: {exc}\n{reproduction(desc)}") from None
            except Exception as exc:  # noqa: BLE001 - anything else is a crash: report it
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                raise FuzzFailure(
                    f"compile_program crashed: {type(exc).__name__}: {first}\n{reproduction(desc)}"
                ) from exc
            got = program(*inputs)
    try:
        torch.testing.assert_close(got, expected, **tolerances(desc.state.dtype))
    except AssertionError as exc:
        raise FuzzFailure(f"tidal differs from eager: {exc}\n{reproduction(desc)}") from None


def make_weights(desc: Program, device="cpu") -> torch.Tensor:
    """The fixed random weights of the loss `(out * weights).sum()`: every output element gets its
    own cotangent, so a gradient swapped between elements is seen."""
    g = torch.Generator().manual_seed(desc.seed + 1)
    weights = torch.rand(desc.state.shape, generator=g, dtype=torch.float64, device="cpu") * 2 - 1
    return weights.to(device, getattr(torch, desc.state.dtype))


def grad_tolerances(dtype: str, reference: list[torch.Tensor], reference_error: float = 0.0) -> dict:
    """Gradients sum many products (a scan's adjoint over every step), so an entry can cancel to
    far below its terms: absolute error is measured against the largest reference gradient. For
    float32, `reference_error` is the float32 reference's own greatest error against the same
    loops in float64: where the program is ill-conditioned (1 - tanh² of a saturated tanh, a
    cancelling sum) a gradient computed as correctly but in another order (tidal's few-ulp
    vectorized tanh, fused reductions) may be off by a few times as much."""
    scale = max([1.0] + [float(g.abs().max()) for g in reference if g.numel()])
    if dtype == "float64":
        return {"rtol": 1e-6, "atol": 1e-9 * scale}
    return {"rtol": 1e-3, "atol": 1e-5 * scale + 8 * reference_error}


def _float64_errors(loop_fn, inputs, weights, reference, reference_grads) -> tuple[float, float]:
    """The float32 reference's greatest error against the same loops run in float64: (output,
    gradients)."""
    leaves = [x.double().requires_grad_() for x in inputs]
    exact = loop_fn(*leaves)
    out_error = float((reference.detach().double() - exact.detach()).abs().max()) if exact.numel() else 0.0
    exact_grads = _grads(exact, weights.double(), leaves)
    pairs = zip(reference_grads, exact_grads)
    return out_error, max([0.0] + [float((r.double() - e).abs().max()) for r, e in pairs if e.numel()])


# gradcheck (float64, finite differences) on the compiled function, for programs this small: it
# costs two calls per input element and one backward per output element.
GRADCHECK_MAX_NUMEL = 16


def _grads(out, weights, leaves) -> list[torch.Tensor]:
    (out * weights).sum().backward()
    return [x.grad if x.grad is not None else torch.zeros_like(x) for x in leaves]


def check_gradients(desc: Program, device="cpu") -> None:
    """Train-step `desc` through tidal (strict torch.compile, every input requiring grad, loss
    `(out * make_weights(desc)).sum()`) and compare the output and every input's gradient with
    eager autograd of `loop_source_of(desc)`, whose forward is first checked against eager's HOPs.
    Small float64 programs also get `torch.autograd.gradcheck` on the compiled function. With
    another `device` (test_gpu_suites.py: CUDA) tidal runs there (gradcheck too), on the same
    inputs moved there; the reference and its check against eager stay on the CPU."""
    from tidal.dynamo import TidalCompileError

    assert desc.grad and desc.state.dtype != "int64", desc
    fn, _ = build(desc)
    loop_fn, _ = build(desc, loops=True)
    inputs = make_inputs(desc)
    weights = make_weights(desc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", UserWarning)
        with torch.no_grad():
            expected = _eager(fn, inputs, desc)
        leaves = [x.clone().requires_grad_() for x in inputs]
        reference = loop_fn(*leaves)
        try:
            torch.testing.assert_close(reference.detach(), expected, **tolerances(desc.state.dtype))
        except AssertionError as exc:
            raise ReferenceMismatch(
                f"the Python-loop reference differs from eager's HOPs (forward): {exc}\n{reproduction(desc)}"
            ) from None
        reference_grads = _grads(reference, weights, leaves)
        out_error, grad_error = (_float64_errors(loop_fn, inputs, weights, reference, reference_grads)
                                 if desc.state.dtype == "float32" else (0.0, 0.0))

        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="tidal", options={"fallback": "error"})
        leaves = [x.to(device, copy=True).requires_grad_() for x in inputs]
        try:
            with _making_tensors_on(device):
                got = compiled(*leaves)
                got_grads = _grads(got, weights.to(device), leaves)
            got, got_grads = got.cpu(), [g.cpu() for g in got_grads]
        except TidalCompileError as exc:
            raise FuzzFailure(f"tidal rejected a valid program: {exc}\n{reproduction(desc)}") from None
        except Exception as exc:  # noqa: BLE001 - anything else is a crash: report it
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise FuzzFailure(
                f"the compiled training step crashed: {type(exc).__name__}: {first}\n{reproduction(desc)}"
            ) from exc
        try:
            forward_tol = dict(tolerances(desc.state.dtype))
            forward_tol["atol"] += 8 * out_error  # as for the gradients: the program's conditioning
            torch.testing.assert_close(got.detach(), reference.detach(), **forward_tol)
        except AssertionError as exc:
            raise FuzzFailure(f"tidal's forward differs from the Python loops': {exc}\n{reproduction(desc)}") from None
        tol = grad_tolerances(desc.state.dtype, reference_grads, grad_error)
        for i, (g, r) in enumerate(zip(got_grads, reference_grads)):
            try:
                torch.testing.assert_close(g, r, **tol)
            except AssertionError as exc:
                name = "v" if i == 0 else f"in{i - 1}"
                raise FuzzFailure(
                    f"tidal's gradient of {name} differs from the Python loops': {exc}\n{reproduction(desc)}"
                ) from None
        if desc.state.dtype == "float64" and sum(x.numel() for x in inputs) <= GRADCHECK_MAX_NUMEL:
            # gradcheck runs one backward per output element on one graph (retain_graph), which a
            # backward that reuses its saved tensors' buffers (aot_autograd's default) refuses.
            torch._dynamo.reset()
            with torch._functorch.config.patch(donated_buffer=False), _making_tensors_on(device):
                compiled = torch.compile(fn, backend="tidal", options={"fallback": "error"})
                try:
                    torch.autograd.gradcheck(compiled, tuple(leaves), eps=1e-6, atol=1e-5, rtol=1e-4)
                except Exception as exc:  # noqa: BLE001 - GradcheckError or a crash in a recompile
                    raise FuzzFailure(f"gradcheck of the compiled program failed: {exc}\n{reproduction(desc)}") from None


if __name__ == "__main__":  # print a few random programs
    for i, d in enumerate(st.lists(programs(), min_size=5, max_size=5).example()):
        print(f"# ---- program {i} ({d.state}) ----")
        print(source_of(d))
