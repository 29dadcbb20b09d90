"""Ordinary layers and ops compile whole, strictly, alone AND inside `scan` and `while_loop` bodies.

Each case is a function of one float tensor `x` returning a tuple of tensors. It runs three ways
through `torch.compile(backend="tidal", fullgraph=True)` under `no_grad` (strict: a graph that
fell back to eager raises TidalCompileError) and is compared with eager:
  alone   f(x)
  scan    the carry starts at x and moves toward each x_t; every step applies f to the carry and
          stacks its outputs (the layer reads a loop-carried buffer)
  while   three iterations: the carry moves, the outputs of f are carried (fixed shapes)
Weights are scaled as real models initialize them, so tolerances stay meaningful.
"""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F
from torch._higher_order_ops import scan, while_loop

torch.manual_seed(0)
nn = torch.nn


def module(m: nn.Module):
    m = m.eval()
    f = lambda x: _tuple(m(x))  # noqa: E731
    f.module = m  # for layer_on
    return f


def _tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class Tokens(nn.Module):
    """Token ids computed from the input (as greedy decoding does), then embedded."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)

    def forward(self, x):
        ids = (x.abs() * 3).long().clamp(max=9)
        return self.emb(ids)


# Index tensors are created outside the programs (as a model's buffers are): torch.export and
# Inductor both fail on a tensor literal created inside a scan body.
IDX = torch.tensor([[0, 2, 1, 3, 3, 0, 1, 2]])  # gather/scatter positions along dim 1 of a [2, 8] input
ROWS = torch.tensor([3, 1])


def _zeros(x, *shape):
    """A buffer of x's dtype and device (the programs run in reduced precision and on CUDA too)."""
    return torch.zeros(*shape, dtype=x.dtype, device=x.device)


def scatter(x):
    return (_zeros(x, 2, 4).scatter(1, IDX.expand(2, 8)[:, :4], x[:, :4]),)


def scatter_add(x):
    return (_zeros(x, 2, 4).scatter_add(1, IDX.expand(2, 8), x),)


def index_put(x):
    rows = (x[:, 0].abs() * 2).long().clamp(max=3)  # data-dependent rows, as an output buffer write
    return (_zeros(x, 4, 8).index_put((rows,), x, accumulate=True),)


def setitem(x):
    out = _zeros(x, 4, 8)
    out[ROWS] = x
    return (out,)


def masked_fill(x):
    return (x.masked_fill(x > 0.5, -1.0),)


CASES = {
    # x shape, f
    "conv1d_stride_pad_groups": ((2, 4, 16), module(nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2))),
    "conv2d": ((2, 3, 8, 8), module(nn.Conv2d(3, 4, 3, padding=1))),
    "conv2d_stride_groups": ((2, 4, 8, 8), module(nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2))),
    # channels-last on the CPU: NHWC buffers around the call, the permutes fused into GroupNorm/SiLU
    "conv2d_dilated_groupnorm_silu_conv2d": ((2, 4, 9, 7), module(nn.Sequential(
        nn.Conv2d(4, 8, 3, padding=2, dilation=2), nn.GroupNorm(2, 8), nn.SiLU(), nn.Conv2d(8, 4, (3, 1), stride=(2, 1), bias=False)))),
    "batchnorm_eval": ((2, 4, 6, 6), module(nn.BatchNorm2d(4))),
    "groupnorm": ((2, 4, 6, 6), module(nn.GroupNorm(2, 4))),
    "layernorm": ((2, 5, 16), module(nn.LayerNorm(16))),
    "rmsnorm": ((2, 5, 16), module(nn.RMSNorm(16))),
    "embedding": ((2, 6), module(Tokens())),
    "multihead_attention": ((2, 5, 16), module(Attention())),
    "transformer_encoder_layer": ((2, 5, 16), module(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True))),
    "sdpa": ((2, 4, 5, 8), lambda x: (F.scaled_dot_product_attention(x, x, x),)),
    "sdpa_causal": ((2, 4, 5, 8), lambda x: (F.scaled_dot_product_attention(x, x, x, is_causal=True),)),
    "gelu": ((4, 16), lambda x: (F.gelu(x),)),
    "gelu_tanh": ((4, 16), lambda x: (F.gelu(x, approximate="tanh"),)),
    "silu": ((4, 16), lambda x: (F.silu(x),)),
    "softplus": ((4, 16), lambda x: (F.softplus(x),)),
    "softmax": ((4, 16), lambda x: (torch.softmax(x, -1),)),
    "log_softmax": ((4, 16), lambda x: (torch.log_softmax(x, 0),)),
    "cumsum": ((4, 16), lambda x: (torch.cumsum(x, 1),)),
    "cumprod": ((4, 8), lambda x: (torch.cumprod(x, 0),)),
    "logcumsumexp": ((4, 16), lambda x: (torch.logcumsumexp(x, 1),)),
    "max_with_indices": ((4, 16), lambda x: tuple(torch.max(x, 1))),
    "argmax": ((4, 16), lambda x: (torch.argmax(x, -1),)),
    "topk": ((4, 16), lambda x: tuple(torch.topk(x, 3, dim=1))),
    "sort": ((4, 16), lambda x: tuple(torch.sort(x, dim=1, descending=True))),
    "gather": ((2, 8), lambda x: (torch.gather(x, 1, IDX.expand(2, 8)),)),
    "scatter": ((2, 8), scatter),
    "scatter_add": ((2, 8), scatter_add),
    "index_put": ((2, 8), index_put),
    "setitem": ((2, 8), setitem),
    "index_select": ((4, 8), lambda x: (torch.index_select(x, 0, ROWS),)),
    "masked_fill": ((4, 8), masked_fill),
    "where": ((4, 8), lambda x: (torch.where(x > 0, x, x * 0.1),)),
    "pad_constant": ((2, 3, 4, 4), lambda x: (F.pad(x, (1, 2, 0, 1), value=0.5),)),
    "pad_reflect": ((2, 3, 4, 4), lambda x: (F.pad(x, (1, 1, 1, 1), mode="reflect"),)),
    "interpolate_nearest": ((2, 3, 4, 4), lambda x: (F.interpolate(x, scale_factor=2, mode="nearest"),)),
    "interpolate_bilinear": ((2, 3, 4, 4), lambda x: (F.interpolate(x, size=(7, 5), mode="bilinear"),)),
    "cat_stack": ((4, 8), lambda x: (torch.cat([x, x * 2], 1), torch.stack([x, -x], 0))),
    "split_chunk": ((4, 8), lambda x: (*torch.split(x, [3, 5], 1), *torch.chunk(x, 2, 0))),
}
# float16 and bfloat16 run on the CPU in eager: the same programs in reduced precision.
REDUCED = {
    f"{prefix}_{name}": (dtype, shape, f)
    for prefix, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16))
    for name, (shape, f) in {
        "elementwise": ((4, 16), lambda x: (torch.tanh(x) * 2 + x.exp(),)),
        "matmul": ((4, 16), lambda x: (x @ x.T,)),
        "softmax": ((4, 16), lambda x: (torch.softmax(x, -1),)),
        "linear": ((4, 16), module(nn.Linear(16, 8).to(dtype))),
    }.items()
}
TOLERANCE = {  # a few units in the last place of each format
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
    torch.float16: {"rtol": 2e-3, "atol": 2e-3},
    torch.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
}


