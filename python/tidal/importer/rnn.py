"""`nn.LSTM`, `nn.GRU` and `nn.RNN` as one `scan` per layer and direction.

With `torch._dynamo.config.allow_rnn`, Dynamo's graph calls `torch.lstm` / `torch.gru` /
`torch.rnn_tanh` / `torch.rnn_relu` (the `.input` overloads) on the module's flat weights.
PyTorch's decompositions of these ops do not suit a compiler of loops: in inference an LSTM
becomes `mkldnn_rnn_layer` (an opaque oneDNN call returning a uint8 workspace, and under
aot_autograd with weights that require grad its saved values are not tensors: training fails
even in `aot_eager`), and otherwise every layer is unrolled over the sequence, one cell per
step. Here each layer and direction is one `scan_op` whose step is the cell's math (the
formulas of ATen's CPU cells), with the input projection of all steps as one matmul before it:
the loop is compiled once whatever the length (a symbolic length too), and training uses tidal's
scan adjoint.
"""

from __future__ import annotations

import copy
import functools

import torch
import torch.nn.functional as F
from torch._higher_order_ops.scan import scan_op

KINDS = {torch.lstm: "lstm", torch.gru: "gru", torch.rnn_tanh: "rnn_tanh", torch.rnn_relu: "rnn_relu"}


def _split(rest, has_bias: bool, projected: bool):
    """(b_hh or None, w_hr or None) from the step's trailing operands."""
    rest = list(rest)
    return (rest.pop(0) if has_bias else None), (rest.pop(0) if projected else None)


def _lstm_step(has_bias, projected, h, c, gx, w_hh, *rest):
    """ATen's LSTMCell: gates i, f, g, o; a projection (proj_size) after the output gate."""
    b_hh, w_hr = _split(rest, has_bias, projected)
    i, f, g, o = (gx + F.linear(h, w_hh, b_hh)).chunk(4, 1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h = torch.sigmoid(o) * torch.tanh(c)
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c, h.clone()  # the carry and the step's output: two tensors (a HOP output aliases none)


def _gru_step(has_bias, projected, h, gx, w_hh, *rest):
    """ATen's GRUCell: gates r, z, n; the new state is (h - n) z + n."""
    b_hh, _ = _split(rest, has_bias, projected)
    xr, xz, xn = gx.chunk(3, 1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, 1)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    h = (h - n) * z + n
    return h, h.clone()


def _simple_step(nonlinearity, has_bias, projected, h, gx, w_hh, *rest):
    b_hh, _ = _split(rest, has_bias, projected)
    h = nonlinearity(gx + F.linear(h, w_hh, b_hh))
    return h, h.clone()


_STEPS = {
    "lstm": _lstm_step,
    "gru": _gru_step,
    "rnn_tanh": functools.partial(_simple_step, torch.tanh),
    "rnn_relu": functools.partial(_simple_step, torch.relu),
}


def _layer(kind, x, h0, c0, weights, has_biases: bool, projected: bool, reverse: bool):
    """One direction of one layer over x [T, B, I]: (outputs [T, B, H], h_T, c_T or None)."""
    w_ih, w_hh = weights[0], weights[1]
    b_ih, b_hh = (weights[2], weights[3]) if has_biases else (None, None)
    w_hr = weights[-1] if projected else None
    gx = F.linear(x, w_ih, b_ih)  # every step's input projection: one matmul
    if reverse:
        gx = gx.flip(0)
    # Copies: on CUDA the module's parameters are views of one flat cuDNN buffer (and hx may hold one
    # tensor twice), and torch 2.11's scan refuses operands sharing storage.
    consts = [w.clone() for w in (w_hh, b_hh, w_hr) if w is not None]
    init = [h0.clone(), c0.clone()] if kind == "lstm" else [h0.clone()]
    step = functools.partial(_STEPS[kind], b_hh is not None, w_hr is not None)
    outs = scan_op(step, init, [gx], consts)
    carries, ys = list(outs[: len(init)]), outs[len(init)]
    if reverse:
        ys = ys.flip(0)
    return ys, carries[0], carries[1] if kind == "lstm" else None


def rnn(kind: str, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """`torch.<kind>(input, hx, params, ...)` (the `.input` overload) as scans; same results."""
    lstm = kind == "lstm"
    h0, c0 = (hx[0], hx[1]) if lstm else (hx, None)
    projected = lstm and h0.size(2) != c0.size(2)
    per_direction = 2 + 2 * bool(has_biases) + int(projected)
    directions = 2 if bidirectional else 1
    x = input.transpose(0, 1) if batch_first else input
    hs, cs = [], []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            k = layer * directions + d
            weights = params[k * per_direction : (k + 1) * per_direction]
            out, h, c = _layer(kind, x, h0[k], c0[k] if lstm else None, weights, has_biases, projected, d == 1)
            outputs.append(out)
            hs.append(h)
            cs.append(c)
        x = torch.cat(outputs, 2) if bidirectional else outputs[0]
        if dropout and train and layer < num_layers - 1:  # as ATen: between layers, not after the last
            x = F.dropout(x, dropout, training=True)
    out = x.transpose(0, 1) if batch_first else x
    if lstm:
        return out, torch.stack(hs, 0), torch.stack(cs, 0)
    return out, torch.stack(hs, 0)


def is_input_overload(node: torch.fx.Node) -> bool:
    """`torch.lstm(input, hx, params, has_biases, ...)`, not the packed-sequence overload
    `torch.lstm(data, batch_sizes, hx, params, ...)` (whose fourth argument is the params list)."""
    return node.target in KINDS and len(node.args) == 9 and isinstance(node.args[3], bool)


def rnns_as_scans(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm`, or a copy of it whose RNN calls are `rnn`'s scans (the original stays what the eager
    fallback runs)."""
    if not any(n.op == "call_function" and is_input_overload(n) for n in gm.graph.nodes):
        return gm
    gm = copy.deepcopy(gm)
    for node in gm.graph.nodes:
        if node.op == "call_function" and is_input_overload(node):
            node.args = (KINDS[node.target], *node.args)
            node.target = rnn
    gm.recompile()
    return gm
