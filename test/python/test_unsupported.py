"""What tidal does not support never gives a wrong result under `torch.compile(backend="tidal")`.

For every program here the compiled call must either
  * match eager (outputs AND any mutation of the inputs), with exactly one TidalFallbackWarning
    when tidal cannot compile the graph (`expect="fallback"`), none when it can (`expect="compiled"`),
    or either (`expect="either"`: Dynamo may keep the op out of the graph it hands to tidal), or
  * raise the same exception type that eager raises (`expect="raises"`).

Known wrong results and crashes are in test_regressions.py (xfail until fixed).
"""

import warnings

import pytest
import torch
from torch._higher_order_ops import map, scan, while_loop

from tidal.dynamo import TidalFallbackWarning


def _clone(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


def compare_with_eager(model, inputs, expect: str):
    eager_inputs = [_clone(i) for i in inputs]
    tidal_inputs = [_clone(i) for i in inputs]
    eager_exc = tidal_exc = None
    with torch.no_grad():
        try:
            expected = model(*eager_inputs)
        except Exception as e:  # noqa: BLE001
            eager_exc = e
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TidalFallbackWarning)
            try:
                # strict only where tidal must compile; the rest tests the fallback itself
                options = {"fallback": "error" if expect == "compiled" else "warn"}
                got = torch.compile(model, backend="tidal", options=options)(*tidal_inputs)
            except Exception as e:  # noqa: BLE001
                tidal_exc = e
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, TidalFallbackWarning)]
    if expect == "raises":
        assert eager_exc is not None, "eager was expected to raise"
        assert tidal_exc is not None, f"eager raised {type(eager_exc).__name__} but tidal returned {got!r}"
        assert type(tidal_exc) is type(eager_exc), (type(tidal_exc), tidal_exc, type(eager_exc))
        assert len(fallbacks) <= 1, fallbacks
        return fallbacks
    assert eager_exc is None, f"eager raised {eager_exc!r}"
    assert tidal_exc is None, f"tidal raised {type(tidal_exc).__name__}: {tidal_exc}"
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=1e-5, atol=1e-6)
    for a, b in zip(tidal_inputs, eager_inputs):  # in-place updates of inputs, if any, agree
        if isinstance(a, torch.Tensor) and a.layout == torch.strided and not a.is_quantized:
            torch.testing.assert_close(a, b, equal_nan=True)
    if expect == "fallback":
        assert len(fallbacks) == 1, fallbacks
    elif expect == "compiled":
        assert fallbacks == [], fallbacks
    else:
        assert len(fallbacks) <= 1, fallbacks
    return fallbacks


torch.manual_seed(0)
X = torch.randn(4, 3)

# -- unsupported aten ops, at the top level and inside control-flow bodies -------------------


def fft_top(x):
    return torch.fft.fft(x).real * 2


def fft_in_scan(h, xs):
    return scan(lambda c, x: (c + torch.fft.fft(x).real, c.clone()), h, xs)


def fft_in_cond(x):
    return torch.cond(x.sum() > 0, lambda x: torch.fft.fft(x).real.contiguous(), lambda x: x * 2, (x,))


def fft_in_while(x):
    def body(i, v):
        return i + 1, torch.fft.fft(v).real.contiguous()
    return while_loop(lambda i, v: i < 2, body, (torch.zeros((), dtype=torch.int64), x))


def fft_in_map(xs):
    return map(lambda r: torch.fft.fft(r).real, xs)


def int_pow(x):
    return x**2


@pytest.mark.parametrize("model,inputs", [
    (fft_top, (X,)),
    (fft_in_scan, (torch.zeros(3), X)),
    (fft_in_cond, (X,)),
    (fft_in_cond, (-X.abs(),)),
    (fft_in_while, (X,)),
    (fft_in_map, (X,)),
    (int_pow, (torch.arange(5),)),
], ids=["fft", "fft-in-scan", "fft-in-cond-taken", "fft-in-cond-not-taken", "fft-in-while", "fft-in-map",
        "int-pow"])  # topk and sort compile now (ATen calls): test_layers.py; linalg.inv: test_linalg_in_loops.py
def test_unsupported_op_falls_back(model, inputs):
    fallbacks = compare_with_eager(model, inputs, "fallback")
    assert "tidal cannot compile this graph" in fallbacks[0]


def test_fallback_warning_names_the_op_in_a_body():
    fallbacks = compare_with_eager(fft_in_scan, (torch.zeros(3), X), "fallback")
    assert "fft" in fallbacks[0]


# -- dtypes and layouts tidal cannot (or need not) handle ------------------------------------


def test_complex_input_falls_back():
    z = torch.randn(3, dtype=torch.complex64)
    fallbacks = compare_with_eager(lambda z: z * 2, (z,), "fallback")
    assert "complex" in fallbacks[0]


def test_complex_intermediate_falls_back():
    compare_with_eager(lambda x: torch.view_as_complex(x.reshape(2, 2).contiguous()).abs(), (torch.randn(4),),
                       "fallback")


