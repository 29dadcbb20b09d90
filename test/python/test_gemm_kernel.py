"""tidal's own f32 gemm kernel (`tidal/backends/cpu/gemm_kernel.py`): values against float64 torch
for every edge the tiling has (column tails, row tails, k = 0, padded leading dimensions, A read
transposed, beta 0 over a C full of NaN), and its use from compiled programs."""

import ctypes
import math

import pytest
import torch

from tidal.backends.cpu import gemm_kernel

_ARG_TYPES = [ctypes.c_int8] + [ctypes.c_int64] * 7 + [ctypes.c_float] + [ctypes.c_int64] * 2


@pytest.fixture(scope="module")
def kernel():
    """The kernel alone, JIT-compiled (its team split on libgomp threads, as in a program) and
    called through its packed wrapper."""
    from torch_mlir import ir
    from torch_mlir.execution_engine import ExecutionEngine

    import tidal.init_all  # noqa: F401
    from tidal.context import make_context
    from tidal.passes.pipeline import run_pipeline
    from tidal.runtime import externs
    from tidal.runtime.executable import JIT_OPT_LEVEL

    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(gemm_kernel.kernel_text().replace("func.func private @tidal", "func.func @tidal"))
        run_pipeline(module.operation, "builtin.module(tidal-forall-to-threads, scf-forall-to-for, convert-scf-to-cf, "
                     "convert-vector-to-llvm, convert-arith-to-llvm, convert-func-to-llvm, convert-cf-to-llvm, "
                     "reconcile-unrealized-casts)", ctx)
        assert str(module).count("llvm.call @GOMP_parallel") == 2  # each variant starts the team
        engine = ExecutionEngine(module, opt_level=JIT_OPT_LEVEL, shared_libs=[])  # as compiled programs are
        for name, address in externs.addresses().items():
            engine.raw_register_runtime(name, ctypes.c_void_p(address))
        packed = {name: ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.raw_lookup(name))
                  for name in (gemm_kernel.NAME, gemm_kernel.NAME_B_TRANSPOSED)}

    def call(*args, b_transposed=False):
        values = [t(v) for t, v in zip(_ARG_TYPES, args)]
        fn = packed[gemm_kernel.NAME_B_TRANSPOSED if b_transposed else gemm_kernel.NAME]
        fn((ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values]))

    call.engine = engine  # keeps the code alive
    return call


def _gemm(kernel, m, n, k, *, trans_a=False, trans_b=False, beta=1.0, pad=0, seed=0):
    """Runs C = op(A)·op(B) + beta·C on matrices whose rows are `pad` elements longer than used;
    returns (result, float64 reference) over the used part."""
    g = torch.Generator().manual_seed(seed)
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    a = torch.randn(a_rows, a_cols + pad, generator=g)[:, :a_cols]
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    b = torch.randn(b_rows, b_cols + pad, generator=g)[:, :b_cols]
    c = torch.randn(m, n + pad, generator=g)
    if beta == 0.0:
        c.fill_(math.nan)  # beta = 0 must not read C
    used = c[:, :n]
    op_a, op_b = a.t() if trans_a else a, b.t() if trans_b else b
    expected = op_a.double() @ op_b.double() + (0.0 if beta == 0.0 else beta * used.double())
    kernel(84 if trans_a else 78, m, n, k, a.data_ptr(), a.stride(0), b.data_ptr(), b.stride(0), beta,
           c.data_ptr(), c.stride(0), b_transposed=trans_b)
    if pad:
        assert torch.isnan(c[:, n:]).all() if beta == 0.0 else True  # nothing past n is written
    return used, expected


@pytest.mark.parametrize("trans_b", [False, True], ids=["B", "Bt"])
@pytest.mark.parametrize("trans_a", [False, True], ids=["A", "At"])
@pytest.mark.parametrize("beta", [1.0, 0.0, 0.5])
@pytest.mark.parametrize("m,n,k", [
    (32, 128, 128),  # full tiles only
    (37, 45, 19),    # a row tail and a masked column tail
    (8, 32, 1),
    (1, 7, 3),       # only tails
    (9, 33, 64),     # one row and one column past full tiles
    (16, 16, 300),   # half a column block, long k (Bᵀ: a k tail in the packed panel)
    (64, 100, 17),   # Bᵀ: one 16x16 block and a one-row k tail
    (3, 64, 0),      # k = 0: C = beta·C
])
def test_values(kernel, m, n, k, trans_a, trans_b, beta):
    got, expected = _gemm(kernel, m, n, k, trans_a=trans_a, trans_b=trans_b, beta=beta)
    assert not torch.isnan(got).any()
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5 * max(1, k) ** 0.5)


@pytest.mark.parametrize("trans_b", [False, True], ids=["B", "Bt"])
@pytest.mark.parametrize("trans_a", [False, True], ids=["A", "At"])
def test_padded_leading_dimensions(kernel, trans_a, trans_b):
    for beta in (1.0, 0.0):
        got, expected = _gemm(kernel, 21, 50, 33, trans_a=trans_a, trans_b=trans_b, beta=beta, pad=5, seed=1)
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-4)


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


@pytest.mark.parametrize("trans_b", [False, True], ids=["B", "Bt"])
@pytest.mark.parametrize("m,n,k", [
    (64, 200, 64),   # 7 column blocks (the last masked) over the team
    (300, 20, 128),  # one column block: rows in blocks of 8 over the team, a row tail
])
@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_split_over_the_team(kernel, threads, n_threads, m, n, k, trans_b):
    assert m * n * k >= gemm_kernel.PARALLEL_MACS
    threads(n_threads)
    for beta in (0.0, 1.0):
        got, expected = _gemm(kernel, m, n, k, trans_b=trans_b, beta=beta, pad=3, seed=2)
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("b_transposed", [False, True])
def test_empty_shapes_touch_nothing(kernel, b_transposed):
    c = torch.full((4, 4), 7.0)
    kernel(78, 0, 4, 4, 0, 4, 0, 4, 0.0, c.data_ptr(), 4, b_transposed=b_transposed)
    kernel(78, 4, 0, 4, 0, 4, 0, 4, 0.0, c.data_ptr(), 4, b_transposed=b_transposed)
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


def _long_k_products(h, g, w):
    """A weight's cotangent summed over many rows (k = rows) and a product by a transposed weight."""
    return h.t() @ g, g @ w.t(), h.t()[:, 1:] @ g[1:]


@pytest.mark.parametrize("k,width", [(2500, 72), (70_000, 20)])
@pytest.mark.parametrize("choice", ["tidal", "blas"])
def test_a_long_k_runs_in_chunks_with_the_same_values(gemm_choice, choice, k, width):
    """A k past MAX_UNBLOCKED_K runs as chunks of K_CHUNK, C accumulating (`blas._DISPATCH`): k not
    a multiple of the chunk (a tail), A read transposed, B read both ways, against float64; and a
    k of 70,000 rows (a weight's cotangent summed over T·B: 274 chunks)."""
    assert gemm_kernel.MAX_UNBLOCKED_K < k and k % gemm_kernel.K_CHUNK
    gemm_choice(choice)
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(3)
    args = (torch.randn(k, 40, generator=g), torch.randn(k, width, generator=g), torch.randn(36, width, generator=g))
    with torch.no_grad():
        got = torch.compile(_long_k_products, backend="tidal", fullgraph=True, options={"fallback": "error"})(*args)
    for value, want in zip(got, _long_k_products(*[a.double() for a in args])):
        torch.testing.assert_close(value, want.float(), rtol=1e-4, atol=2e-3 * (k / 2500) ** 0.5)
