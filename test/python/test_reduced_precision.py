"""float16/bfloat16 programs compute each rounding op in float32 and round its result once, as
eager does (`tidal/importer/reduced_precision.py`): values against eager, strictly compiled.
Without the rewrite a bfloat16 sum of 4096 values in [0, 1) came out 256 (eager: about 2048)."""

from __future__ import annotations

import operator
import warnings
from pathlib import Path

import pytest
import torch
from torch._higher_order_ops import scan

import torch.utils._pytree as pytree

import tidal.compiler
from tidal.importer.reduced_precision import compute_reduced_precision_in_float32
from tidal.tools.tidal_compile import load_program_file

STRICT = {"fallback": "error"}
REDUCED = [torch.bfloat16, torch.float16]
IDS = ["bf16", "f16"]


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="tidal", fullgraph=True, options=STRICT)


def reductions(x):
    return x.sum(0), x.mean(), torch.softmax(x, -1), torch.tanh(x).exp().sum(-1), (x * 3 + 1) / 7, x.amax(0)


@pytest.mark.parametrize("dtype", REDUCED, ids=IDS)
def test_reductions_accumulate_in_float32(dtype):
    x = torch.rand(4096, 8, dtype=dtype)
    got, expected = _compiled(reductions)(x), reductions(x)
    assert all(g.dtype == dtype for g in got)
    torch.testing.assert_close(got, expected)  # the dtype's own tolerances: about one rounding


CORPUS = Path(__file__).parents[1] / "corpus"
# programs that make float32 carries of their own (torch.zeros(...)): eager refuses them in reduced
# precision (a carry's dtype changes across an iteration)
NOT_DTYPE_GENERIC = {"early_stop_generation", "nested_map_scan_cond", "nested_while_in_scan", "s5_linear_recurrence",
                     "scan_int64_counter", "while_deq_fixed_point", "while_power_iteration"}
DTYPE_GENERIC_CORPUS = sorted(p for p in CORPUS.glob("*.py") if p.stem not in NOT_DTYPE_GENERIC)


def in_reduced_precision(model, inputs, dtype):
    """A program with its floating inputs and parameters in `dtype`."""
    if isinstance(model, torch.nn.Module):
        model = model.to(dtype)
    return model, pytree.tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t, inputs)


@pytest.mark.parametrize("dtype", REDUCED, ids=IDS)
@pytest.mark.parametrize("path", DTYPE_GENERIC_CORPUS, ids=lambda p: p.stem)
def test_corpus_in_reduced_precision_matches_eager(path, dtype):
    """Every corpus program with its floating inputs and parameters in float16/bfloat16: eager's
    values, to about one rounding (most are bit for bit; scans re-associate)."""
    model, inputs = in_reduced_precision(*load_program_file(str(path)), dtype)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        expected = model(*inputs)
        got = _compiled(model)(*inputs)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got, expected, rtol=2 * eps, atol=2 * eps)


class Block(torch.nn.Module):
    """A linear layer, layer norm and GELU, then an RNN over the sequence by `scan`."""

    def __init__(self, d=32):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)
        self.u = torch.nn.Parameter(torch.randn(d, d) * 0.5 * d**-0.5)

    def forward(self, h0, xs):
        xs = torch.nn.functional.gelu(self.norm(self.proj(xs)))

        def step(h, x):
            h = torch.tanh(x + h @ self.u)
            return h, h.sum(-1)

        return scan(step, h0, xs)


@pytest.mark.parametrize("dtype", REDUCED, ids=IDS)
def test_a_layer_and_a_scan_match_eager(dtype):
    torch.manual_seed(0)
    model = Block().to(dtype)
    h0, xs = torch.randn(4, 32, dtype=dtype) * 0.5, torch.randn(16, 4, 32, dtype=dtype)
    with torch.no_grad():
        got, expected = _compiled(model)(h0, xs), model(h0, xs)
    # eager's bf16 matmul and tidal's float32 one round their sums differently by an ulp, and the
    # scan carries that forward: a few roundings
    torch.testing.assert_close(got, expected, rtol=4 * torch.finfo(dtype).eps, atol=4 * torch.finfo(dtype).eps)


def test_the_export_path_computes_in_float32_too():
    x = torch.rand(4096, 8, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = tidal.compiler.compile_program(lambda t: t.sum(0), (x,))
    torch.testing.assert_close(program(x), x.sum(0))


def test_the_rewrite_widens_rounding_ops_only():
    """sum gets float32 operands and its result converted back; a view, a concatenation and a
    max keep their types (they round nothing)."""
    def f(x):
        y = torch.cat([x, x]).view(-1)
        return y.sum(), y.amax()

    gm = torch._dynamo.export(f, aten_graph=True)(torch.rand(4, 2, dtype=torch.bfloat16)).graph_module
    compute_reduced_precision_in_float32(gm)
    aten = torch.ops.aten
    nodes = {n.target: n for n in gm.graph.nodes if n.op == "call_function"}
    total = next(n for n in gm.graph.nodes if n.target in (aten.sum.default, aten.sum.dim_IntList))
    (operand,) = total.all_input_nodes
    assert operand.target is aten._to_copy.default and operand.kwargs["dtype"] is torch.float32
    assert total.meta["val"].dtype is torch.float32
    (back,) = total.users
    assert back.target is aten._to_copy.default and back.meta["val"].dtype is torch.bfloat16
    for exact in (aten.cat.default, aten.view.default, aten.amax.default):
        assert nodes[exact].meta["val"].dtype is torch.bfloat16
        assert all(a.meta["val"].dtype is torch.bfloat16 for a in nodes[exact].all_input_nodes)
    assert operator.getitem not in nodes


def test_the_rewrite_reaches_the_bodies_of_control_flow_ops():
    """A scan's step is a graph of its own (as the combine of an associative_scan, the branches of
    a cond): its tanh computes in float32, its carry stays bfloat16."""
    def f(h0, xs):
        return scan(lambda h, x: (torch.tanh(h + x), h.sum()), h0, xs)

    gm = torch._dynamo.export(f, aten_graph=True)(torch.rand(4, dtype=torch.bfloat16), torch.rand(3, 4, dtype=torch.bfloat16)).graph_module
    compute_reduced_precision_in_float32(gm)
    bodies = [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule) and m is not gm]
    tanhs = [n for m in bodies for n in m.graph.nodes if n.target is torch.ops.aten.tanh.default]
    assert tanhs and all(n.meta["val"].dtype is torch.float32 for n in tanhs)
    outputs = [n for m in bodies for n in m.graph.nodes if n.op == "output"]
    assert all(a.meta["val"].dtype is torch.bfloat16 for o in outputs for a in o.all_input_nodes)
