"""Tensors with a zero-size dim compile and match eager; none kills the process (issue #40).

torch-mlir's view lowering divided by the zero element count of an empty tensor (SIGFPE in
convert-torch-to-linalg, a signal tidal's eager fallback cannot catch): every view of a tensor
with a static 0 dim (squeeze, unsqueeze, flatten, reshape, view(-1), unflatten), static or under
dynamic=True, forward or in a gradient, at top level or in a loop body. A concatenation of
operands all empty along its dim failed to compile (a `tensor.concat` of nothing).
`tidal-empty-tensors` makes each such op an empty tensor of its sizes. A step of a scan or
map over a tensor with a 0 inner dim (and a while_loop gradient's tape of such a carry) failed
MLIR's slice verifier (the offset 0 of a 0-size dim is "out of bounds"): such a step is now an
empty tensor, its write skipped (scf_builders); and tidal-vectorize no longer tries a
vector<0xf32> for an elementwise op of no elements in a loop or branch body.

Each child compiles several programs strictly (fallback="error") and compares each with eager,
outputs and input gradients; a child runs in a fork server (tool_runner.py), so a crash fails
its test instead of taking pytest down.
"""

from __future__ import annotations

import textwrap

import pytest


# name: (model, its inputs); inputs have a 0 dim, which Dynamo keeps static even under dynamic=True
VIEWS = {
    "squeeze_unsqueeze": ("lambda x: (x.unsqueeze(0) * 2).squeeze(0)", "torch.randn(0, 4)"),
    "squeeze_unsqueeze_cols": ("lambda x: (x.unsqueeze(0) * 2).squeeze(0)", "torch.randn(4, 0)"),
    "view_inferred": ("lambda x: (x * 2).view(-1)", "torch.randn(0, 4)"),
    "reshape": ("lambda x: (x * 2).reshape(0, 2, 2)", "torch.randn(0, 4)"),
    "flatten": ("lambda x: (x * 2).flatten(1)", "torch.randn(2, 0, 3)"),
    "unflatten": ("lambda x: (x * 2).unflatten(0, (3, 0))", "torch.randn(0, 4)"),
    "transposed_view": ("lambda x: (x * 2).t().contiguous().view(-1)", "torch.randn(0, 4)"),
    "cat_all_empty": ("lambda x: torch.cat([x, x], 0) * 2", "torch.randn(0, 4)"),
    "cat_empty_rows": ("lambda x: torch.cat([x, x], 1) * 2", "torch.randn(0, 4)"),
}

LOOPS = {
    # a trip count of 0: the loop reads the rows of an empty tensor
    "while_over_rows": ("""
        lambda x: while_loop(lambda i, a: i < x.shape[0], lambda i, a: (i + 1, a + x.sum(0).view(-1)),
                             (torch.zeros((), dtype=torch.int64), torch.zeros(4)))[1]""", "torch.randn(0, 4)"),
    "while_empty_carry": ("""
        lambda x: while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, (a.unsqueeze(0) * 2).squeeze(0) + 1),
                             (torch.zeros((), dtype=torch.int64), x))[1]""", "torch.randn(0, 4)"),
    "scan_empty_steps": ("lambda c, xs: scan(lambda c, x: (c + x, c * 2), c, xs)",
                         "torch.zeros(0, 3), torch.randn(5, 0, 3)"),
    "map_empty_rows": ("lambda xs: map(lambda x: x.view(-1) * 2 + 1, xs)", "torch.randn(3, 0, 4)"),
    "cond_of_views": ("lambda p, x: torch.cond(p.sum() > 0, lambda x: x.view(-1) * 2, lambda x: x.flatten() + 1, (x,))",
                      "torch.ones(2), torch.randn(0, 4)"),
}

_CHILD = """
import warnings, torch
from torch._higher_order_ops import map, scan, while_loop
warnings.simplefilter("ignore")
torch.manual_seed(0)
dynamic, grad = {dynamic}, {grad}

def run(fn, inputs):
    if not grad:
        with torch.no_grad():
            return fn(*inputs)
    inputs = [x.detach().requires_grad_() for x in inputs]
    out = fn(*inputs)
    outs = [o for o in torch.utils._pytree.tree_leaves(out) if o.requires_grad]
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    return out, [x.grad for x in inputs]

for name, (model, inputs) in {{{cases}}}.items():
    torch._dynamo.reset()
    expected = run(model, inputs)
    got = run(torch.compile(model, backend="tidal", dynamic=dynamic, options={{"fallback": "error"}}), inputs)
    torch.testing.assert_close(got, expected, msg=name)
print("OK")
"""


def _run_in_child(fork_server, cases: dict, dynamic: bool, grad: bool):
    listed = ", ".join(f"{name!r}: ({textwrap.dedent(m).strip()}, ({x},))" for name, (m, x) in cases.items())
    fork_server.exec_ok(_CHILD.format(dynamic=dynamic, grad=grad, cases=listed))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_views_of_empty_tensors(fork_server, dynamic):
    _run_in_child(fork_server, VIEWS, dynamic, grad=False)


def test_views_of_empty_tensors_under_grad(fork_server):
    _run_in_child(fork_server, {k: VIEWS[k] for k in ("squeeze_unsqueeze", "view_inferred", "flatten", "cat_all_empty")},
                  dynamic=True, grad=True)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
def test_loops_over_empty_tensors(fork_server, grad):
    cases = {k: LOOPS[k] for k in ("while_empty_carry", "scan_empty_steps", "map_empty_rows")} if grad else LOOPS
    _run_in_child(fork_server, cases, dynamic=not grad, grad=grad)
