"""Minimal reproductions of bugs found by fuzzing and hostile-input testing.

Each test asserts the CORRECT behaviour. While a bug stands its test is marked
`xfail(strict=True)`: when a fix lands the test XPASSes, strict mode turns that into a failure, and
the marker comes off (fixed bugs keep their test, with a "Fixed in ... Was: ..." docstring). Crash-type bugs (signals) run in a fork server child (tool_runner.py) so they cannot take
pytest down.
"""

from __future__ import annotations

import re
import textwrap
import warnings

import pytest
import torch
from torch._higher_order_ops import associative_scan, scan, while_loop

from tidal.dynamo import TidalFallbackWarning
from tool_runner import nested_conds

LOCATED = re.compile(r"^(.+?):(\d+):(\d+): error: \S", re.M)


def compiled_with_fallbacks(model, *inputs, fallback="error"):
    """Strict unless the test is about a fallback (fallback="warn")."""
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TidalFallbackWarning)
        got = torch.compile(model, backend="tidal", options={"fallback": fallback})(*inputs)
    return got, [str(w.message) for w in caught if issubclass(w.category, TidalFallbackWarning)]


def assert_clean_tool_failure(proc, path=None):
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}\n{proc.stderr[-2000:]}"
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    m = LOCATED.search(proc.stderr)
    assert m, f"no FILE:LINE:COL: error: line:\n{proc.stderr[-2000:]}"
    if path is not None:
        assert m.group(1) == str(path), proc.stderr[-2000:]


# -- compiler: programs tidal should compile --------------------------------------------------


def assoc_in_cond(p, x):
    def then(x):
        return associative_scan(lambda a, b: a + b, x, dim=0, combine_mode="generic")

    return torch.cond(p.sum() > 0, then, lambda x: x.clone(), (x,))


def test_regression_associative_scan_nested_in_cond():
    """Fixed by the Dynamo polyfill of associative_scan (export traces cond branches with Dynamo).
    Was: keep_associative_scan's hook, traced by Dynamo inside the outer HOP, raised vmap's
    'tensor escaped' error, so compile_program failed."""
    from tidal.compiler import compile_program

    args = (torch.ones(()), torch.arange(4.0))
    program = compile_program(assoc_in_cond, args)
    torch.testing.assert_close(program(*args), assoc_in_cond(*args))


def test_regression_associative_scan_nested_in_cond_falls_back():
    """Fixed by compiling aot_autograd's graph of Dynamo's graph (no re-export). Was: associative_scan
    inside a cond branch fell back to eager under torch.compile(backend='tidal')."""
    args = (torch.ones(()), torch.arange(4.0))
    got, fallbacks = compiled_with_fallbacks(assoc_in_cond, *args)
    torch.testing.assert_close(got, assoc_in_cond(*args))
    assert fallbacks == []


def test_regression_cond_second_input_shape_falls_back():
    """Fixed likewise (scalars at boundaries become 0-d tensors). Was: a second input shape made a
    size symbolic; tidal baked it into a Python int and torch.export's placeholder naming failed
    (AttributeError: 'int' object has no attribute 'name')."""
    def model(x):
        return torch.cond(x.sum() > 0, lambda x: torch.tanh(x) * 2, lambda x: x - 1, (x,))

    compiled = torch.compile(model, backend="tidal")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TidalFallbackWarning)
        for n in (2, 3, 4):
            x = torch.randn(n, 3)
            torch.testing.assert_close(compiled(x), model(x))
    assert [w for w in caught if issubclass(w.category, TidalFallbackWarning)] == []


def test_regression_while_loop_second_input_shape_falls_back():
    """Fixed likewise. Was: SpecViolationError: Node.meta arg2_1 is missing val field (re-export)."""
    def model(x):
        return while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 2), (torch.zeros((), dtype=torch.int64), x))

    compiled = torch.compile(model, backend="tidal")
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TidalFallbackWarning)
        for n in (2, 3, 4):
            x = torch.randn(n, 3)
            torch.testing.assert_close(compiled(x), model(x))
    assert [w for w in caught if issubclass(w.category, TidalFallbackWarning)] == []


