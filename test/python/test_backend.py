"""torch.compile(backend="tidal"): the corpus against eager, fallback, dynamic shapes, IR dumps."""

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch._higher_order_ops import scan

from tidal.dynamo import TidalCompileError, TidalFallbackWarning
from tidal.tools.tidal_compile import load_program_file

CORPUS = sorted((Path(__file__).parents[1] / "corpus").glob("*.py"))
WARN = {"options": {"fallback": "warn"}}  # the tests of the fallback itself (conftest makes tests strict)


def run_compiled(model, inputs, **compile_kwargs):
    """(compiled output, eager output, fallback warnings) under no_grad."""
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always", TidalFallbackWarning)
        expected = model(*inputs)
        got = torch.compile(model, backend="tidal", **compile_kwargs)(*inputs)
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, TidalFallbackWarning)]
    return got, expected, fallbacks


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_matches_eager(path):
    model, inputs = load_program_file(str(path))
    got, expected, fallbacks = run_compiled(model, inputs)
    assert fallbacks == [], fallbacks  # compiled by tidal, not silently run in eager
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_with_every_dim_dynamic_matches_eager(path):
    """dynamic=True: every size symbolic (what Dynamo's automatic dynamic makes of sizes that
    change). Per-step outputs sized by the body (a batch, a particle count, a slice of a nested
    map) are allocated with sizes computed before the loop; before, four of these programs were
    refused and ran in eager."""
    torch._dynamo.reset()
    model, inputs = load_program_file(str(path))
    got, expected, fallbacks = run_compiled(model, inputs, dynamic=True)
    assert fallbacks == [], fallbacks
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def fft_model(x):
    return torch.fft.fft(x).real * 2  # FFT_LINE


FFT_LINE = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# FFT_LINE" in text)


def test_unsupported_op_falls_back_with_one_warning_naming_op_and_line():
    x = torch.randn(8)
    got, expected, fallbacks = run_compiled(fft_model, (x,), **WARN)
    torch.testing.assert_close(got, expected)
    assert len(fallbacks) == 1, fallbacks
    assert "torch.aten._fft_r2c" in fallbacks[0]  # fft_fft, as PyTorch decomposes it
    assert f"test_backend.py:{FFT_LINE}" in fallbacks[0]


@pytest.mark.parametrize("how", ["options", "env"])
def test_strict_mode_raises_naming_op_and_line(how, monkeypatch):
    if how == "options":
        monkeypatch.delenv("TIDAL_FALLBACK", raising=False)
        compiled = torch.compile(fft_model, backend="tidal", options={"fallback": "error"})
    else:
        monkeypatch.setenv("TIDAL_FALLBACK", "error")
        compiled = torch.compile(fft_model, backend="tidal")
    with pytest.raises(TidalCompileError) as e, torch.no_grad():
        compiled(torch.randn(8))
    assert "torch.aten._fft_r2c" in e.value.reason
    assert f"test_backend.py:{FFT_LINE}" in e.value.reason
    assert "strict mode" in str(e.value)


def test_default_mode_is_warn_and_options_override_env(monkeypatch):
    monkeypatch.delenv("TIDAL_FALLBACK", raising=False)
    got, expected, fallbacks = run_compiled(fft_model, (torch.randn(8),))
    assert len(fallbacks) == 1
    torch._dynamo.reset()
    monkeypatch.setenv("TIDAL_FALLBACK", "error")
    got, expected, fallbacks = run_compiled(fft_model, (torch.randn(8),), **WARN)
    assert len(fallbacks) == 1
    torch.testing.assert_close(got, expected)


def test_unknown_fallback_mode_is_refused(monkeypatch):
    from tidal.dynamo import fallback_mode

    monkeypatch.setenv("TIDAL_FALLBACK", "sometimes")
    with pytest.raises(ValueError, match="fallback must be one of warn, error, got 'sometimes'"):
        fallback_mode({})


def test_fallback_warns_once_per_graph():
    compiled = torch.compile(fft_model, backend="tidal", **WARN)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always", TidalFallbackWarning)
        for _ in range(3):
            x = torch.randn(8)
            torch.testing.assert_close(compiled(x), fft_model(x))
    assert sum(issubclass(w.category, TidalFallbackWarning) for w in caught) == 1


class TinyRNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.3)

    def forward(self, h, xs):
        return scan(lambda c, x: (torch.tanh(c @ self.w + x), c.clone()), h, xs)


def test_new_shapes_are_compiled_again_and_match():
    model = TinyRNN()
    compiled = torch.compile(model, backend="tidal")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", TidalFallbackWarning)
        for steps in (3, 7, 11):
            h, xs = torch.randn(2, 4), torch.randn(steps, 2, 4)
            torch.testing.assert_close(compiled(h, xs), model(h, xs))


def test_weights_are_inputs_not_frozen():
    model = TinyRNN()
    compiled = torch.compile(model, backend="tidal")
    h, xs = torch.randn(2, 4), torch.randn(5, 2, 4)
    with torch.no_grad():
        compiled(h, xs)
        model.w.mul_(-2.0)  # a weight update must be seen by the compiled code
        torch.testing.assert_close(compiled(h, xs), model(h, xs))


def test_dump_dir_writes_ir_after_every_stage(tmp_path):
    model = TinyRNN()
    h, xs = torch.randn(2, 4), torch.randn(5, 2, 4)
    got, expected, fallbacks = run_compiled(model, (h, xs), options={"dump_dir": str(tmp_path)})
    assert fallbacks == []
    (graph_dir,) = list(tmp_path.iterdir())
    names = sorted(p.name for p in graph_dir.iterdir())
    assert names == ["00-torch.mlir", "01-tidal.mlir", "02-linalg.mlir", "03-llvm.mlir", "aten_graph.py", "fx_graph.py"]
    assert '"tidal.scan"' in (graph_dir / "00-torch.mlir").read_text()
    assert "linalg.matmul" in (graph_dir / "02-linalg.mlir").read_text()
    assert "llvm.func @main" in (graph_dir / "03-llvm.mlir").read_text()


def test_a_large_unrolled_program_is_split_into_pieces_and_still_matches(tmp_path, monkeypatch):
    # A low limit makes a few-step unrolled loop "large": the pieces then pass memrefs, an index
    # (the int step count) and floats through their frames, and the stacked outputs and final
    # state come back through them.
    import tidal.backends.cpu.split_functions as split

    monkeypatch.setattr(split, "DEFAULT_OPS_PER_FUNCTION", 40)
    monkeypatch.setattr(split, "DEFAULT_MIN_OPS", 80)

    def unrolled(h, xs, w, scale):
        hs = []
        for t in range(xs.shape[0]):
            h = torch.tanh(xs[t] @ w + h * scale)
            hs.append(h.sum(0))
        return h, torch.stack(hs), (h > 0).sum()

    g = torch.Generator().manual_seed(0)
    inputs = (torch.randn(3, 8, generator=g), torch.randn(12, 3, 8, generator=g), torch.randn(8, 8, generator=g) / 3, 0.5)
    got, expected, fallbacks = run_compiled(unrolled, inputs, options={"dump_dir": str(tmp_path)})
    assert fallbacks == []
    torch.testing.assert_close(got, expected)
    (graph_dir,) = list(tmp_path.iterdir())
    llvm = (graph_dir / "03-llvm.mlir").read_text()
    assert llvm.count("llvm.func @main__part") >= 4
    assert llvm.count("no_inline") == llvm.count("llvm.func @main__part")


