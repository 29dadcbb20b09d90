"""The native calling convention: dtypes, ranks, strides, aliasing, bad arguments."""

import pytest
import torch
from torch._higher_order_ops import map as hop_map
from torch._higher_order_ops import while_loop

from tidal.compiler import compile_program


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_dtypes(dtype):
    def f(i, x):
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2 + 1), (i, x))

    args = (torch.tensor(0), torch.arange(6).reshape(2, 3).to(dtype))
    torch.testing.assert_close(compile_program(f, args)(*args), f(*args))


def test_bool_and_zero_dim_results():
    def f(x):
        return torch.cond(x.sum() > 0, lambda a: (a > 0, a.sum()), lambda a: (a < 0, a.mean()), (x,))

    for x in (torch.randn(5), -torch.rand(5)):
        torch.testing.assert_close(compile_program(f, (x,))(x), f(x))


def test_non_contiguous_inputs_are_made_contiguous():
    def f(xs, w):
        return hop_map(lambda x, w: x * w, xs, w)

    xs = torch.randn(6, 4).t()  # strides (1, 4): not contiguous
    w = torch.randn(6)
    program = compile_program(f, (xs.contiguous(), w))
    torch.testing.assert_close(program(xs, w), f(xs, w))


def test_result_never_aliases_an_input():
    def f(p, x):
        return torch.cond(p, lambda a: a.clone(), lambda a: a * 1.0, (x,))

    x = torch.randn(4)
    out = compile_program(f, (torch.tensor(True), x))(torch.tensor(True), x)
    out.add_(1.0)
    assert not torch.equal(out, x)  # writing the result must not write the input


def test_results_are_independent_tensors():
    def f(x):
        return hop_map(lambda t: (t * 2, t * 3), x)

    x = torch.randn(3, 2)
    a, b = compile_program(f, (x,))(x)
    a.zero_()
    torch.testing.assert_close(b, x * 3)


def test_wrong_arguments_are_rejected_clearly():
    def f(x):
        return hop_map(lambda t: t * 2, x)

    program = compile_program(f, (torch.randn(3, 2),))
    with pytest.raises(TypeError, match="dtype torch.float64, compiled for torch.float32"):
        program(torch.randn(3, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"shape \(4, 2\), compiled for \(3, 2\)"):
        program(torch.randn(4, 2))
    with pytest.raises(TypeError, match="expected 1 tensors, got 2"):
        program(torch.randn(3, 2), torch.randn(3, 2))


def test_dynamic_scan_length_one_program():
    from torch.export import Dim
    from torch._higher_order_ops import scan

    def f(h, xs, w):
        return scan(lambda c, x: (torch.tanh(c @ w + x), c.clone()), h, xs)

    torch.manual_seed(0)  # a contracting recurrence (scaled weights, as real models have): an
    # unscaled random w amplified ulp-level differences over 40 steps past the tolerance
    args = (torch.randn(3), torch.randn(5, 3), torch.randn(3, 3) * 0.5)
    program = compile_program(f, args, dynamic_shapes=(None, {0: Dim("T", min=2)}, None))
    assert program.native.args[1].shape == (None, 3)
    assert not program.native.results_as_arguments  # [T, 3] outputs: the code sizes and returns them
    for steps in (2, 7, 40):
        xs = torch.randn(steps, 3)
        torch.testing.assert_close(program(args[0], xs, args[2]), f(args[0], xs, args[2]))


def test_one_buffer_returned_twice_stays_valid():
    """Regression: a program returning one small buffer twice (aot_autograd's forward returns an
    output and its alias as a residual) copied the first result, freed the buffer, then copied
    the second from freed memory (garbage such as 1e24)."""

    def f(x):
        y = x * 2 + 1
        return y, y

    for shape in [(6, 3), (5, 7), (2, 9), (16,), (3, 3, 3)]:
        x = torch.randn(shape)
        program = compile_program(f, (x,))
        for _ in range(10):  # the freed buffer's first bytes are overwritten by malloc's bookkeeping
            a, b = program(x)
            torch.testing.assert_close(a, x * 2 + 1)
            torch.testing.assert_close(b, x * 2 + 1)
            assert a.data_ptr() != b.data_ptr()


def test_static_results_are_written_into_tensors_the_runtime_allocates():
    """Every output has a static shape: the runtime allocates the outputs and the code writes
    into them; an output that is an input, a constant or another output is copied there."""

    def f(x):
        y = x * 2 + 1
        return y, x, y, torch.ones(3), x[:, 1]

    x = torch.randn(200, 100)  # 80 KB outputs: large enough to have been adopted zero-copy before
    program = compile_program(f, (x,))
    assert program.native.results_as_arguments
    x_before = x.clone()
    for _ in range(3):
        outs = program(x)
        for got, want in zip(outs, f(x)):
            torch.testing.assert_close(got, want)
        assert len({o.data_ptr() for o in outs} | {x.data_ptr()}) == len(outs) + 1
        for o in outs:
            o.zero_()
        torch.testing.assert_close(x, x_before)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (0, 3), (2, 3, 4)])