def test_regression_scan_body_closing_over_python_int_falls_back():
    """Fixed likewise. Was: SpecViolationError: Node.meta arg2_1 is missing val field (re-export)."""
    def model(xs, n):
        return scan(lambda c, x: (c + x * n, c.clone()), torch.zeros(3), xs)

    compiled = torch.compile(model, backend="tidal")
    xs = torch.randn(4, 3)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TidalFallbackWarning)
        for n in (1, 2, 3):
            torch.testing.assert_close(compiled(xs, n), model(xs, n))
    assert [w for w in caught if issubclass(w.category, TidalFallbackWarning)] == []


def mutate_input(x):
    x.add_(1)
    return x * 2


def test_regression_input_mutation_torch_compile():
    """Fixed in 6c7d4c7. Was: a program that mutates its input: the exported graph returns the
    mutated input as an extra output and tidal unflattens it with the user's out_spec ->
    ValueError('treespec.unflatten(leaves): `leaves` has length 2 ...') at call time, with no
    fallback; the mutation is not written back either"""
    x_eager, x_tidal = torch.zeros(3), torch.zeros(3)
    expected = mutate_input(x_eager)
    got, fallbacks = compiled_with_fallbacks(mutate_input, x_tidal)  # strict: compiled since aot_autograd
    assert fallbacks == []
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x_tidal, x_eager)  # the input was updated in place, as in eager


def test_regression_input_mutation_compile_program():
    """Fixed in 6c7d4c7. Was: compile_program on a program that mutates its input: ValueError from
    tree_unflatten at call time (should be compiled with the mutation applied, or rejected with
    a TidalUnsupported at compile time)"""
    from tidal.compiler import compile_program
    from tidal.diagnostics import TidalError

    try:
        program = compile_program(mutate_input, (torch.zeros(3),))
    except TidalError:
        return  # a clear rejection is acceptable
    x = torch.zeros(3)
    torch.testing.assert_close(program(x), torch.full((3,), 2.0))
    torch.testing.assert_close(x, torch.ones(3))


# -- compiler: wrong results --------------------------------------------------------------------

NAN = torch.tensor([1.0, float("nan"), 3.0, -5.0])


@pytest.mark.parametrize("fn", [
    lambda x: x.clamp(-1, 1),
    lambda x: x.clamp(min=0),
    lambda x: torch.maximum(x, torch.zeros_like(x)),
    lambda x: torch.minimum(x, torch.zeros_like(x)),
    lambda x: torch.nn.functional.hardtanh(x),
    lambda x: torch.nn.functional.relu6(x),
], ids=["clamp", "clamp-min", "maximum", "minimum", "hardtanh", "relu6"])
def test_regression_nan_propagation(fn):
    """Fixed in 6c7d4c7. Was: NaN is not propagated: torch-mlir lowers these to cmpf (ult/ugt/ogt)
    + select, so a NaN input gives the bound/other operand (eager gives NaN): wrong results"""
    from tidal.compiler import compile_program

    program = compile_program(fn, (NAN,))
    torch.testing.assert_close(program(NAN), fn(NAN), equal_nan=True)


def test_regression_nan_in_associative_scan_maximum():
    """Fixed in 6c7d4c7. Was: associative_scan with a torch.maximum combine drops NaN (wrong result
    under torch.compile(backend='tidal'), no fallback)"""
    def model(x):
        return associative_scan(lambda a, b: torch.maximum(a, b), x, 0, combine_mode="generic")

    got, _ = compiled_with_fallbacks(model, NAN)
    torch.testing.assert_close(got, model(NAN), equal_nan=True)


# -- compiler: process crashes (run in a fork-server child) ------------------------------------

_TORCH_COMPILE_VS_EAGER = """
import warnings, torch
warnings.simplefilter("ignore")
{setup}
with torch.no_grad():
    try:
        expected = model(*inputs)
    except Exception as e:
        expected = e
    try:
        # fallback="warn": programs tidal refuses on purpose; eager must give the result or raise
        got = torch.compile(model, backend="tidal", options={{"fallback": "{fallback}"}})(*inputs)
    except Exception as e:
        got = e
if isinstance(expected, Exception):
    assert type(got) is type(expected) and str(expected) in str(got), (got, expected)
else:
    torch.testing.assert_close(got, expected)
print("OK")
"""


