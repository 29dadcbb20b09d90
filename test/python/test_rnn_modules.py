"""nn.LSTM / nn.GRU / nn.RNN modules inside a compiled function (Dynamo's `allow_rnn`): each layer
and direction is one `scan` (`tidal.importer.rnn`), compiled strict, in inference and training.
Eager's own module (its autograd included) is the reference."""

import pytest
import torch

import tidal  # noqa: F401  (registers the backend)

MODULES = {
    "lstm": lambda **kw: torch.nn.LSTM(6, 8, **kw),
    "gru": lambda **kw: torch.nn.GRU(6, 8, **kw),
    "rnn_tanh": lambda **kw: torch.nn.RNN(6, 8, **kw),
    "rnn_relu": lambda **kw: torch.nn.RNN(6, 8, nonlinearity="relu", **kw),
    "lstm_proj_nobias": lambda **kw: torch.nn.LSTM(6, 8, proj_size=5, bias=False, **kw),
}
DEEP = dict(num_layers=2, batch_first=True, bidirectional=True)
SHALLOW = dict(num_layers=1, batch_first=False, bidirectional=False)
CASES = [(name, DEEP) for name in MODULES] + [("lstm", SHALLOW), ("gru", SHALLOW)]


def _run(module, x, h0):
    out, h = module(x, h0) if h0 is not None else module(x)
    return (out, *h) if isinstance(h, tuple) else (out, h)


def _initial_state(name, module, batch):
    """A given (h0, c0) for some cases, so the initial state's gradient is checked too."""
    if not name.startswith("lstm"):
        return torch.randn(module.num_layers * (2 if module.bidirectional else 1), batch, 8, requires_grad=True)
    return None


@pytest.mark.parametrize("name, shape", CASES, ids=[f"{n}-L{s['num_layers']}" for n, s in CASES])
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_rnn_module_compiles(name, shape, training):
    torch.manual_seed(0)
    module = MODULES[name](**shape)
    x = torch.randn(3, 5, 6) if shape["batch_first"] else torch.randn(5, 3, 6)
    h0 = _initial_state(name, module, 3)
    compiled = torch.compile(lambda x, h0: _run(module, x, h0), backend="tidal", fullgraph=True,
                             options={"fallback": "error"})
    with torch._dynamo.config.patch(allow_rnn=True):
        if not training:
            with torch.no_grad():
                got, want = compiled(x, h0), _run(module, x, h0)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
            return
        # A first layer's input (data) needs no grad: PyTorch's decomposition then picked oneDNN's
        # mkldnn_rnn_layer, which aot_autograd cannot differentiate.
        x.requires_grad_(shape is DEEP)
        leaves = ([x] if x.requires_grad else []) + [*module.parameters()] + ([h0] if h0 is not None else [])
        results = []
        for run in (compiled, lambda x, h0: _run(module, x, h0)):
            outs = run(x, h0)
            loss = sum((o * torch.linspace(-1, 1, o.shape[-1])).sum() for o in outs)
            results.append((outs, torch.autograd.grad(loss, leaves)))
    (got, got_grads), (want, want_grads) = results
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_long_sequence_is_one_loop(compiled_graphs):
    """The sequence is a loop, not unrolled: the graph has one scan per layer and direction
    whatever the length."""
    torch.manual_seed(0)
    module = torch.nn.GRU(6, 8, num_layers=2, bidirectional=True)
    x = torch.randn(200, 2, 6)
    compiled = torch.compile(lambda x: module(x)[0], backend="tidal", fullgraph=True)
    with torch._dynamo.config.patch(allow_rnn=True), torch.no_grad():
        torch.testing.assert_close(compiled(x), module(x)[0], rtol=1e-5, atol=1e-5)
    scans = [n for n in compiled_graphs[0].graph.nodes if n.target is torch.ops.higher_order.scan]
    assert len(scans) == 4
    assert len(compiled_graphs[0].graph.nodes) < 200


def test_parameters_in_one_flat_buffer_train():
    """On CUDA the module's parameters are views of one flat cuDNN buffer (`flatten_parameters`),
    and the hidden and cell state may be one tensor: scan refuses operands sharing storage, so the
    decomposition hands it copies. The same layout on the CPU, with (h0, h0) as the state."""
    torch.manual_seed(0)
    module = torch.nn.LSTM(6, 8)
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()])
    offset = 0
    for p in module.parameters():
        p.data = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    assert len({p.untyped_storage().data_ptr() for p in module.parameters()}) == 1
    x, h0 = torch.randn(5, 3, 6, requires_grad=True), torch.randn(1, 3, 8)
    compiled = torch.compile(lambda x, h0: _run(module, x, (h0, h0)), backend="tidal", fullgraph=True,
                             options={"fallback": "error"})
    results = []
    with torch._dynamo.config.patch(allow_rnn=True):
        for run in (compiled, lambda x, h0: _run(module, x, (h0, h0))):
            outs = run(x, h0)
            loss = sum((o * torch.linspace(-1, 1, o.shape[-1])).sum() for o in outs)
            results.append((outs, torch.autograd.grad(loss, [x, *module.parameters()])))
    for got, want in zip(*results):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
