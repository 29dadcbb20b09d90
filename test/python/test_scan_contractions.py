"""tidal-scan-contractions sinking a per-step output that is only stacked, y_t = A_t·W, out of its
scan (issue #43): an RNN's adjoint computes dx_t = dz_t·Wᵀ only when x requires grad, and only
stacks it; after the pass the reverse scan keeps dh·Uᵀ alone and dx is one matmul after it.
The pass's IR cases (dims, dynamic length, what stays) are test/passes/scan-contractions-stacked.mlir."""

from __future__ import annotations

import re

import torch
from torch._higher_order_ops import scan

from test_autodiff import STRICT, _grads_vs_python_loop, _scan_body
from tidal.dynamo import training_ir


def rnn_with_bias(h0, xs, w, u, b):
    def step(h, x):
        h = torch.tanh(x @ w + h @ u + b)
        return h, h.clone()

    return scan(step, h0, xs)


def _after_scan(ir_text: str) -> str:
    (_, rest) = ir_text.split('"tidal.scan"')
    return rest.split("}) {", 1)[1]


def test_input_cotangent_leaves_the_adjoint_scan():
    """x requiring grad: the adjoint loop's one matmul is dh·Uᵀ (the weights' cotangents and the
    bias's were sunk already); dx of steps 1..T-1 is one [11·4, 8]·[8, 3] matmul of the stacked dz
    after the loop (step 0 runs after it on its own). Gradients of x, h0 and every weight as the
    Python loop's, compiled strictly."""
    gen = torch.Generator().manual_seed(43)
    h0 = (torch.randn(4, 8, generator=gen) * 0.5).requires_grad_()
    xs = torch.randn(12, 4, 3, generator=gen).requires_grad_()
    w, u = [(torch.randn(*s, generator=gen) * 0.3).requires_grad_() for s in ((3, 8), (8, 8))]
    b = (torch.randn(8, generator=gen) * 0.1).requires_grad_()
    args = (h0, xs, w, u, b)

    _, backward_ir = training_ir(rnn_with_bias, *args, stage="tidal")
    assert backward_ir.count('"tidal.scan"') == 1, backward_ir
    body = _scan_body(backward_ir)
    assert body.count("torch.aten.mm ") == 1, body
    assert re.search(r'"tidal\.yield"\(.*\) : \(([^)]*)\)', body).group(1).count("[4,3]") == 0, body  # no dx_t stacked
    after = _after_scan(backward_ir)
    assert re.search(r"torch\.aten\.mm %\S+, %\S+ : !torch\.vtensor<\[44,8\],f32>, !torch\.vtensor<\[8,3\],f32> "
                     r"-> !torch\.vtensor<\[44,3\],f32>", after), after
    assert "-> !torch.vtensor<[11,4,3],f32>" in after, after

    compiled = torch.compile(rnn_with_bias, backend="tidal", fullgraph=True, options=STRICT)
    _grads_vs_python_loop(compiled, rnn_with_bias, args, args, rtol=1e-4, atol=1e-5)


def projected(h0, xs, u, v):
    """An output projection in the forward: y_t = h_t·V only stacked."""

    def step(h, x):
        h = torch.tanh(x + h @ u)
        return h, h @ v

    return scan(step, h0, xs)


def test_output_projection_leaves_the_forward_scan():
    """y_t = h_t·V: the forward scan stacks h_t and projects all steps in one [T·B, H]·[H, N]
    matmul after it; outputs and gradients as the Python loop's."""
    gen = torch.Generator().manual_seed(44)
    h0, xs = torch.zeros(4, 8), torch.randn(6, 4, 8, generator=gen).requires_grad_()
    u = (torch.randn(8, 8, generator=gen) * 0.3).requires_grad_()
    v = (torch.randn(8, 16, generator=gen) * 0.3).requires_grad_()
    forward_ir, _ = training_ir(projected, h0, xs, u, v, stage="tidal")
    assert _scan_body(forward_ir).count("torch.aten.mm ") == 1, forward_ir
    assert re.search(r"torch\.aten\.mm %\S+, %\S+ : !torch\.vtensor<\[24,8\],f32>, !torch\.vtensor<\[8,16\],f32>",
                     _after_scan(forward_ir)), forward_ir

    compiled = torch.compile(projected, backend="tidal", fullgraph=True, options=STRICT)
    with torch.no_grad():
        got = compiled(h0, xs, u, v)
    torch.testing.assert_close(got, projected(h0, xs, u, v), rtol=1e-5, atol=1e-5)
    _grads_vs_python_loop(compiled, projected, (h0, xs, u, v), (xs, u, v), rtol=1e-4, atol=1e-5)