def run_model_in_child(fork_server, setup: str, fallback: str = "warn"):
    fork_server.exec_ok(_TORCH_COMPILE_VS_EAGER.format(setup=textwrap.dedent(setup), fallback=fallback))


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_regression_int8_mul_scalar_segfaults(fork_server, dtype):
    """Fixed in 6c7d4c7. Was: int8/uint8 `x * 2` segfaults the process: torch-mlir's convert-torch-
    to-linalg crashes on aten.mul.Scalar of ui8/si8 ('for conversion to byte or char type
    dstOriginalDtype has to be passed to convertScalarToDtype'), so torch.compile cannot even
    fall back"""
    run_model_in_child(fork_server, f"""
        model = lambda x: x * 2
        inputs = (torch.arange(5, dtype=torch.{dtype}),)
    """)


@pytest.mark.parametrize("op", ["torch.div(x, y, rounding_mode='trunc')", "torch.remainder(x, y)",
                                "torch.fmod(x, y)"], ids=["trunc-div", "remainder", "fmod"])
def test_regression_integer_division_by_zero_sigfpe(fork_server, op):
    """Fixed in 6c7d4c7 (refused), compiled since tidal-integer-division. Was: integer division by
    zero kills the process with SIGFPE (trunc division, remainder, fmod); eager raises
    RuntimeError('ZeroDivisionError'), and so does the compiled program (strict: no fallback)"""
    run_model_in_child(fork_server, f"""
        model = lambda x, y: {op}
        inputs = (torch.tensor([4, 5, 6]), torch.tensor([2, 0, 3]))
    """, fallback="error")


def test_regression_integer_floor_division_by_zero_wrong_result(fork_server):
    """Fixed in 6c7d4c7 (refused), compiled since tidal-integer-division. Was: integer floor
    division by zero returns garbage (-9223372036854775808) where eager raises
    RuntimeError('ZeroDivisionError')"""
    run_model_in_child(fork_server, """
        model = lambda x, y: torch.div(x, y, rounding_mode='floor')
        inputs = (torch.tensor([4, 5, 6]), torch.tensor([2, 0, 3]))
    """, fallback="error")


def test_regression_reciprocal_of_zero_aborts(fork_server):
    """Fixed with tidal-reciprocal-of-zero. Was: torch.reciprocal of a tensor holding a zero
    aborted the process ('unimplemented: tensor with zero element': torch-mlir's lowering asserts
    a nonzero input, and a failed cf.assert calls abort()); eager returns inf"""
    fork_server.exec_ok(textwrap.dedent("""
        import torch
        from tidal.compiler import compile_program
        x = torch.tensor([0.0, 2.0, -0.0, float("nan")])
        fn = lambda x: torch.reciprocal(x) + 1
        torch.testing.assert_close(compile_program(fn, (x,))(x), fn(x), equal_nan=True)
        print("OK")
    """))


# -- tidal-opt ----------------------------------------------------------------------------------


def write(tmp_path, name, data):
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


def test_regression_tidal_opt_invalid_utf8_op_name(fork_server, tmp_path):
    """Fixed in 6c7d4c7. Was: an op name with invalid UTF-8 aborts tidal-opt (SIGABRT: nanobind
    str_from_cstr_and_size conversion error, uncaught C++ exception, from `op.name` in
    tidal/dialects/verifier.py verify_module)"""
    path = write(tmp_path, "utf8.mlir", b'func.func @f() {\n  "test.m\xe9p"() : () -> ()\n  return\n}\n')
    proc = fork_server.run("tidal-opt", str(path))
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr[-500:]}"
    assert proc.returncode in (0, 1)
    if proc.returncode == 1:
        assert_clean_tool_failure(proc, path)


def test_regression_tidal_opt_3000_deep_regions(fork_server, tmp_path):
    """Fixed in 6c7d4c7. Was: tidal-opt segfaults (stack overflow in MLIR's recursive parser) on
    more than ~2100 nested regions (1000 is fine): it should refuse with a located error"""
    path = write(tmp_path, "deep.mlir", nested_conds(3000))
    proc = fork_server.run("tidal-opt", str(path))
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"
    if proc.returncode == 1:
        assert_clean_tool_failure(proc, path)


