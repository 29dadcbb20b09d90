"""Integer floor/trunc division, remainder and fmod compile with eager's semantics.

Python's rules for negative operands (floor, remainder with the divisor's sign), exact int64
arithmetic (torch-mlir's floor division went through f64), min // -1 wrapping as in eager, and a
zero divisor raising eager's RuntimeError('ZeroDivisionError') from the call, inside loops too,
instead of a SIGFPE (tidal-integer-division, tidal-guard-integer-division).
"""

import pytest
import torch
from torch._higher_order_ops import scan, while_loop

from tidal.compiler import compile_program

DTYPES = [torch.int64, torch.int32, torch.int16]


def operands(dtype):
    info = torch.iinfo(dtype)
    a = torch.tensor([7, -7, 7, -7, 0, 6, -6, 1, -1, info.max, info.min, info.min + 1, info.max, info.min, 5, -5],
                     dtype=dtype)
    b = torch.tensor([2, 2, -2, -2, 3, 3, -3, info.max, info.min, 7, 7, -1, -1, 3, info.min, info.max], dtype=dtype)
    return a, b


def tensor_divisions(a, b):
    return (a // b, a % b, torch.fmod(a, b), torch.div(a, b, rounding_mode="floor"), torch.floor_divide(a, b),
            torch.remainder(a, b), torch.div(a[1:], b[1:], rounding_mode="trunc"))  # min / -1 truncated kills eager


def scalar_divisions(a):
    return (a // 7, a % 7, a // -3, a % -3, torch.fmod(a, 5), torch.fmod(a, -5), a // -1, a % -1,
            torch.div(a[1:], 4, rounding_mode="trunc"), torch.remainder(a, 1), 9 % (a * 2 + 1), -9 // (a * 2 + 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensor_divisor_matches_eager(dtype):
    args = operands(dtype)
    torch.testing.assert_close(compile_program(tensor_divisions, args)(*args), tensor_divisions(*args))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_constant_divisor_matches_eager(dtype):
    args = operands(dtype)[:1]
    torch.testing.assert_close(compile_program(scalar_divisions, args)(*args), scalar_divisions(*args))


def test_broadcast_and_0d_divisors_of_another_dtype():
    def model(a, rows, b0):
        return a // rows, a % rows, torch.fmod(a, b0), a // b0, (a // b0).dtype == a.dtype

    a = torch.arange(-12, 12, dtype=torch.int32).reshape(4, 6)
    args = (a, torch.tensor([[3], [-4], [5], [-7]]), torch.tensor(-5))
    got, expected = compile_program(lambda a, r, b: model(a, r, b)[:4], args)(*args), model(*args)[:4]
    torch.testing.assert_close(got, expected)


def test_int64_is_exact_beyond_2_53():
    def model(a, b):
        return a // b, a % b, a // 3

    a = torch.tensor([2**62 + 1, -(2**62) - 1, 2**53 + 1, -(2**53) - 3])
    b = torch.tensor([3, 3, 1, 2])
    torch.testing.assert_close(compile_program(model, (a, b))(a, b), model(a, b))


ZERO = {
    "floor": lambda a, b: a // b,
    "remainder": lambda a, b: a % b,
    "fmod": lambda a, b: torch.fmod(a, b),
    "trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
}


@pytest.mark.parametrize("fn", ZERO.values(), ids=ZERO.keys())
def test_zero_divisor_raises_as_in_eager_and_the_program_stays_usable(fn):
    a, ok, zero = torch.tensor([4, 5, 6]), torch.tensor([2, -3, 4]), torch.tensor([2, 0, 3])
    program = compile_program(fn, (a, ok))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, zero)  # eager
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        program(a, zero)
    torch.testing.assert_close(program(a, ok), fn(a, ok))


def test_zero_python_divisor_raises():
    def model(a):
        return a % 0

    a = torch.tensor([4, 5])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compile_program(model, (a,))(a)


