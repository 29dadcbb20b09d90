"""The whole test corpus on CUDA (issue #42 item 4), in one pytest run: every program table of the
CPU suites, compiled strictly (options={"fallback": "error"}) on CUDA tensors. Values are compared
with eager CUDA; gradients with the same program written as Python loops (loop_reference.py) or,
for hop_db, with eager autograd in float64 on the CPU (eager's own scan autograd on CUDA is wrong
in torch 2.11). The tables are imported, not copied:

  corpus                test_gpu.py's corpus checks (float32, then bfloat16/float16)
  conformance           test_conformance.CASES (each at its several sizes: Dynamo makes them
                        dynamic), ASSOCIATIVE_SCANS at lengths 8 and 1000, PyTorch's hop_db
                        programs (float32) and their gradients (float32 on CUDA against float64
                        eager autograd on the CPU, which test_conformance checks by gradcheck)
  layers                test_layers.CASES alone / in scan / in while_loop, in float32, bfloat16
                        and float16, to test_layers.TOLERANCE
  autodiff              the corpus's gradients (test_autodiff._check_gradients: the reference is
                        the model with Python loops, on the CPU), the GRADCHECK table in float32
                        and float64 (against the Python loops in float64 on the CPU) and
                        LOOPS_OVER_SIZES (dynamic sizes)
  fuzz                  programs #0..N-1 of fuzz_campaign.draw (the fuzzer's hypothesis strategies,
                        one reproducible program an index; on CUDA without integer matmuls, which
                        eager CUDA lacks) through fuzz_programs.check (against eager CUDA) and
                        check_gradients (against the float64-checked Python loops); a program
                        torch itself rejects (eager; a forward one also Dynamo with its "eager"
                        backend, alike) is replaced by the index's next draw, listed at the end

A fallback to eager fails with a message that starts with its reason (conftest.py's hooks), and
the session ends with a count for the README's table of what still falls back on the GPU:

    GPU suites: N passed, M fell back (TidalCompileError), K wrong/crashed
    fell back:
      test_layers_on_cuda[sort-scan-f32]: test_layers.py:123:0: error: ...
    fallback reasons, without their lines, by count:
    wrong/crashed:
    fuzz programs torch itself rejected on the device, each replaced by the next draw: R

Run on the GPU machine after installing there (docs/gpu-backend.md), with pytest-xdist and
pytest-timeout (both installed there): the time is compiling (Dynamo, MLIR, Triton), which
parallelizes over the host's cores while the processes share the GPU, and a worker that crashes
or hangs is one failed test, not the end of the run and its summary. 612 tests; the same module
on the CPU (below) took about 24 minutes in one process here, the fuzzer's gradient programs the
longest (up to a minute each: float64 gradcheck). Not yet timed on a GPU; aimed at under 6
minutes with -n 8:

    PYTHONPATH=/tmp/site:test/python python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 300 test/python/test_gpu_suites.py

Parts are named so that -k selects or drops them; "slow" is in the ids of the reduced-precision
corpus and layers and of the fuzzer (-k "not slow": 248 tests), the others by test name:
corpus, conformance, associative_scan, hop_db, layers, autodiff, fuzz; dtypes as f32/bf16/f16
(-k "layers and bf16").

TIDAL_GPU_FUZZ_EXAMPLES (default 30 a mode) and TIDAL_GPU_FUZZ_SEED (default 0) choose the fuzzed
programs. Without CUDA every test is skipped. TIDAL_GPU_SUITES_DEVICE=cpu runs the same module on
the CPU (the corpus parts, which call test_gpu.py, are skipped): a check of this module's own
logic on a machine without a GPU, not a test of the GPU backend.

Reduced precision: where eager CUDA has no float16/bfloat16 kernel for a layer ("not implemented
for 'Half'"; none is known to lack one), the reference is the layer in float32 on the same rounded
inputs and weights, its results rounded to the dtype. The ordering layers (sort, topk,
max with indices, argmax) get inputs without ties in reduced precision (a tie's index is either
answer), and in scan the same slice at every step, so that the carry keeps them distinct.
"""

from __future__ import annotations

import copy
import os
import random
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

import test_autodiff as autodiff
import test_conformance as conformance
import test_layers as layers
from loop_reference import python_loops

DEVICE = os.environ.get("TIDAL_GPU_SUITES_DEVICE", "cuda")
ON_CUDA = torch.device(DEVICE).type == "cuda"
pytestmark = pytest.mark.skipif(ON_CUDA and not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU machine)")

STRICT = {"fallback": "error"}
CORPUS = Path(__file__).parents[1] / "corpus"
FUZZ_EXAMPLES = int(os.environ.get("TIDAL_GPU_FUZZ_EXAMPLES", 30))
FUZZ_SEED = int(os.environ.get("TIDAL_GPU_FUZZ_SEED", 0))
# test_gpu.py's tolerance for float32 against eager CUDA (another summation order)
F32 = {"rtol": 1e-4, "atol": 1e-4}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