def test_regression_tidal_opt_deeply_nested_attribute(fork_server, tmp_path):
    """Fixed in 6c7d4c7. Was: tidal-opt segfaults on an attribute of 10,000 nested arrays (stack
    overflow in MLIR's attribute parser; 5,000 is fine)"""
    path = write(tmp_path, "arr.mlir", "func.func @f() attributes {x = " + "[" * 10000 + "]" * 10000 + "} {\n"
                 "  return\n}\n")
    proc = fork_server.run("tidal-opt", str(path))
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}"


ONE_REGION_TIDAL = """func.func @f(%xs: tensor<5x2xf32>) -> tensor<5x2xf32> {
  %r = "tidal.map"(%xs) ({
  ^bb0(%x: tensor<2xf32>):
    "tidal.yield"(%x) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>) -> tensor<5x2xf32>
  return %r : tensor<5x2xf32>
}
"""

TWO_REGION_TIDAL = """func.func @c(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    %n = arith.negf %a : tensor<4xf32>
    "tidal.yield"(%n) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
"""


# Found by running every registered MLIR pass over modules holding tidal ops: these segfault.
# tidal-opt refuses `inline` and `remove-dead-values` while tidal ops remain; these slip through.
@pytest.mark.parametrize("pipeline", [
    "normalize-memrefs",
    "scalarize-single-element-tensor-return",
    "torch-shape-refinement-pipeline",
    "torchdynamo-export-to-torch-backend-pipeline",
])
def test_regression_tidal_opt_pass_crashes_on_one_region_tidal_op(fork_server, tmp_path, pipeline):
    """Fixed in 6c7d4c7. Was: these MLIR passes segfault on a module holding a one-region tidal op
    (tidal.map/scan/associative_scan: MLIR treats one-region unregistered ops as potential
    symbol tables); tidal-opt's guard only refuses inline and remove-dead-values"""
    path = write(tmp_path, "map.mlir", ONE_REGION_TIDAL)
    proc = fork_server.run("tidal-opt", str(path), f"--pass-pipeline=builtin.module({pipeline})")
    assert proc.returncode >= 0, f"{pipeline}: killed by signal {-proc.returncode}"


@pytest.mark.parametrize("pipeline", ["math-extend-to-supported-types", "xegpu-vector-linearize"])
def test_regression_tidal_opt_pass_crashes_on_any_unregistered_op(fork_server, tmp_path, pipeline):
    """Fixed in 6c7d4c7. Was: these MLIR passes segfault on ANY unregistered op (tidal.cond with
    two regions, even a region-less 'test.foo'), and tidal-opt does not refuse them"""
    path = write(tmp_path, "cond.mlir", TWO_REGION_TIDAL)
    proc = fork_server.run("tidal-opt", str(path), f"--pass-pipeline=builtin.module({pipeline})")
    assert proc.returncode >= 0, f"{pipeline}: killed by signal {-proc.returncode}"


@pytest.mark.parametrize("pipeline", ["inline", "remove-dead-values"])
def test_regression_tidal_opt_inline_guard_misses_other_unregistered_ops(fork_server, tmp_path, pipeline):
    """Fixed in 6c7d4c7. Was: the inline/remove-dead-values guard only looks for tidal.* ops: a
    one-region op of another unregistered dialect (tidal-opt accepts them, e.g. test.*) still
    segfaults the inliner"""
    path = write(tmp_path, "foo.mlir", """func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = "test.foo"(%x) ({
  ^bb0(%a: tensor<3xf32>):
    "test.yield"(%a) : (tensor<3xf32>) -> ()
  }) : (tensor<3xf32>) -> tensor<3xf32>
  return %y : tensor<3xf32>
}
""")
    proc = fork_server.run("tidal-opt", str(path), f"--pass-pipeline=builtin.module({pipeline})")
    assert proc.returncode >= 0, f"{pipeline}: killed by signal {-proc.returncode}"


def test_regression_tidal_opt_unlocated_pass_scheduling_error(fork_server, tmp_path):
    """Fixed in 6c7d4c7. Was: tidal-opt prints some MLIR errors without a location: a function-
    level pass at module level gives "error: unable to schedule pass 'AffineLoopUnroll' on a
    PassManager intended to run on 'builtin.module'!" (also 'Invalid chipset name', 'Failure
    while executing pass pipeline')"""
    path = write(tmp_path, "c.mlir", TWO_REGION_TIDAL)
    proc = fork_server.run("tidal-opt", str(path), "--pass-pipeline=builtin.module(affine-loop-unroll)")
    assert_clean_tool_failure(proc)


