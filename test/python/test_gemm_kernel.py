"""tidal's own f32 gemm kernel (`tidal/backends/gemm_kernel.py`): values against float64 torch
for every edge the tiling has (column tails, row tails, k = 0, padded leading dimensions, A read
transposed, beta 0 over a C full of NaN), and its use from compiled programs."""

import ctypes
import math

import pytest
import torch

from tidal.backends import gemm_kernel

_ARG_TYPES = [ctypes.c_int8] + [ctypes.c_int64] * 7 + [ctypes.c_float] + [ctypes.c_int64] * 2


@pytest.fixture(scope="module")
def kernel():
    """The kernel alone, JIT-compiled and called through its packed wrapper."""
    from torch_mlir import ir, passmanager
    from torch_mlir.execution_engine import ExecutionEngine

    with ir.Context():
        module = ir.Module.parse(gemm_kernel.kernel_text().replace("func.func private", "func.func", 1))
        passmanager.PassManager.parse(
            "builtin.module(convert-scf-to-cf, convert-vector-to-llvm, convert-arith-to-llvm, "
            "convert-func-to-llvm, convert-cf-to-llvm, reconcile-unrealized-casts)"
        ).run(module.operation)
        engine = ExecutionEngine(module, opt_level=3, shared_libs=[])
        packed = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.raw_lookup(gemm_kernel.NAME))

    def call(*args):
        values = [t(v) for t, v in zip(_ARG_TYPES, args)]
        packed((ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values]))

    call.engine = engine  # keeps the code alive
    return call


def _gemm(kernel, m, n, k, *, trans_a=False, beta=1.0, pad=0, seed=0):
    """Runs C = op(A)·B + beta·C on matrices whose rows are `pad` elements longer than used;
    returns (result, float64 reference) over the used part."""
    g = torch.Generator().manual_seed(seed)
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    a = torch.randn(a_rows, a_cols + pad, generator=g)[:, :a_cols]
    b = torch.randn(k, n + pad, generator=g)[:, :n]
    c = torch.randn(m, n + pad, generator=g)
    if beta == 0.0:
        c.fill_(math.nan)  # beta = 0 must not read C
    used = c[:, :n]
    op_a = a.t() if trans_a else a
    expected = op_a.double() @ b.double() + (0.0 if beta == 0.0 else beta * used.double())
    kernel(84 if trans_a else 78, m, n, k, a.data_ptr(), a.stride(0), b.data_ptr(), b.stride(0), beta,
           c.data_ptr(), c.stride(0))
    if pad:
        assert torch.isnan(c[:, n:]).all() if beta == 0.0 else True  # nothing past n is written
    return used, expected


@pytest.mark.parametrize("trans_a", [False, True], ids=["A", "At"])
@pytest.mark.parametrize("beta", [1.0, 0.0, 0.5])
@pytest.mark.parametrize("m,n,k", [
    (32, 128, 128),  # full tiles only
    (37, 45, 19),    # a row tail and a masked column tail
    (8, 32, 1),
    (1, 7, 3),       # only tails
    (9, 33, 64),     # one row and one column past full tiles
    (16, 16, 300),   # half a column block, long k
    (3, 64, 0),      # k = 0: C = beta·C
])
def test_values(kernel, m, n, k, trans_a, beta):
    got, expected = _gemm(kernel, m, n, k, trans_a=trans_a, beta=beta)
    assert not torch.isnan(got).any()
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5 * max(1, k) ** 0.5)


@pytest.mark.parametrize("trans_a", [False, True], ids=["A", "At"])
def test_padded_leading_dimensions(kernel, trans_a):
    for beta in (1.0, 0.0):
        got, expected = _gemm(kernel, 21, 50, 33, trans_a=trans_a, beta=beta, pad=5, seed=1)
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-4)


def test_empty_shapes_touch_nothing(kernel):
    c = torch.full((4, 4), 7.0)
    kernel(78, 0, 4, 4, 0, 4, 0, 4, 0.0, c.data_ptr(), 4)
    kernel(78, 4, 0, 4, 0, 4, 0, 4, 0.0, c.data_ptr(), 4)
    assert (c == 7.0).all()


@pytest.fixture
def gemm_choice(monkeypatch):
    def choose(value):
        monkeypatch.setenv("TIDAL_GEMM", value)
        gemm_kernel.wanted.cache_clear()

    yield choose
    monkeypatch.delenv("TIDAL_GEMM", raising=False)
    gemm_kernel.wanted.cache_clear()


def _rnn(x, h0, w, u, b):
    from torch._higher_order_ops import scan

    xw = x @ w

    def step(h, xw_t):
        h = torch.tanh(xw_t + h @ u + b)
        return h, h.clone()

    return scan(step, h0, xw)


def _layers(x, w1, w2):
    y = torch.relu(x @ w1)
    return y @ w2 + x[:, :38].t() @ x, torch.bmm(y.view(2, -1, 70), y.view(2, -1, 70).transpose(1, 2))


@pytest.mark.parametrize("choice", ["tidal", "blas"])
def test_compiled_programs_use_the_chosen_gemm(gemm_choice, choice, tmp_path):
    gemm_choice(choice)
    torch.manual_seed(0)
    rnn_args = (torch.randn(9, 5, 24), torch.randn(5, 48), torch.randn(24, 48) / 5, torch.randn(48, 48) / 7,
                torch.randn(48))
    layer_args = (torch.randn(38, 40), torch.randn(40, 70) / 6, torch.randn(70, 40) / 8)
    with torch.no_grad():
        for fn, args in ((_rnn, rnn_args), (_layers, layer_args)):
            compiled = torch.compile(fn, backend="tidal", options={"dump_dir": str(tmp_path / fn.__name__)})
            for got, want in zip(compiled(*args), fn(*args)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    llvm = "".join(p.read_text() for p in tmp_path.glob("*/*/03-llvm.mlir"))
    assert llvm.count("llvm.call @sgemm_") >= 2  # the shim keeps MKL for a B read transposed
    assert ("llvm.func @tidal_sgemm_tiles" in llvm) == (choice == "tidal")


def test_bad_choice_is_a_clear_error(gemm_choice):
    gemm_choice("mkl")
    with pytest.raises(ValueError, match="TIDAL_GEMM must be 'tidal' or 'blas', got 'mkl'"):
        gemm_kernel.wanted()