@pytest.fixture(scope="module", autouse=True)
def _exact_eager_convolutions():
    """Eager CUDA convolutions may run in TF32 (cudnn.allow_tf32 is on by default): a reference
    10 bits short of float32. Matmuls are float32 by default already."""
    cudnn = torch.backends.cudnn  # flags(): hop_db's import froze plain assignments
    with cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic, allow_tf32=False):
        yield


@pytest.fixture(autouse=True)
def _seeded():
    """The same inputs whatever ran before (hop_db's samples and test_layers' inputs draw from the
    global generator), in one process or spread over xdist's."""
    torch.manual_seed(0)


def _making_tensors_on():
    """Factory calls without a device (torch.zeros(3) in a program) make their tensors on DEVICE."""
    return conformance._making_tensors_on(DEVICE)


def _compiled(fn, **kwargs):
    torch._dynamo.reset()
    return torch.compile(fn, backend="tidal", fullgraph=True, options=STRICT, **kwargs)


def _to(tree, device=None, dtype=None):
    """The tensors of `tree` on `device`, the floating ones in `dtype`, leaves again requiring
    grad as they did; a tensor met twice is moved once."""
    moved = {}

    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) not in moved:
            floating = t.is_floating_point()
            u = t.detach().to(device=device or t.device, dtype=dtype if floating and dtype else t.dtype)
            moved[id(t)] = u.requires_grad_() if t.requires_grad else u
        return moved[id(t)]

    return pytree.tree_map(move, tree)


def _cpu(tree):
    return pytree.tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, tree)


# -- corpus (test_gpu.py) ----------------------------------------------------------------------------


def _needs_cuda_for_the_corpus():
    if not ON_CUDA:
        pytest.skip("the corpus parts call test_gpu.py (CUDA only); on the CPU: test_corpus.py")


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.py")), ids=lambda p: p.stem)
def test_corpus_on_cuda(path):
    _needs_cuda_for_the_corpus()
    import test_gpu

    test_gpu.test_corpus_matches_eager_on_cuda(path)


def _reduced_corpus():
    from test_reduced_precision import DTYPE_GENERIC_CORPUS

    return [pytest.param(p, d, id=f"{p.stem}-{name}-slow") for p in DTYPE_GENERIC_CORPUS for name, d in DTYPES.items() if name != "f32"]


@pytest.mark.parametrize("path, dtype", _reduced_corpus())
def test_corpus_in_reduced_precision_on_cuda(path, dtype):
    _needs_cuda_for_the_corpus()
    import test_gpu

    test_gpu.test_corpus_in_reduced_precision_matches_eager_on_cuda(path, dtype)


# -- conformance -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(conformance.CASES))
def test_conformance_on_cuda(name):
    """Each program at its sizes (the second size compiles a dynamic program), against eager CUDA,
    Python scalars returned as Python scalars."""
    conformance.check_case(name, DEVICE)


@pytest.mark.parametrize("length", [8, 1000])
@pytest.mark.parametrize("name", list(conformance.ASSOCIATIVE_SCANS))
def test_associative_scan_on_cuda(name, length):
    fn, make_args = conformance.ASSOCIATIVE_SCANS[name]
    args = _to(make_args(length), DEVICE)
    compiled = _compiled(fn)
    with torch.no_grad(), _making_tensors_on():
        # eager combines in a tree: sums over 1000 steps round apart
        torch.testing.assert_close(compiled(*args), fn(*args), **F32)