# -- tidal-compile ------------------------------------------------------------------------------


def test_regression_tidal_compile_program_calls_sys_exit(fork_server, tmp_path):
    """Fixed in 6c7d4c7. Was: a program file that calls sys.exit(0) while being imported makes
    tidal-compile exit 0 with no output and no error (SystemExit is re-raised by main)"""
    path = write(tmp_path, "exits.py", "import sys\n\nsys.exit(0)\n")
    proc = fork_server.run("tidal-compile", str(path))
    assert_clean_tool_failure(proc, path)


@pytest.mark.parametrize("name,text", [
    ("missing-model.py", "import torch\n\nexample_inputs = (torch.randn(3),)\n"),
    ("returns-none.py", "import torch\n\n\ndef model(x):\n    x.sin()\n\n\nexample_inputs = (torch.randn(3),)\n"),
])
def test_regression_tidal_compile_unlocated_errors(fork_server, tmp_path, name, text):
    """Fixed in 6c7d4c7. Was: tidal-compile errors without FILE:LINE:COL: 'error: F must define
    `model`', 'error: no such file: F', and for a model returning None "error:
    'torch.constant.none' op remains after lowering to linalg" (unclear, names no file)"""
    path = write(tmp_path, name, text)
    proc = fork_server.run("tidal-compile", str(path))
    assert_clean_tool_failure(proc, path)


def test_regression_tidal_compile_keyboard_interrupt_traceback(fork_server, tmp_path):
    """Was: tidal-compile re-raised KeyboardInterrupt (Ctrl-C or a model raising it) as a traceback."""
    path = write(tmp_path, "ctrl-c.py", "import torch\n\n\ndef model(x):\n    raise KeyboardInterrupt\n\n\n"
                 "example_inputs = (torch.randn(3),)\n")
    proc = fork_server.run("tidal-compile", str(path))
    assert proc.returncode in (1, 130), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]


def accumulate_into(b, x, w):
    return b + x @ w


def test_regression_matmul_accumulating_into_an_input():
    """Fixed in this commit. Was: `b + x @ w` became a BLAS call accumulating into b's buffer (beta
    = 1) and One-Shot took the function's argument as writable: the result was right and the
    caller's `b` was overwritten with it."""
    b, x, w = torch.randn(4, 5), torch.randn(4, 3), torch.randn(3, 5)
    before = b.clone()
    got = torch.compile(accumulate_into, backend="tidal", options={"fallback": "error"})(b, x, w)
    torch.testing.assert_close(b, before, rtol=0, atol=0)
    torch.testing.assert_close(got, before + x @ w)


def subtract_the_max(v):
    return (v - v.amax(dim=0, keepdim=True)).clamp(-10.0, 10.0)


def test_regression_view_to_a_zero_d_buffer_in_thread_groups():
    """Found by the fuzz test, fixed in this commit. Was: tidal-parallelize-generics followed the
    views between a group's generics and read the first reassociation group of a reshape to or
    from a 0-d buffer, which has none (IndexError: ArrayAttribute index out of range)."""
    from tidal.compiler import compile_program

    v = torch.randn(2)
    torch.testing.assert_close(compile_program(subtract_the_max, (v,))(v), subtract_the_max(v))


def saturated_tanh_at_a_cond_threshold(v):
    def while_cond(i, v):
        return i < 3

    def while_body(i, v):
        v = torch.exp(v.clamp(-4.0, 2.0))
        return i + 1, (v + v).clamp(-10.0, 10.0)

    _, v = while_loop(while_cond, while_body, (torch.zeros((), dtype=torch.int64), v))
    v = -torch.tanh(v)  # -tanh(10.0): -1.0 exactly in eager
    return torch.cond(v.sum() > -1.0, lambda v: (v + 1).clamp(-10.0, 10.0), lambda v: -v, (v,))