def test_static_results_are_fresh_contiguous_tensors_of_every_shape(shape):
    """The runtime makes static outputs with `empty_like` of a broadcast template; a shape of
    only 1s would keep the template's 0 strides, and an empty one has no data to write."""

    def f(x):
        return x * 2, x + 1

    x = torch.randn(shape)
    program = compile_program(f, (x,))
    assert program.native.results_as_arguments
    first = program(x)
    second = program(x)
    for got, want in zip(second, f(x)):
        torch.testing.assert_close(got, want)
        assert got.is_contiguous() and got.stride() == torch.empty(shape).stride()
    if x.numel():
        assert {t.data_ptr() for t in first}.isdisjoint(t.data_ptr() for t in second)


def test_inputs_are_checked_when_the_fast_path_declines():
    """A non-tensor or a transposed view leaves the one-expression check for the full one."""

    def f(x):
        return hop_map(lambda t: t * 2, x)

    program = compile_program(f, (torch.randn(3, 2),))
    with pytest.raises(TypeError, match="argument 0 must be a tensor, got list"):
        program.native([[1.0, 2.0]] * 3)
    xt = torch.randn(2, 3).t()
    torch.testing.assert_close(program(xt), xt * 2)


def test_outputs_that_alias_an_input_or_an_earlier_output_are_handed_out_not_copied():
    """aot_autograd's graphs return an input as a residual and one value twice (a user output and
    its alias saved for the backward): the program hands those tensors out as they are, as
    Inductor does (tidal-forward-aliased-results). A clone folds to the same value in the IR but
    is a fresh tensor in the program: it stays a fresh tensor."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tidal.compiler import compile_graph_module

    def f(x, a):
        y = x * 2
        return y, a.view(4), y.view(4), x.clone(), y.clone()

    x, a = torch.randn(4), torch.randn(4)
    program = compile_graph_module(make_fx(f)(x, a), (x, a))
    assert program.native.forwarded == [None, ("arg", 1), ("result", 0), None, None]
    y, a_view, y_view, x_clone, y_clone = program([x, a])
    for got, want in zip((y, a_view, y_view, x_clone, y_clone), f(x, a)):
        torch.testing.assert_close(got, want)
    assert a_view.data_ptr() == a.data_ptr() and y_view.data_ptr() == y.data_ptr()  # aliases, as in eager
    x_before, y_before = x.clone(), y.clone()
    x_clone.add_(1)
    y_clone.add_(1)
    torch.testing.assert_close(x, x_before)
    torch.testing.assert_close(y, y_before)


def test_training_forward_saves_its_input_without_a_copy(monkeypatch):
    """The linear recurrence's forward returns `a` (a residual) and h twice (output and residual):
    one computed buffer, the others handed out; gradients as eager's."""
    from torch._higher_order_ops import associative_scan

    import tidal.compiler

    natives = []
    compile_native = tidal.compiler.native_function
    monkeypatch.setattr(tidal.compiler, "native_function", lambda *a, **k: natives.append(compile_native(*a, **k)) or natives[-1])

    def recurrence(a, b):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=0, combine_mode="generic")[1]

    a = (0.5 + 0.5 * torch.rand(64, 16)).requires_grad_()
    b = torch.randn(64, 16, requires_grad=True)
    compiled = torch.compile(recurrence, backend="tidal", options={"fallback": "error"})
    h = compiled(a, b)
    forward = natives[0].forwarded
    assert forward is not None and forward.count(None) == 1, forward
    h_eager = recurrence(a, b)
    torch.testing.assert_close(h, h_eager)
    got = torch.autograd.grad(h.square().sum(), (a, b))
    want = torch.autograd.grad(h_eager.square().sum(), (a, b))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_generated_entry_matches_the_checked_call():
    """`NativeFunction.entry()`: straight-line code for an all-static signature. Well-formed
    arguments run it; a transposed view, a wrong dtype or shape, or a non-tensor take the
    checked call (same results, same errors)."""

    def f(x, y):
        return hop_map(lambda t, u: (t * 2 + u, t - u), x, y)

    x, y = torch.randn(3, 2), torch.randn(3, 2)
    program = compile_program(f, (x, y))
    entry = program.native.entry()
    assert entry is not program.native.__call__  # the generated code, not the general call
    for got, want in zip(entry(x, y), f(x, y)):
        torch.testing.assert_close(got, want)
    xt = torch.randn(2, 3).t()
    for got, want in zip(entry(xt, y), f(xt, y)):
        torch.testing.assert_close(got, want)
    with pytest.raises(TypeError, match="dtype torch.float64, compiled for torch.float32"):
        entry(x.double(), y)
    with pytest.raises(TypeError, match=r"argument 1 has shape \(4, 2\), compiled for \(3, 2\)"):
        entry(x, torch.randn(4, 2))
    with pytest.raises(TypeError, match="argument 0 must be a tensor, got list"):
        entry([[1.0, 2.0]] * 3, y)
    first, second = entry(x, y), entry(x, y)
    assert first[0].data_ptr() != second[0].data_ptr()  # fresh results on every call


