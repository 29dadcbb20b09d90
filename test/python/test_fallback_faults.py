"""Fault injection: a failure at any stage of tidal's pipeline is the eager fallback, never an
exception escaping to the user (issue #40, "never worse than eager").

Each stage is made to raise in turn (a plain RuntimeError, as an internal bug would, not a
TidalError): the compiled call must still return eager's result with exactly one
TidalFallbackWarning in default mode, and raise TidalCompileError naming the user's line of the
graph's first control-flow op in strict mode. Inference and training (gradients checked against
the same program written as a Python loop) both go through every stage that applies to them.
"""

import warnings

import pytest
import torch
from torch._higher_order_ops.scan import scan

import tidal.autodiff.cond
import tidal.compiler
import tidal.dynamo
import tidal.importer
import tidal.runtime
import tidal.runtime.cache
from tidal.dynamo import TidalCompileError, TidalFallbackWarning

WARN = {"fallback": "warn"}
STRICT = {"fallback": "error"}


def _step(h, x_t, w):
    h = torch.tanh(x_t @ w + 0.5 * h)
    return h, h.clone()


def model(xs, w):
    h, ys = scan(lambda h, x_t: _step(h, x_t, w), torch.zeros_like(xs[0]), xs)  # SCAN_LINE
    out = torch.cond(h.sum() > 0, lambda h: h * 2.0, lambda h: h - 1.0, (h,))  # COND_LINE
    return out + ys.sum(0)


def loop_model(xs, w):
    h = torch.zeros_like(xs[0])
    ys = []
    for x_t in xs:
        h, y = _step(h, x_t, w)
        ys.append(y)
    out = h * 2.0 if h.sum() > 0 else h - 1.0
    return out + torch.stack(ys).sum(0)


def _line_of(marker: str) -> int:
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1) if line.endswith(marker))


SCAN_LINE, COND_LINE = _line_of("# SCAN_LINE"), _line_of("# COND_LINE")


def _inputs(requires_grad: bool):
    torch.manual_seed(0)
    xs = torch.randn(6, 3, 4)
    w = (torch.randn(4, 4) / 2).requires_grad_(requires_grad)
    return xs, w


class InjectedFault(RuntimeError):
    pass


def _raise(*args, **kwargs):
    raise InjectedFault("injected fault")


def _uncached(monkeypatch):
    """Native code compiled earlier in this process would be reused instead of compiled again."""
    monkeypatch.setattr(tidal.runtime.cache, "lookup", lambda key, func_name: None)


FAULTS = {
    # name: (what to patch, applies to inference, applies to training)
    "backend": (lambda mp: mp.setattr(tidal.dynamo, "_unsupported_inputs", _raise), True, True),
    "import": (lambda mp: mp.setattr(tidal.importer, "import_graph_module", _raise), True, True),
    "autodiff rule": (lambda mp: mp.setattr(tidal.autodiff.cond.CondVJP, "forward", staticmethod(_raise)), False, True),
    "lowering": (lambda mp: mp.setattr(tidal.compiler, "lower", _raise), True, True),
    "native compile": (
        lambda mp: (_uncached(mp), mp.setattr(tidal.runtime.NativeFunction, "from_llvm_module", classmethod(_raise))),
        True,
        True,
    ),
    "first call": (lambda mp: mp.setattr(tidal.compiler.GraphProgram, "__call__", _raise), True, True),
}


def _run(options, requires_grad: bool):
    xs, w = _inputs(requires_grad)
    compiled = torch.compile(model, backend="tidal", options=options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TidalFallbackWarning)
        with torch.set_grad_enabled(requires_grad):
            for _ in range(2):  # the second call must not warn again
                out = compiled(xs, w)
                grads = torch.autograd.grad(out.sum(), w) if requires_grad else None
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, TidalFallbackWarning)]
    return out, grads, fallbacks


def _reference(requires_grad: bool):
    xs, w = _inputs(requires_grad)
    with torch.set_grad_enabled(requires_grad):
        out = loop_model(xs, w)
        grads = torch.autograd.grad(out.sum(), w) if requires_grad else None
    return out, grads


# (stage, training) for every stage each mode goes through
CASES = [
    pytest.param((stage, training), id=f"{stage}-{'training' if training else 'inference'}")
    for stage, (_, in_inference, in_training) in FAULTS.items()
    for training in (False, True)
    if (in_training if training else in_inference)
]


@pytest.fixture
def injected(monkeypatch, request):
    stage, training = request.param
    FAULTS[stage][0](monkeypatch)
    return training


@pytest.mark.parametrize("injected", CASES, indirect=True)
def test_fault_falls_back_to_eager_with_one_warning(injected):
    training = injected
    out, grads, fallbacks = _run(WARN, training)
    expected, expected_grads = _reference(training)
    torch.testing.assert_close(out, expected)
    if training:
        torch.testing.assert_close(grads, expected_grads)
    assert len(fallbacks) >= 1, "the fault was not reached, or fell back silently"
    # training compiles a forward and a backward program: a fault in both is one warning each
    assert len(fallbacks) <= (2 if training else 1), fallbacks
    assert all("InjectedFault: injected fault" in f for f in fallbacks), fallbacks
    # the graph's first control-flow op: the scan in the forward, the cond's adjoint in the backward
    assert f"test_fallback_faults.py:{SCAN_LINE}:" in fallbacks[0], fallbacks
    assert all(f"test_fallback_faults.py:{SCAN_LINE}:" in f or f"test_fallback_faults.py:{COND_LINE}:" in f for f in fallbacks)


@pytest.mark.parametrize("injected", CASES, indirect=True)
def test_fault_in_strict_mode_names_the_users_line(injected):
    with pytest.raises(TidalCompileError, match=f"test_fallback_faults.py:{SCAN_LINE}: error: internal error in tidal") as info:
        _run(STRICT, injected)
    assert "InjectedFault: injected fault" in info.value.reason


def test_without_faults_tidal_compiles_both_modes():
    """The program the faults are injected into compiles whole, so each fault above is tidal's."""
    for training in (False, True):
        out, grads, fallbacks = _run(STRICT, training)
        expected, expected_grads = _reference(training)
        assert fallbacks == []
        torch.testing.assert_close(out, expected)
        if training:
            torch.testing.assert_close(grads, expected_grads)


def test_first_call_error_that_eager_shares_is_raised_and_the_program_kept(monkeypatch):
    """An error at the first call that eager raises too is the input's: it reaches the user as
    tidal raised it, without a fallback warning, and the next call runs compiled code."""
    calls = []
    original = tidal.compiler.GraphProgram.__call__

    def counting(self, args):
        calls.append(len(args))
        return original(self, args)

    monkeypatch.setattr(tidal.compiler.GraphProgram, "__call__", counting)

    def scatter(x, i):
        return torch.cond(x.sum() > 0, lambda x, i: x.scatter(0, i, x * 2.0), lambda x, i: x - 1.0, (x, i))

    compiled = torch.compile(scatter, backend="tidal", options=WARN)
    x = torch.randn(4, 3).abs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TidalFallbackWarning)
        with pytest.raises(RuntimeError, match="index 7 is out of bounds for dimension 0 with size 4"):
            compiled(x, torch.full((4, 3), 7))
        good = torch.tensor([[3, 2, 1], [2, 1, 0], [1, 0, 3], [0, 3, 2]])
        torch.testing.assert_close(compiled(x, good), scatter(x, good))
    assert not [w for w in caught if issubclass(w.category, TidalFallbackWarning)]
    assert len(calls) == 2  # both calls ran tidal's program