def _hop_db(cases):
    """test_conformance's hop_db parameters. hop_db imports torch.testing._internal, which imports
    expecttest (a test-only package the GPU machine lacks): a stand-in serves, hop_db's programs
    and samples never use it."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import unittest

        sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False)
    return cases()


@pytest.mark.parametrize("info", _hop_db(conformance._hop_db_cases))
def test_hop_db_program_on_cuda(info):
    conformance.check_hop_db_program(info, torch.float32, DEVICE, **F32)


@pytest.mark.parametrize("info", _hop_db(conformance._grad_cases))
def test_hop_db_gradients_on_cuda(info):
    """float32 on CUDA against eager autograd in float64 on the CPU (test_conformance checks that
    reference against gradcheck of the compiled program), the same cotangents."""
    for sample in info.sample_inputs("cpu", torch.float64, requires_grad=True):
        args, kwargs = (sample.input, *sample.args), sample.kwargs

        def leaves(tree):
            return [t for t in pytree.tree_leaves(tree) if isinstance(t, torch.Tensor) and t.requires_grad]

        expected = conformance.hop_db_grads(info.op, args, kwargs, leaves((args, kwargs)))
        dev_args, dev_kwargs = _to((args, kwargs), DEVICE, torch.float32)
        compiled = _compiled(info.op)
        with _making_tensors_on():
            got = conformance.hop_db_grads(compiled, dev_args, dev_kwargs, leaves((dev_args, dev_kwargs)))
        torch.testing.assert_close(_cpu(got), _to(expected, dtype=torch.float32), **F32)


# -- layers ------------------------------------------------------------------------------------------

ORDERING = {"max_with_indices", "argmax", "topk", "sort"}


def _distinct(shape, dtype):
    """Values k/32..., all different and exact in float16 and bfloat16 (at most 256 of them);
    the same at every call."""
    n = torch.Size(shape).numel()
    assert n <= 256, shape
    values = torch.randperm(n, generator=torch.Generator().manual_seed(0), device="cpu") - n // 2
    return (values.to(torch.float32) * (2.0 / n)).reshape(shape).to(dtype)


def _layer_params():
    return [
        pytest.param(name, mode, dtype_name, id=f"{name}-{mode}-{dtype_name}" + ("-slow" if dtype_name != "f32" else ""))
        for dtype_name in DTYPES
        for name in layers.CASES
        for mode in layers.MODES
    ]


@pytest.mark.parametrize("name, mode, dtype_name", _layer_params())
def test_layers_on_cuda(name, mode, dtype_name):
    dtype = DTYPES[dtype_name]
    shape, f = layers.CASES[name]
    f = layers.layer_on(f, DEVICE, dtype)
    make = _distinct if name in ORDERING and dtype != torch.float32 else layers._inputs
    with layers.index_buffers_on(DEVICE), _making_tensors_on(), torch.no_grad():
        program, args = layers.layer_program(f, mode, shape, dtype, DEVICE, make_input=make)
        expected = _eager_layer(f, mode, program, args)
        got = _compiled(program)(*args)
    torch.testing.assert_close(got, expected, **layers.TOLERANCE[dtype])


def _eager_layer(f, mode, program, args):
    """Eager's results; where eager has no kernel for a reduced dtype, the layer in float32 on the
    same rounded values, rounded to the dtype (the loop around it stays in the dtype)."""
    try:
        return program(*args)
    except (RuntimeError, NotImplementedError) as exc:
        if "not implemented for" not in str(exc):
            raise
    m = getattr(f, "module", None)
    f32 = f if m is None else layers.module(copy.deepcopy(m).float())

    def rounded(x):
        return tuple(o.to(x.dtype) if o.is_floating_point() else o for o in f32(x.float()))

    if mode == "alone":
        return rounded(*args)
    if mode == "scan":
        return layers._in_scan(rounded)(*args)
    return layers._in_while(rounded, args[0])(*args)


# -- autodiff ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [p for p in sorted(CORPUS.glob("*.py")) if p.stem not in autodiff.NOTHING_TO_DIFFERENTIATE], ids=lambda p: p.stem
)
def test_autodiff_corpus_on_cuda(path):
    """A training step of each corpus program on CUDA against the model with Python loops on the CPU."""
    from tidal.tools.tidal_compile import load_program_file

    model, inputs = load_program_file(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        autodiff._check_gradients(model, inputs, device=DEVICE)


# float32 on CUDA against a float64 reference: rounding, amplified by up to 50 steps
GRAD_TOLERANCE = {torch.float32: {"rtol": 1e-4, "atol": 1e-4}, torch.float64: {"rtol": 1e-7, "atol": 1e-9}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(autodiff.GRADCHECK))
def test_autodiff_table_on_cuda(name, dtype):
    """One program per reverse-mode rule: outputs and gradients against the program with Python
    loops, in float64 on the CPU, the same cotangents."""
    fn, make = autodiff.GRADCHECK[name]
    args = make()
    leaves = [t for t in args if t.requires_grad]
    with python_loops(fn):
        expected_out, expected = autodiff._grads(fn, args, leaves, cotangent_dtype=torch.float32)
    dev_args = _to(args, DEVICE, dtype)
    compiled = _compiled(fn)
    with _making_tensors_on():
        out, got = autodiff._grads(compiled, dev_args, [t for t in dev_args if t.requires_grad], cotangent_dtype=torch.float32)
    tolerance = GRAD_TOLERANCE[dtype]
    torch.testing.assert_close(_cpu(out), _to(expected_out, dtype=dtype), **tolerance)
    torch.testing.assert_close(_cpu(got), _to(expected, dtype=dtype), **tolerance)


@pytest.mark.parametrize("fn", autodiff.LOOPS_OVER_SIZES, ids=lambda f: f.__name__)
def test_autodiff_over_sizes_on_cuda(fn):
    """while_loops bounded by sizes, one program for every size (dynamic=True), trained on CUDA."""
    autodiff.check_while_loop_over_sizes(fn, device=DEVICE)


# -- fuzz --------------------------------------------------------------------------------------------


# A program eager itself rejects on DEVICE is no test of tidal: program `index` is then replaced by
# fuzz_campaign.draw(..., redraw=1, 2, ...), deterministically, at most this many times.
FUZZ_REDRAWS = 10


def _fuzz(mode: str, index: int, request):
    """Program `index` of the fuzz campaign (mode, FUZZ_SEED) checked on DEVICE. Drawn for DEVICE:
    on CUDA without integer matmuls (eager CUDA has none). Where eager PyTorch itself rejects the
    program on DEVICE (fuzz_programs.GeneratorBug: torch 2.11's eager HOP checks reject some that
    torch 2.13 runs) or fails on it with a known torch bug (UnsatisfiedAssumption), the next
    replacement is drawn instead; each one is printed and recorded in the test's user_properties
    ("fuzz_redrawn"; conftest.py lists them in the GPU suites summary). So does a forward program
    Dynamo fails to capture for tidal as it fails for torch.compile(backend="eager")
    (`_dynamo_fails_alike`). Nothing else redraws: whatever tidal does wrong on a program eager
    runs fails the test."""
    pytest.importorskip("hypothesis")
    import fuzz_campaign
    import fuzz_programs
    from hypothesis.errors import UnsatisfiedAssumption
    from hypothesis.internal.conjecture.data import ConjectureData

    check = fuzz_programs.check_gradients if mode == "grad" else fuzz_programs.check
    redrawn = []  # recorded as it grows: a failure after a redraw lists it too
    request.node.user_properties.append(("fuzz_redrawn", redrawn))
    for redraw in range(FUZZ_REDRAWS + 1):
        desc = fuzz_campaign.draw(mode, FUZZ_SEED, index, integer_matmul=not ON_CUDA, redraw=redraw)
        try:
            with fuzz_campaign._context(ConjectureData(random=random.Random(0))):
                check(desc, DEVICE)
        except UnsatisfiedAssumption:
            why = "eager PyTorch fails on it (a known torch bug)"
        except fuzz_programs.GeneratorBug as exc:
            why = _first_line_of(str(exc))
        except torch._dynamo.exc.TorchDynamoException as exc:
            why = _dynamo_fails_alike(mode, desc, exc)
            if why is None:
                raise
        else:
            break
        label = f"{mode} {FUZZ_SEED}:{index}" + (f"/{redraw}" if redraw else "")
        redrawn.append(f"{label}: {why}")
        print(f"fuzz program {label} redrawn: {why}")
    else:
        pytest.fail(f"no program eager runs on {DEVICE} in {FUZZ_REDRAWS + 1} draws:\n" + "\n".join(redrawn))


def _dynamo_fails_alike(mode: str, desc, exc: BaseException) -> str | None:
    """Why a forward program that eager runs but Dynamo failed to capture for tidal is no test of
    tidal: torch.compile(backend="eager") fails on it on DEVICE with the same error (torch 2.11's
    Dynamo: "Expected body_fn_output and carried_inputs to have same metadata", unbacked sizes
    of a while_loop in a scan). None where eager's backend compiles it, and in gradient mode,
    where Dynamo runs tidal's autodiff rules for the tidal backend (not for eager's): then the
    failure is tidal's."""
    import fuzz_programs

    if mode != "forward" or isinstance(exc, torch._dynamo.exc.BackendCompilerFailed):
        return None
    fn, _ = fuzz_programs.build(desc)
    inputs = fuzz_programs.make_inputs(desc, DEVICE)
    torch._dynamo.reset()
    try:
        with torch.no_grad(), warnings.catch_warnings(), fuzz_programs._making_tensors_on(DEVICE):
            warnings.simplefilter("ignore")
            torch.compile(fn, backend="eager")(*inputs)
    except Exception as eager_exc:  # noqa: BLE001 - compared with tidal's below
        same = type(eager_exc) is type(exc) and _first_line_of(str(eager_exc)) == _first_line_of(str(exc))
        if same:
            return f'torch.compile(backend="eager") fails on it alike: {type(exc).__name__}: {_first_line_of(str(exc))}'
    return None


def _first_line_of(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@pytest.mark.parametrize("index", range(FUZZ_EXAMPLES), ids=lambda i: f"{FUZZ_SEED}:{i}-slow")
def test_fuzz_forward_on_cuda(index, request):
    _fuzz("forward", index, request)


@pytest.mark.parametrize("index", range(FUZZ_EXAMPLES), ids=lambda i: f"{FUZZ_SEED}:{i}-slow")
def test_fuzz_gradients_on_cuda(index, request):
    _fuzz("grad", index, request)