def test_generated_entry_checks_arguments_in_cpp_first():
    """The entry's first check is Dynamo's C++ tensor check; what it refuses (a tensor that
    requires grad, strides other than the contiguous ones, an entry made in inference mode
    called outside it) takes the Python checks and runs the program all the same. Well-formed
    arguments never reach the checked call."""

    def f(x, y):
        return hop_map(lambda t, u: (t * 2 + u, t - u), x, y)

    x, y = torch.randn(3, 1), torch.randn(3, 1)
    program = compile_program(f, (x, y))
    entry = program.native.entry()
    checked = entry.__globals__["_checked"]
    calls = []
    entry.__globals__["_checked"] = lambda *a: calls.append(a) or checked(*a)
    want = f(x, y)
    assert entry.__globals__["_as_compiled"](x, y)
    for got, expected in zip(entry(x, y), want):
        torch.testing.assert_close(got, expected)
    xg = x.clone().requires_grad_()
    assert not entry.__globals__["_as_compiled"](xg, y)
    with torch.no_grad():
        for got, expected in zip(entry(xg, y), want):
            torch.testing.assert_close(got, expected)
    odd_strides = torch.randn(1, 3).t()  # [3, 1] with strides (1, 3): contiguous, not the expected (1, 1)
    assert odd_strides.is_contiguous() and not entry.__globals__["_as_compiled"](odd_strides, y)
    for got, expected in zip(entry(odd_strides, y), f(odd_strides, y)):
        torch.testing.assert_close(got, expected)
    assert calls == []
    with torch.inference_mode():
        made_inside = program.native.entry()
    for got, expected in zip(made_inside(x, y), want):
        torch.testing.assert_close(got, expected)