def _fresh(outs):
    """Loop bodies may not return aliases of their inputs, and while_loop carries keep their
    strides (torch's HOP rules, for every backend): outputs are fresh contiguous tensors."""
    return tuple(o.clone(memory_format=torch.contiguous_format) for o in outs)


def _in_scan(f):
    def program(x, xs):
        def step(c, x_t):
            return 0.5 * c + 0.5 * x_t, _fresh(f(c))

        return scan(step, x, xs)

    return program


def _in_while(f, x):
    zeros = tuple(torch.zeros(o.shape, dtype=o.dtype, device=o.device) for o in f(x))

    def program(x):
        def body(i, c, *outs):
            c = 0.9 * c + 0.1
            return (i + 1, c, *_fresh(f(c)))

        return while_loop(lambda i, c, *outs: i < 3, body, (torch.zeros((), dtype=torch.int64), x, *zeros))[2:]

    return program


def _inputs(shape, dtype):
    return (torch.randn(shape) * 0.5).to(dtype)


MODES = ["alone", "scan", "while"]


def layer_program(f, mode, shape, dtype, device="cpu", make_input=_inputs):
    """(program, args): `f` alone, in a scan or in a while_loop (MODES), on inputs of `shape` in
    `dtype` made by `make_input` and moved to `device` (test_gpu_suites.py runs these on CUDA,
    with `layer_on(f, ...)` and under `index_buffers_on(device)`)."""
    x = make_input(shape, dtype).to(device)
    if mode == "alone":
        return f, (x,)
    if mode == "scan":
        return _in_scan(f), (x, torch.stack([make_input(shape, dtype) for _ in range(3)]).to(device))
    return _in_while(f, x), (x,)


def layer_on(f, device, dtype):
    """`f` of CASES or REDUCED with its module's parameters and buffers (a copy) on `device`, the
    floating ones in `dtype`; a function without a module as it is."""
    m = getattr(f, "module", None)
    return f if m is None else module(copy.deepcopy(m).to(device=device, dtype=dtype))


@contextlib.contextmanager
def index_buffers_on(device):
    """IDX and ROWS (the index buffers the programs read as globals, as a model's buffers) on
    `device` while the block runs."""
    global IDX, ROWS
    saved = IDX, ROWS
    IDX, ROWS = IDX.to(device), ROWS.to(device)
    try:
        yield
    finally:
        IDX, ROWS = saved


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(CASES) + list(REDUCED))
def test_layer_compiles_strictly_and_matches_eager(name, mode):
    dtype, shape, f = REDUCED[name] if name in REDUCED else (torch.float32, *CASES[name])
    program, args = layer_program(f, mode, shape, dtype)
    with torch.no_grad():
        expected = program(*args)
        got = torch.compile(program, backend="tidal", fullgraph=True)(*args)
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_moments_are_computed_in_float_not_float64(dtype, tmp_path):
    """LayerNorm and GroupNorm compute their moments in float (the computation dtype of bf16 too),
    as ATen's CPU kernels do; the generic decomposition's var_mean would be lowered in float64."""

    def norms(x, w, b):
        return F.layer_norm(x, (16,), w, b), F.group_norm(x.reshape(2, 8, 4), 4)

    x = _inputs((4, 16), dtype)
    w, b = _inputs((16,), dtype), _inputs((16,), dtype)
    with torch.no_grad():
        expected = norms(x, w, b)
        got = torch.compile(norms, backend="tidal", options={"dump_dir": str(tmp_path)})(x, w, b)
    torch.testing.assert_close(got, expected, **TOLERANCE[dtype])
    (graph_dir,) = list(tmp_path.iterdir())
    linalg = (graph_dir / "02-linalg.mlir").read_text()
    assert "xf64>" not in linalg
    if dtype == torch.bfloat16:
        assert "xf32>" in linalg