def test_zero_divisor_under_torch_compile():
    def model(a, b):
        return a // b + a % b

    compiled = torch.compile(model, backend="tidal")
    a, b = torch.tensor([7, -7, 9]), torch.tensor([2, -3, 4])
    torch.testing.assert_close(compiled(a, b), model(a, b))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(a, torch.tensor([2, 0, 4]))


def beam_search_bookkeeping(scores, V):
    """A beam search's steps: topk over the flattened [B, K * V] scores, then which beam (idx // V)
    and which token (idx % V) each kept entry is."""
    def step(total, s):
        top, idx = (s + total[:, :, None]).reshape(s.shape[0], -1).topk(total.shape[1], dim=-1)
        return top, (idx // V, idx % V)

    return scan(step, torch.zeros(scores.shape[1], scores.shape[2]), scores)[1]


def test_beam_search_bookkeeping_in_a_scan():
    torch.manual_seed(0)
    scores = torch.randn(5, 3, 4, 11)
    model = lambda s: beam_search_bookkeeping(s, 11)  # noqa: E731
    torch.testing.assert_close(compile_program(model, (scores,))(scores), model(scores))
    torch.testing.assert_close(torch.compile(model, backend="tidal")(scores), model(scores))


def digits(n, base):
    """The digits of n in `base` (a 0-d tensor carry), least significant first, in a while_loop."""
    def body(i, n, out):
        return i + 1, n // base, out.index_put((i.reshape(1),), (n % base).reshape(1))

    return while_loop(lambda i, n, out: (n != 0) & (i < 8), body,
                      (torch.zeros((), dtype=torch.int64), n, torch.zeros(8, dtype=torch.int64)))


def test_while_loop_divides_by_a_tensor_and_raises_on_a_zero_base():
    n = torch.tensor(-12345)
    args = (n, torch.tensor(10))
    program = compile_program(digits, args)
    for base in (10, 7, -3, 2):
        args = (n, torch.tensor(base))
        torch.testing.assert_close(program(*args), digits(*args))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        digits(n, torch.tensor(0))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        program(n, torch.tensor(0))


def test_divisor_carried_by_a_scan_raises_at_its_zero_step():
    def model(a, divisors):
        def step(c, d):
            q = c // d
            return q + c % d + torch.fmod(c, d), q.clone()

        return scan(step, a, divisors)

    a = torch.tensor([100, -77, 55])
    good = torch.tensor([[3, -2, 5], [-4, 6, 7], [2, 2, -9]])
    program = compile_program(model, (a, good))
    torch.testing.assert_close(program(a, good), model(a, good))
    bad = good.clone()
    bad[2, 1] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        model(a, bad)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        program(a, bad)


def test_symbolic_size_divisor_under_dynamic_torch_compile():
    def model(idx, x):
        n = x.shape[1]
        return idx // n, idx % n

    compiled = torch.compile(model, backend="tidal", dynamic=True, options={"fallback": "error"})
    idx = torch.arange(-20, 20)
    for n in (3, 7):
        x = torch.zeros(2, n)
        torch.testing.assert_close(compiled(idx, x), model(idx, x))
    # a size of 0 is a zero divisor (Dynamo specializes it: a new graph, called once, first time)
    x = torch.zeros(2, 0)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        model(idx, x)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(idx, x)


def test_zero_divisor_raises_under_a_python_dispatch_mode():
    """aot_autograd runs a compiled function's first call under a Python dispatch mode (its
    aliasing check), and a user may have one active: the native code's ATen calls must not go
    through it. Through the mode, the error raised inside it stayed set on the thread, the error
    hook could not record it, and the call returned a wrong answer."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class PassThrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    a, b = torch.tensor([7, -7, 5]), torch.tensor([2, 3, -4])
    program = compile_program(lambda a, b: a // b, (a, b))
    with PassThrough():
        torch.testing.assert_close(program(a, b), a // b)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            program(a, torch.tensor([2, 0, 1]))