def test_static_entry_takes_data_pointers_from_any_thread():
    """An all-static program gets `_mlir_tidal_static_main` (one data pointer per tensor, no
    descriptor), which the generated entry calls; it holds no per-call state, so threads calling
    one entry at once each get their own results."""
    import threading

    def f(x, y):
        return hop_map(lambda t, u: (t * 2 + u, t - u), x, y)

    x, y = torch.randn(64, 8), torch.randn(64, 8)
    program = compile_program(f, (x, y))
    assert program.native.static is not None
    entry = program.native.entry()
    inputs = [(torch.randn(64, 8), torch.randn(64, 8)) for _ in range(4)]
    wrong = []

    def work(a, b):
        want = f(a, b)
        for _ in range(300):
            got = entry(a, b)
            if not all(torch.equal(g, w) for g, w in zip(got, want)):
                wrong.append(got)

    threads = [threading.Thread(target=work, args=ab) for ab in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_static_entry_needs_the_expanded_signature():
    """`add_static_entry` adds nothing where the function's arguments are not the expanded
    descriptors of the static signature it is given, or a shape is dynamic."""
    from torch_mlir import ir

    from tidal.runtime.executable import add_static_entry
    from tidal.runtime.memref import TensorSig

    text = "llvm.func @main(%a: !llvm.ptr, %b: !llvm.ptr, %c: i64, %d: i64, %e: i64) { llvm.return }"
    with ir.Context():
        for sigs in ([TensorSig(torch.float32, ())], [TensorSig(torch.float32, (None,))],
                     [TensorSig(torch.float32, (4,)), TensorSig(torch.float32, (4,))]):
            module = ir.Module.parse(text)
            assert not add_static_entry(module, "main", sigs)
            assert len(list(module.body.operations)) == 1
        module = ir.Module.parse(text)
        assert add_static_entry(module, "main", [TensorSig(torch.float32, (4,))])
        assert module.operation.verify()
        printed = str(module)  # data pointer twice (allocated, aligned), offset 0, size 4, stride 1
        assert "%1 = llvm.mlir.constant(1 : i64)" in printed and "%2 = llvm.mlir.constant(4 : i64)" in printed, printed
        assert "llvm.call @main(%arg0, %arg0, %0, %2, %1)" in printed, printed


def test_generated_entry_hands_out_forwarded_results():
    from torch.fx.experimental.proxy_tensor import make_fx

    from tidal.compiler import compile_graph_module

    def f(x, a):
        y = x * 2
        return y, a.view(4), y.view(4)

    x, a = torch.randn(4), torch.randn(4)
    program = compile_graph_module(make_fx(f)(x, a), (x, a))
    assert program.native.forwarded == [None, ("arg", 1), ("result", 0)]
    y, a_view, y_view = program.native.entry()(x, a)
    torch.testing.assert_close(y, x * 2)
    assert a_view is a and y_view is y


def test_generated_entry_declines_dynamic_signatures():
    def f(xs):
        return hop_map(lambda t: t * 2, xs)

    x = torch.randn(5, 3)
    dim = torch.export.Dim("n", min=2)
    program = compile_program(f, (x,), dynamic_shapes=({0: dim},))
    assert program.native.entry() == program.native.__call__
    x7 = torch.randn(7, 3)
    torch.testing.assert_close(program.native.entry()(x7)[0], x7 * 2)


def test_generated_entry_without_the_cpp_check(monkeypatch):
    """A torch without Dynamo's C++ tensor check (a private API) gets the Python checks alone."""
    import tidal.runtime.executable as executable

    monkeypatch.setattr(executable, "_tensor_check", lambda sigs: None)

    def f(x, y):
        return hop_map(lambda t, u: (t * 2 + u, t - u), x, y)

    x, y = torch.randn(3, 2), torch.randn(3, 2)
    entry = compile_program(f, (x, y)).native.entry()
    assert "_as_compiled" not in entry.__code__.co_names
    for got, want in zip(entry(x, y), f(x, y)):
        torch.testing.assert_close(got, want)
    with pytest.raises(TypeError, match="dtype torch.float64, compiled for torch.float32"):
        entry(x.double(), y)


def test_a_symbol_this_torch_lacks_is_not_registered(monkeypatch):
    """Required native symbols this torch's library lacks (torch 2.11 has no
    `torch_exception_get_what_without_backtrace`) are left out, not fatal: programs that do not
    call them still compile and run."""
    from tidal.runtime import externs

    monkeypatch.setattr(externs, "_REQUIRED", externs._REQUIRED | {"tidal_test_symbol_no_torch_has"})
    assert "tidal_test_symbol_no_torch_has" not in externs.addresses()

    def f(x):
        return hop_map(lambda t: t * 2, x)

    x = torch.randn(3, 2)
    torch.testing.assert_close(compile_program(f, (x,))(x), x * 2)


def test_large_buffers_kept_between_calls_stay_right_across_threads_and_shapes():
    """An RNN over [T, 64, 64] hoists a [T, 64, 256] x·W (16 MiB at T = 256): a temporary the
    module keeps for its next call (`tidal-huge-page-buffers`), and at dynamic T the [T, 64, 64]
    result is a buffer the module allocates that torch adopts and frees with libc's free. Calls at
    two lengths, then four threads calling at once, each against eager."""
    import threading

    from torch._higher_order_ops import scan

    gen = torch.Generator().manual_seed(3)
    w, u = torch.randn(64, 256, generator=gen) * 0.125, torch.randn(256, 64, generator=gen) * 0.0625

    def rnn(xs, w, u):
        def step(h, x):
            h = torch.tanh((x @ w) @ u * 0.5 + h * 0.5)
            return h, h.clone()

        return scan(step, xs.new_zeros(64, 64), xs)[1]

    program = compile_program(rnn, (torch.randn(256, 64, 64, generator=gen), w, u),
                              dynamic_shapes=({0: torch.export.Dim("T", min=2)}, None, None))
    inputs = [torch.randn(t, 64, 64, generator=gen) for t in (256, 300, 256, 256, 300)]
    for xs in inputs[:3]:
        torch.testing.assert_close(program(xs, w, u), rnn(xs, w, u), rtol=1e-4, atol=1e-4)
    got, errors = [None] * 8, []

    def worker(i):
        try:
            for k in range(2):
                got[2 * i + k] = program(inputs[(i + k) % len(inputs)], w, u)
        except Exception as exc:  # noqa: BLE001  (reported below, in the test's thread)
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(4):
        for k in range(2):
            xs = inputs[(i + k) % len(inputs)]
            torch.testing.assert_close(got[2 * i + k], rnn(xs, w, u), rtol=1e-4, atol=1e-4)


def test_a_result_of_32_mib_is_advised_onto_huge_pages_and_stays_right(monkeypatch):
    """A static [2048, 4096] f32 result (32 MiB: glibc maps it fresh every call) is allocated by
    the runtime and its 2 MiB-aligned interior advised MADV_HUGEPAGE before the compiled code
    writes it; a 16 MiB one is not (warm heap memory). Values against eager, call after call."""
    import tidal.runtime.executable as executable

    advised = []
    real = executable.advise_huge_pages
    monkeypatch.setattr(executable, "advise_huge_pages", lambda start, length: advised.append(length) or real(start, length))

    def f(x):
        return torch.tanh(x) * 2 + 1

    big, half = torch.randn(2048, 4096), torch.randn(1024, 4096)
    program, smaller = compile_program(f, (big,)), compile_program(f, (half,))
    assert program.native.results_as_arguments
    for _ in range(3):
        torch.testing.assert_close(program(big), f(big))
        torch.testing.assert_close(smaller(half), f(half))
    assert len(advised) == 3 and all(32 << 20 >= n >= (32 << 20) - (2 << 20) for n in advised), advised