def test_complex_in_cond_branch_falls_back():
    def model(x):
        return torch.cond(x.sum() > 0, lambda x: torch.view_as_complex(x.reshape(-1, 2)).abs(),
                          lambda x: x.reshape(-1, 2)[:, 0].contiguous(), (x,))
    compare_with_eager(model, (torch.randn(6),), "either")


@pytest.mark.parametrize("model,inputs", [
    (lambda m, a, b: torch.where(m, a, b), (X > 0, X, -X)),
    (lambda m, a: torch.cond(m.any(), lambda a: a + 1, lambda a: a - 1, (a,)), (X > 0, X)),
    (lambda m, a: torch.cond(m, lambda a: a + 1, lambda a: a - 1, (a,)), (torch.tensor(True), X)),
    (lambda a: a > 0, (X,)),
    (lambda xs: scan(lambda c, x: (c + x.long(), c.clone()), torch.zeros(3, dtype=torch.long), xs), (X > 0,)),
], ids=["where", "cond-any", "cond-0d-bool-pred", "bool-output", "scan-bool-xs"])
def test_bool_tensors(model, inputs):
    compare_with_eager(model, inputs, "either")


def test_sparse_coo_input():
    compare_with_eager(lambda s: s.to_dense() * 2, (X.to_sparse(),), "either")


def test_sparse_csr_input():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Sparse CSR tensor support is in beta state"
        csr = X.to_sparse_csr()
    compare_with_eager(lambda s: s.to_dense() * 2, (csr,), "either")


def test_quantized_input():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # quantized tensor creation is deprecated
        q = torch.quantize_per_tensor(X, 0.1, 0, torch.qint8)
    compare_with_eager(lambda q: q.dequantize() * 2, (q,), "either")


def test_float16_cond():
    compare_with_eager(lambda x: torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)),
                       (X.half(),), "either")


def test_non_contiguous_input():
    compare_with_eager(lambda x: torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)), (X.t(),),
                       "compiled")


def test_empty_tensor():
    compare_with_eager(lambda x: x.sum(0) + 1, (torch.zeros(0, 3),), "either")


def test_int64_overflow_wraps_like_eager():
    compare_with_eager(lambda x: x * (2**62), (torch.arange(4),), "either")


# -- data-dependent Python control flow and shapes (Dynamo graph breaks) ---------------------


def item_predicate(x):
    if x.sum().item() > 0:
        return x * 2
    return x - 1


def test_item_in_python_if():
    compare_with_eager(item_predicate, (X,), "either")
    compare_with_eager(item_predicate, (-X.abs(),), "either")


def test_boolean_mask_indexing():
    compare_with_eager(lambda x: x[x > 0] * 2, (X,), "either")


def test_non_tensor_output():
    compare_with_eager(lambda x: (x * 2, 3), (X,), "either")


# -- mutation and Python side effects ---------------------------------------------------------


def mutate_in_cond(x):
    return torch.cond(x.sum() > 0, lambda x: x.add_(1), lambda x: x.sub_(1), (x,))


def test_input_mutation_inside_cond_branch():
    compare_with_eager(mutate_in_cond, (X,), "either")


def test_closure_mutation_inside_scan_body_raises_like_eager():
    w = torch.zeros(3)

    def model(h, xs):
        def step(c, x):
            w.add_(1)
            return c + x, c.clone()
        return scan(step, h, xs)

    compare_with_eager(model, (torch.zeros(3), X), "raises")


def test_list_append_inside_cond_branch_raises_like_eager():
    log = []

    def model(x):
        def then(x):
            log.append(1)
            return x + 1
        return torch.cond(x.sum() > 0, then, lambda x: x - 1, (x,))

    compare_with_eager(model, (X,), "raises")


def test_print_inside_cond_branch_raises_like_eager(capsys):
    def model(x):
        def then(x):
            print("hello from a branch")
            return x + 1
        return torch.cond(x.sum() > 0, then, lambda x: x - 1, (x,))

    compare_with_eager(model, (X,), "raises")


def test_print_inside_scan_body_raises_like_eager(capsys):
    def model(h, xs):
        def step(c, x):
            print("step")
            return c + x, c.clone()
        return scan(step, h, xs)

    compare_with_eager(model, (torch.zeros(3), X), "raises")


def test_top_level_python_side_effects_replayed():
    log = []

    def model(x):
        log.append(len(log))
        return x * 2

    compare_with_eager(model, (X,), "either")
    assert log == [0, 1]  # once in eager, once in the compiled call


# -- invalid programs raise what eager raises ------------------------------------------------


def test_empty_map_raises_like_eager():
    compare_with_eager(lambda x: map(lambda r: r * 2, x), (torch.zeros(0, 3),), "raises")


def test_cond_branches_of_different_shapes():
    # torch 2.13 accepts branches whose outputs differ in shape (an unbacked size): tidal must
    # compute the same or fall back.
    model = lambda x: torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x[:2].cos(), (x,))  # noqa: E731
    compare_with_eager(model, (X,), "either")
    compare_with_eager(model, (-X.abs(),), "either")