def test_regression_fast_tanh_saturates_to_exactly_one():
    """Found by the forward fuzz campaign (seed 4040, program 1412: -5.139 where eager gave 0.511),
    fixed in this commit. Was: tidal-fast-math's tanh (Eigen's clamped rational approximation)
    gave 0.99999976 (4 ulp below 1) for every |x| >= 7.9, where eager's tanhf is 1.0 from
    |x| = 9.0108 on; here tanh(10.0) = 1 - 4 ulp made `-1.0 + 4 ulp > -1.0` true, the cond took
    the other branch and returned 2.4e-7 instead of 1.0. Both entry points (torch.export and
    torch.compile) gave the wrong value."""
    from tidal.compiler import compile_program

    v = torch.tensor(0.3)
    expected = saturated_tanh_at_a_cond_threshold(v)
    assert expected.item() == 1.0
    torch.testing.assert_close(compile_program(saturated_tanh_at_a_cond_threshold, (v,))(v), expected,
                               rtol=0, atol=0)
    got, fallbacks = compiled_with_fallbacks(saturated_tanh_at_a_cond_threshold, v)
    assert fallbacks == []
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


# -- constant_pad_nd with negative amounts (F.pad removing elements; every pad's gradient) ----

NEGATIVE_PADS = [
    [1, -1],  # was a wrong answer: the input itself
    [-1, 1],
    [0, -1],
    [-1, 0],
    [0, 0, 0, -1],
    [0, 0, 1, -1],
    [2, -3, -1, 1],
    [-1, -1, -1, -1],
    [0, -4],  # the last dim down to 0
    [-2, -2],
    [-4, 1],  # all of it removed, one added
    [0, 0, 0, -3],  # the first dim down to 0
]