def test_backend_is_found_without_importing_tidal():
    code = (
        "import torch\n"
        "from torch._higher_order_ops import while_loop\n"
        "f = lambda i, x: while_loop(lambda i, x: i < 4, lambda i, x: (i + 1, x * 2), (i, x))\n"
        "args = (torch.tensor(0), torch.ones(3))\n"
        "with torch.no_grad():\n"
        "    out = torch.compile(f, backend='tidal')(*args)\n"
        "import sys\n"
        "assert 'tidal.dynamo' in sys.modules\n"
        "torch.testing.assert_close(out, f(*args)); print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def test_symbolic_sequence_length_compiles_once(compiled_programs):
    """After Dynamo makes the length symbolic, one tidal program (dynamic `?` dim) serves all."""
    programs = compiled_programs
    model = TinyRNN()
    compiled = torch.compile(model, backend="tidal")
    with torch.no_grad():
        for steps in (4, 6, 9, 17, 33):
            h, xs = torch.randn(2, 4), torch.randn(steps, 2, 4)
            torch.testing.assert_close(compiled(h, xs), model(h, xs))
    # Dynamo compiles the first shape statically, then once with the length symbolic.
    assert len(programs) == 2
    assert [s.shape for s in programs[0].native.args if s.rank == 3] == [(4, 2, 4)]
    assert [s.shape for s in programs[1].native.args if s.rank == 3] == [(None, 2, 4)]


def test_a_dynamic_batch_compiles_once_and_matches(compiled_programs):
    """A batch size that changes (a smaller last batch) makes Dynamo's second graph symbolic in
    the batch too: the scan's stacked outputs then have a dynamic dim that is not the stacked
    one, which the CPU lowering refused ("needs per-step outputs of static shape"), so every call
    after the second shape ran in eager. Their size is now computed before the loop from the
    scan's operands (here the carry's batch dim)."""
    model = TinyRNN()
    compiled = torch.compile(model, backend="tidal", options={"fallback": "error"})
    with torch.no_grad():
        for batch, steps in ((2, 5), (3, 6), (7, 9), (4, 3)):
            h, xs = torch.randn(batch, 4), torch.randn(steps, batch, 4)
            torch.testing.assert_close(compiled(h, xs), model(h, xs))
    assert len(programs := compiled_programs) == 2
    assert [s.shape for s in programs[1].native.args if s.rank == 3] == [(None, None, 4)]


def test_dynamic_inner_dims_of_map_and_associative_scan_outputs():
    """The same for `map` (each slice's outputs sized by the slice) and for associative_scan
    (outputs shaped like the inputs), with every dim dynamic."""
    from torch._higher_order_ops.associative_scan import associative_scan
    from torch._higher_order_ops.map import map as hop_map

    def mapped(xs, w):
        return hop_map(lambda x, w: torch.tanh(x @ w).clone(), xs, w)

    def cumulative(x):
        return associative_scan(lambda a, b: a + b, x, dim=0, combine_mode="generic")

    for fn, shapes in ((mapped, [((3, 5, 4), (4, 6)), ((2, 7, 4), (4, 3))]), (cumulative, [((6, 5),), ((9, 3),)])):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="tidal", dynamic=True, options={"fallback": "error"})
        with torch.no_grad():
            for shape in shapes:
                args = [torch.randn(*s) for s in shape]
                torch.testing.assert_close(compiled(*args), fn(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matmuls_with_transposed_operands_and_accumulators(dtype):
    """Transposes and accumulating adds folded into the BLAS call (its 'T' flags and beta): every
    combination, shapes of three different sizes so that swapped m/n/k cannot pass, in a loop
    whose carry accumulates the products."""

    def products(acc, a, b, c, xs):
        def step(acc, x):
            acc = acc + x.t() @ b.t()  # [5,3]ᵀ·[4,5]ᵀ → [3,4]
            return acc, (a @ c.t() + acc).clone()  # [3,7]·[4,7]ᵀ

        return scan(step, acc, xs)

    gen = torch.Generator().manual_seed(6)
    acc = torch.randn(3, 4, dtype=dtype, generator=gen)
    a, b, c = (torch.randn(*s, dtype=dtype, generator=gen) for s in ((3, 7), (4, 5), (4, 7)))
    xs = torch.randn(6, 5, 3, dtype=dtype, generator=gen)
    got, expected, fallbacks = run_compiled(products, (acc, a, b, c, xs))
    assert fallbacks == []
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("steps", [1, 2, 7])
def test_scan_carries_that_are_also_stacked(steps, reverse):
    """A carry the body also stacks is read back from its stack (the first step peeled), a carry it
    does not stack stays loop-carried, and the hoisted x_t @ W each step accumulates into is
    updated in place: every combination against eager, one step (nothing left to loop over) included."""

    def rnn(h, c, xs, w, u, b):
        def step(carry, x):
            h, c = carry
            h = torch.tanh(x @ w + h @ u + b)
            c = c + h.sum(0)
            return (h, c), (c * 2, h.clone())

        return scan(step, (h, c), xs, reverse=reverse)

    gen = torch.Generator().manual_seed(11)
    h, c = torch.randn(3, 5, generator=gen), torch.zeros(5)
    xs = torch.randn(steps, 3, 4, generator=gen)
    w, u, b = (torch.randn(*s, generator=gen) / 2 for s in ((4, 5), (5, 5), (5,)))
    got, expected, fallbacks = run_compiled(rnn, (h, c, xs, w, u, b))
    assert fallbacks == []
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batched_matmuls_run_as_blas_calls(dtype, tmp_path):
    """bmm/batched matmul (an ATen call at the torch level) runs as one gemm per batch entry:
    transposed (read with BLAS's 'T') and broadcast operands, a slice of a batch, a batch of one, inside a loop too;
    shapes of different sizes so that swapped m/n/k cannot pass."""

    def batched(x, y, w, xs):
        s = torch.softmax(x @ y.transpose(1, 2) / 4, dim=-1)  # [3,5,7]·[3,6,7]ᵀ
        broadcast = x[:, 1:4] @ w  # [3,3,7]·[7,2] (a view of w broadcast over the batch)

        def step(acc, t):
            return acc + torch.bmm(t, w.expand(1, 7, 2)).sum(), (t[:, :2] @ w).clone()

        return s @ y, broadcast, scan(step, torch.zeros((), dtype=dtype), xs)

    gen = torch.Generator().manual_seed(8)
    x, y = torch.randn(3, 5, 7, dtype=dtype, generator=gen), torch.randn(3, 6, 7, dtype=dtype, generator=gen)
    w, xs = torch.randn(7, 2, dtype=dtype, generator=gen), torch.randn(4, 1, 3, 7, dtype=dtype, generator=gen)
    got, expected, fallbacks = run_compiled(batched, (x, y, w, xs), options={"dump_dir": str(tmp_path)})
    assert fallbacks == []
    torch.testing.assert_close(got, expected)
    (graph_dir,) = list(tmp_path.iterdir())
    llvm = (graph_dir / "03-llvm.mlir").read_text()
    assert "torch_call_dispatcher" not in llvm and ("dgemm_" if dtype == torch.float64 else "sgemm_") in llvm
    # x @ yᵀ: BLAS reads each entry of y with 'T' (84) instead of a transposed copy of y
    assert "llvm.mlir.constant(84 : i8)" in llvm


def _dense_grid_with_edges(lo, hi, edges):
    return torch.cat([torch.linspace(lo, hi, 400_001), torch.tensor(edges, dtype=torch.float32)])


@pytest.mark.parametrize("name", ["exp", "erf", "tanh"])
def test_vectorized_transcendentals_match_eager(name):
    """tidal-fast-math's exp, erf and tanh (arithmetic, vectorized) against ATen's on a dense grid
    and the edges: overflow to inf, underflow to 0 and subnormals, saturation, NaN, ±0."""
    inf, nan = float("inf"), float("nan")
    fn = getattr(torch, name)
    grid = {
        "exp": _dense_grid_with_edges(-110, 90, [inf, -inf, nan, 0.0, -0.0, 88.7228, 88.723, -87.33, -100.0, -103.9, -104.5]),
        "erf": _dense_grid_with_edges(-6, 6, [inf, -inf, nan, 0.0, -0.0, 1e-30, -3.99, 4.01]),
        "tanh": _dense_grid_with_edges(-12, 12, [inf, -inf, nan, 0.0, -0.0, 1e-30, 7.9, -7.91, 9.0108395, 9.0108404, -9.0108404, 10.0]),
    }[name]
    got, expected, fallbacks = run_compiled(lambda x: fn(x), (grid,))
    assert fallbacks == []
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.isinf(), expected.isinf()) and torch.equal(got[got.isinf()], expected[expected.isinf()])
    finite = expected.isfinite()
    if name == "exp":  # 2 ulp where the result is normal, 2 subnormal steps below
        normal = finite & (expected >= torch.finfo(torch.float32).tiny)
        assert ((got[normal] - expected[normal]).abs() <= 2.4e-7 * expected[normal]).all()
        assert ((got[finite & ~normal] - expected[finite & ~normal]).abs() <= 3e-45).all()
    else:
        assert (got[finite] - expected[finite]).abs().max() <= 1e-6
    if name == "tanh":  # exactly ±1 where eager saturates (a cond on `tanh(x) < 1` must agree)
        saturated = expected.abs() == 1
        assert torch.equal(got[saturated], expected[saturated]) and (got[~saturated & ~expected.isnan()].abs() < 1).all()


def test_exact_multiply_adds_round_as_eager():
    """tidal-contract-exact-multiply-adds fuses `x * 2^k + c` (k <= 0, c of normal magnitude)
    into one FMA: the bits must be eager's on every float, subnormals, infinities and NaN
    included. `x * 0.5 + 2^-149` is one the pass must leave alone: fused, a subnormal x rounds
    differently (2^-149 * 0.5 + 2^-149 is 2^-148 in one rounding, 2^-149 in two)."""
    g = torch.Generator().manual_seed(0)
    every_kind = torch.randint(-(2**31), 2**31 - 1, (1 << 18,), dtype=torch.int32, generator=g)
    small = torch.arange(-4096, 4096, dtype=torch.int32)  # the subnormals nearest zero, both signs
    x = torch.cat([every_kind, small, small | (1 << 23)]).view(torch.float32)
    tiny = 2.0**-149

    # one program each: a product shared by two sums is not fused at all
    for f in (lambda x: x * 0.5 + 1, lambda x: x * 0.25 - 2.0**-100, lambda x: 3.0 - x * 0.125,
              lambda x: x * 2.0**-60 + 2.0**-90, lambda x: x * 0.5 + tiny, lambda x: x * -0.5 + 7.0):
        torch._dynamo.reset()
        got, expected, fallbacks = run_compiled(f, (x,))
        assert fallbacks == []
        same_bits = (got.view(torch.int32) == expected.view(torch.int32)) | (got.isnan() & expected.isnan())
        assert same_bits.all(), x[~same_bits][:4]
    xd = x.double() * torch.rand(x.shape, dtype=torch.float64, generator=g).mul(2400).sub(1200).exp2()
    torch._dynamo.reset()
    got, expected, _ = run_compiled(lambda y: y * 0.5 + 2.0**-967, (xd,))
    assert ((got.view(torch.int64) == expected.view(torch.int64)) | (got.isnan() & expected.isnan())).all()


def _returned_by_tidal(model, inputs):
    """What tidal's backend hands Dynamo for `model`'s one graph, and the compiled outputs."""
    from tidal.dynamo import tidal_backend

    returned = []

    def backend(gm, example_inputs):
        returned.append(tidal_backend(gm, example_inputs, options={"fallback": "error"}))
        return returned[-1]

    out = torch.compile(model, backend=backend, fullgraph=True)(*inputs)
    assert len(returned) == 1
    return returned[0], out


def _direct(fn) -> bool:
    return "unboxed" in fn.__qualname__


def test_plain_inference_graph_is_called_without_aot_autograds_wrapper():
    """No mutation, no aliased output, Dynamo's own arguments: Dynamo calls tidal's program
    directly (the wrapper cost 1.5 us a call), with grad mode on or off."""

    def f(x, w):
        return torch.tanh(x @ w), (x * 2).sum()

    x, w = torch.randn(4, 3), torch.randn(3, 5)
    for grad in (False, True):
        with torch.set_grad_enabled(grad):
            fn, (y, s) = _returned_by_tidal(f, (x, w))
            assert _direct(fn)
            torch.testing.assert_close(y, torch.tanh(x @ w))
            torch.testing.assert_close(s, (x * 2).sum())
            assert not y.requires_grad
            again = fn(x, w)  # later calls: the program's entry
            torch.testing.assert_close(again[0], y)


def test_aot_autograds_wrapper_is_kept_where_it_does_something():
    """An input mutated, an output viewing an input: aot_autograd's wrapper writes back and
    regenerates the view, so it stays; eager's semantics."""

    def mutates(x):
        x.mul_(2)
        return x + 1

    def views(x):
        return x.view(2, 2), x + 1

    with torch.no_grad():
        x = torch.randn(4)
        x_eager = x.clone()
        fn, out = _returned_by_tidal(mutates, (x,))
        assert not _direct(fn)
        torch.testing.assert_close(out, mutates(x_eager))
        torch.testing.assert_close(x, x_eager)

        x = torch.randn(4)
        x_before = x.clone()
        fn, (v, y) = _returned_by_tidal(views, (x,))
        assert not _direct(fn)
        torch.testing.assert_close(y, x_before + 1)
        v[0, 0] = 7.0  # a view of x, as in eager
        assert x[0] == 7.0