@pytest.mark.parametrize("pads", NEGATIVE_PADS, ids=str)
def test_regression_negative_pad(pads):
    """Fixed in this commit (`tidal-negative-pads`). Was: torch-mlir's constant_pad_nd lowering
    handed negative amounts to tensor.pad, which takes only non-negative ones: [1, -1] gave a pad
    of a static 3x3 to 3x3 that tensor.pad's folder replaced by its input (a silent wrong answer,
    strict mode too); [0, -1] and [-1, 0] failed memref.subview's verifier."""
    from tidal.compiler import compile_program

    def pad(x):
        return torch.nn.functional.pad(x, pads, value=1.5) * 2

    x = torch.randn(3, 4)
    expected = pad(x)
    got, fallbacks = compiled_with_fallbacks(pad, x)
    assert fallbacks == []
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(compile_program(pad, (x,))(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pads", [[1, -1], [-2, -1], [-1, 2, 1, -1]], ids=str)
def test_regression_negative_pad_other_modes(mode, pads):
    """Eager takes negative amounts in the other modes too; tidal matches it."""
    def pad(x):
        return torch.nn.functional.pad(x, pads, mode=mode)

    x = torch.randn((1, 2, 4, 5)[: 2 + len(pads) // 2])  # as many padded dims as eager allows
    got, fallbacks = compiled_with_fallbacks(pad, x)
    assert fallbacks == []
    torch.testing.assert_close(got, pad(x), rtol=0, atol=0)


def shifted_in_a_scan(c0, xs):
    def step(c, x):
        y = torch.nn.functional.pad(x, [1, -1]) + torch.nn.functional.pad(c, [-1, 1], value=2.0)
        return y, torch.nn.functional.pad(y, [-1, -2])

    return scan(step, c0, xs)


def test_regression_negative_pad_in_a_scan_body():
    """Negative pads in a loop body (a region op's body): fixed in this commit, as above."""
    from tidal.compiler import compile_program

    c0, xs = torch.randn(4), torch.randn(5, 4)
    expected = shifted_in_a_scan(c0, xs)
    got, fallbacks = compiled_with_fallbacks(shifted_in_a_scan, c0, xs)
    assert fallbacks == []
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(compile_program(shifted_in_a_scan, (c0, xs))(c0, xs), expected, rtol=0, atol=0)


def pad_to_square(x):
    return torch.nn.functional.pad(x, [1, x.shape[0] - x.shape[1]])  # symbolic: of either sign


def test_regression_symbolic_negative_pad():
    """A symbolic amount negative at run time: fixed in this commit (split into max(-p, 0) removed
    and max(p, 0) added at run time). Was: a wrong answer for every shape here."""
    compiled = torch.compile(pad_to_square, backend="tidal", dynamic=True, options={"fallback": "error"})
    for shape in [(2, 3), (3, 4), (4, 8), (5, 5), (6, 3)]:
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x), pad_to_square(x), rtol=0, atol=0)


def padded_energy(x):
    return (torch.nn.functional.pad(x, [1, 2, 0, 1], value=0.5).sin() * torch.arange(28.0, dtype=x.dtype).reshape(4, 7)).sum()


def test_regression_pad_gradient():
    """The gradient of a pad is a negative pad: training any graph with a positive pad failed
    strictly (memref.subview out of bounds). Fixed in this commit."""
    x = torch.randn(3, 4, requires_grad=True)
    compiled = torch.compile(padded_energy, backend="tidal", options={"fallback": "error"})
    (got,) = torch.autograd.grad(compiled(x), x)
    (expected,) = torch.autograd.grad(padded_energy(x), x)
    torch.testing.assert_close(got, expected)

    def shifted(x):
        return torch.nn.functional.pad(x, [1, -1, -1, 2]).sin() * 3

    for fn, shape in [(shifted, (2, 3)), (padded_energy, (3, 4))]:
        x64 = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(torch.compile(fn, backend="tidal", options={"fallback": "error"}), (x64,))


def _branches_of_unequal_shapes(x):
    from torch._higher_order_ops import cond

    return cond(x.sum() > 0, lambda x: x.repeat(2, 1).sin(), lambda x: x[:1] * 2, (x,))


@pytest.mark.parametrize("sign", [1, -1], ids=["then", "else"])
def test_regression_cond_branches_of_unequal_shapes(sign):
    """torch.cond takes branches whose outputs differ in size (the result's size is then unbacked,
    [?, 4]); torch 2.11's scan stacking on dim 0 makes such programs out of ordinary ones. Was:
    "'tidal.cond' op then region yield #0 has type [6,4] but expected [?,4]" (found by
    test_gpu_suites on the H200)."""
    x = torch.randn(3, 4).abs() * sign
    got, _ = compiled_with_fallbacks(_branches_of_unequal_shapes, x)
    torch.testing.assert_close(got, _branches_of_unequal_shapes(x))


@pytest.mark.parametrize("fallback", ["error", "warn"])
def test_regression_cond_branches_of_unequal_shapes_gradient_is_refused_clearly(fallback):
    """Not differentiated (eager PyTorch fails on it too: "shape '[6, 4]' is invalid for input of
    size 4", which was tidal's internal error): tidal says what to change."""
    x = torch.randn(3, 4, dtype=torch.float64).abs().requires_grad_()
    compiled = torch.compile(_branches_of_unequal_shapes, backend="tidal", options={"fallback": fallback})
    with pytest.raises(Exception, match="branches return tensors of different sizes .* make both branches return equal sizes"):
        compiled(x).sum().backward()


def test_regression_matmul_by_a_nested_scans_carry():
    """An LSTM whose steps are chunked (an outer scan over chunks projecting x·W for the chunk, an
    inner scan over its steps): the inner scan's first step reads the outer carry through a view
    of strides known at run time only. Fixed in session 34 (`tidal-matmul-to-blas` branches on the
    inner stride: the gemm call where it is 1). Was: that matmul kept its naive loops, ~30 ms a
    chunk at [64, 256]·[256, 1024], 7x the whole unchunked LSTM. Values against the Python loop."""
    gen = torch.Generator().manual_seed(34)
    B, H, T, K = 3, 8, 12, 4
    W, U = (torch.randn(H, 4 * H, generator=gen) * H**-0.5 for _ in range(2))
    xs = torch.randn(T, B, H, generator=gen)

    def cell(carry, xw):
        h, c = carry
        i, f, g, o = (xw + h @ U).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return (h, c), h.clone()

    def chunked(xs):
        zeros = xs.new_zeros(B, H)
        _, ys = scan(lambda carry, chunk: scan(cell, carry, chunk @ W), (zeros, zeros.clone()), xs.reshape(T // K, K, B, H))
        return ys.reshape(T, B, H)

    carry, expected = (torch.zeros(B, H), torch.zeros(B, H)), []
    for t in range(T):
        carry, y = cell(carry, xs[t] @ W)
        expected.append(y)
    got, fallbacks = compiled_with_fallbacks(chunked, xs)
    assert not fallbacks
    torch.testing.assert_close(got, torch.stack(expected), rtol=1e-5, atol=1e-5)
