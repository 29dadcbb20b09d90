"""Compiled code on torch's OpenMP team: `tidal-forall-to-threads` runs a forall's iterations on
the threads `torch.set_num_threads` allows, and a long `associative_scan` takes its blocked
(reduce-then-scan) form there. Values against eager at 1, 2 and 3 threads (3 oversubscribes a
2-core CI machine on purpose: the block count follows the team, not the cores)."""

import re

import pytest
import torch
from torch._higher_order_ops import associative_scan

from tidal.compiler import compile_program
from tidal.conversion.tidal_to_scf.associative_scan import PARALLEL_MIN_STEPS


@pytest.fixture
def threads():
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


# Each iteration writes the number of the thread that ran it.
WHO_RAN = """
func.func private @omp_get_thread_num() -> i32
func.func @main(%x: tensor<4xi32>) -> tensor<4xi32> {
  %r = scf.forall (%j) in (4) shared_outs(%o = %x) -> tensor<4xi32> {
    %t = func.call @omp_get_thread_num() : () -> i32
    %one = tensor.from_elements %t : tensor<1xi32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %one into %o[%j] [1] [1] : tensor<1xi32> into tensor<4xi32>
    }
  }
  return %r : tensor<4xi32>
}
"""


def _native(text):
    from torch_mlir import ir

    import tidal.init_all  # noqa: F401
    from tidal.compiler import lower
    from tidal.context import make_context
    from tidal.runtime.executable import NativeFunction, signature_of

    ctx = make_context()
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(text)
        args, results = signature_of(module, "main")
        lower(module, ctx, "llvm", start="linalg")
        return NativeFunction.from_llvm_module(module, "main", args, results)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_forall_runs_on_the_team(threads, n):
    threads(n)
    who = _native(WHO_RAN)(torch.full((4,), -1, dtype=torch.int32))[0]
    # Contiguous chunks of ceil(4 / n) iterations per thread, in thread order.
    chunk = -(-4 // n)
    assert who.tolist() == [i // chunk for i in range(4)]


def log_sum_and_product(reverse=False, dim=0):
    # Compute-bound (exp/log): the kind of combine that gets the blocked form.
    def program(a, b):
        def combine(left, right):
            return torch.logaddexp(left[0], right[0]), left[1] * right[1]

        return associative_scan(combine, (a, b), dim=dim, reverse=reverse, combine_mode="generic")

    return program


def matrix_product(xs):
    # Not elementwise, not commutative: block order matters.
    return associative_scan(lambda l, r: l @ r, xs, dim=0, combine_mode="generic")


def _inputs(shape):
    g = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=g), 1 + 1e-4 * torch.randn(shape, generator=g)


@pytest.mark.parametrize("steps", [PARALLEL_MIN_STEPS, PARALLEL_MIN_STEPS + 7, 3 * PARALLEL_MIN_STEPS + 1])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_blocked_scan(threads, steps, n):
    program = log_sum_and_product()
    a, b = _inputs((steps, 4))
    compiled = compile_program(program, (a, b))
    threads(n)
    for got, want in zip(compiled(a, b), program(a, b)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("reverse,dim", [(True, 0), (False, 1), (True, 1)])
def test_blocked_reverse_and_inner_dim(threads, reverse, dim):
    program = log_sum_and_product(reverse, dim)
    shape = (PARALLEL_MIN_STEPS + 5, 3) if dim == 0 else (3, PARALLEL_MIN_STEPS + 5)
    a, b = _inputs(shape)
    compiled = compile_program(program, (a, b))
    threads(2)
    for got, want in zip(compiled(a, b), program(a, b)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_blocked_matrix_product_keeps_block_order(threads):
    g = torch.Generator().manual_seed(1)
    # Rotations: products stay bounded over any number of steps.
    angle = torch.rand(PARALLEL_MIN_STEPS + 3, generator=g, dtype=torch.float64) * 0.01
    c, s = angle.cos(), angle.sin()
    xs = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    xs[:, 0, 1] += 1e-3  # no longer commuting rotations
    compiled = compile_program(matrix_product, (xs,))
    threads(2)
    torch.testing.assert_close(compiled(xs)[0], matrix_product(xs)[0], rtol=1e-6, atol=1e-6)


def test_blocked_under_torch_compile_dynamic_length(threads):
    program = log_sum_and_product()
    compiled = torch.compile(program, backend="tidal")
    threads(2)
    with torch.no_grad():
        for steps in (100, PARALLEL_MIN_STEPS + 11, 2 * PARALLEL_MIN_STEPS):
            a, b = _inputs((steps, 4))
            torch._dynamo.mark_dynamic(a, 0)
            torch._dynamo.mark_dynamic(b, 0)
            for got, want in zip(compiled(a, b), program(a, b)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_blocked_form_is_what_runs(tmp_path):
    # The value tests above would pass with the sequential loop alone: check that the program
    # they compile starts the team.
    a, b = _inputs((PARALLEL_MIN_STEPS, 4))
    compile_program(log_sum_and_product(), (a, b), dump_dir=str(tmp_path))
    llvm = (tmp_path / "03-llvm.mlir").read_text()
    assert _program_team_starts(llvm) == 3  # the scan's two phases, one split generic


def conv_block():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.GroupNorm(2, 8), torch.nn.SiLU(),
                               torch.nn.Conv2d(8, 4, 3, padding=1)), (torch.randn(5, 8, 20, 20),)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64),
                               torch.nn.LayerNorm(64)), (torch.randn(67, 64),)  # 67 rows: uneven chunks


def broadcast_and_reduce(x, w):
    return (x * w).sum(-1), torch.softmax(x, dim=-1) + w  # w [64] broadcast along every row


def softmax_then_columns(x):
    """A softmax over rows (one group of row-wise ops), then ops mixing rows: a mean over the
    rows (a reduction across what the threads split) subtracted from every row, and a transpose."""
    p = torch.softmax(x * 0.5, dim=-1)
    return p - p.mean(0), (p.transpose(0, 1) * 2).contiguous()


def attention(q, k, v):
    """bmm's with B·M·N·K over tidal.backends.cpu.blas.PARALLEL_BATCH_MACS: the batch entries' gemms
    run on the team (5 entries: uneven chunks; k read transposed)."""
    return torch.softmax(q @ k.transpose(-1, -2) / 8, dim=-1) @ v


STRAIGHT_LINE = {"conv_block": conv_block, "mlp": mlp,
                 "attention": lambda: (attention, (torch.randn(5, 64, 48), torch.randn(5, 40, 48), torch.randn(5, 40, 24))),
                 "broadcast_and_reduce": lambda: (broadcast_and_reduce, (torch.randn(3, 300, 64), torch.randn(64))),
                 "softmax_then_columns": lambda: (softmax_then_columns, (torch.randn(7, 48, 64),))}


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("name", list(STRAIGHT_LINE))
def test_large_generics_run_split_over_the_team(threads, name, n):
    """tidal-parallelize-generics: a large top-level generic runs in chunks of its outer dim, one
    per thread (uneven chunks, broadcast operands, reductions over inner dims), as eager."""
    program, inputs = STRAIGHT_LINE[name]()
    threads(n)
    compiled = torch.compile(program, backend="tidal", options={"fallback": "error"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), program(*inputs), rtol=1e-4, atol=1e-5)


def _program_team_starts(llvm: str) -> int:
    """`GOMP_parallel` calls in the program's own functions: tidal's gemm kernel
    (`gemm_kernel.py`) starts the team too, from its splitting functions."""
    functions = re.split(r"(?=llvm.func @)", llvm)
    return sum(f.count("llvm.call @GOMP_parallel") for f in functions if not f.startswith("llvm.func @tidal_sgemm_tiles"))


def test_large_generics_start_the_team(tmp_path):
    program, inputs = STRAIGHT_LINE["mlp"]()
    compile_program(program, inputs, dump_dir=str(tmp_path))
    llvm = (tmp_path / "03-llvm.mlir").read_text()
    # the GELU over [67, 256], and LayerNorm's passes over [67, 64] as one group: each is under
    # MIN_ELEMENTS, together they are over it
    assert _program_team_starts(llvm) == 2


def test_batch_gemms_start_the_team(tmp_path):
    """The entries of attention's two bmm's are one forall each (`_batched_gemm`), outlined onto
    the team: one worker calling the gemm per bmm, besides the softmax's worker."""
    from tidal.backends.cpu.blas import PARALLEL_BATCH_MACS

    program, inputs = STRAIGHT_LINE["attention"]()
    assert 5 * 64 * 24 * 40 >= PARALLEL_BATCH_MACS
    compile_program(program, inputs, dump_dir=str(tmp_path))
    llvm = (tmp_path / "03-llvm.mlir").read_text()
    workers = re.split(r"(?=llvm.func @__tidal_parallel_)", llvm)[1:]
    assert _program_team_starts(llvm) == 3
    assert sum("llvm.call @tidal_sgemm_rowmajor" in w for w in workers) == 2


PERMUTES = {
    "2d": (lambda x: x.t().contiguous(), (48, 32), torch.float32),
    "3d_inner_swap": (lambda x: x.transpose(1, 2).contiguous() * 2, (5, 32, 16), torch.float32),
    "nchw_to_nhwc_plus_one": (lambda x: x.permute(0, 2, 3, 1).contiguous() + 1, (3, 32, 5, 16), torch.float32),
    "nhwc_to_nchw": (lambda x: x.permute(0, 3, 1, 2).contiguous(), (2, 7, 16, 48), torch.float32),
    "5d": (lambda x: x.permute(4, 0, 3, 1, 2).contiguous(), (2, 3, 16, 2, 32), torch.float32),
    "int32": (lambda x: x.t().contiguous() + 1, (32, 64), torch.int32),
    "not_a_multiple_of_16": (lambda x: x.permute(0, 2, 1).contiguous() - 1, (3, 20, 24), torch.float32),
    "float64": (lambda x: x.t().contiguous(), (32, 32), torch.float64),
}


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("name", list(PERMUTES))
def test_permutes_in_register_tiles(threads, name, n):
    """tidal-tile-elementwise: permutes (alone or fused into elementwise ops) run in 16x16 tiles over
    a parallel outer loop (uneven chunks on 2 and 3 threads); the others run as they were."""
    fn, shape, dtype = PERMUTES[name]
    x = (torch.randn(shape) * 100).to(dtype)
    threads(n)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="tidal", options={"fallback": "error"})(x), fn(x))


# Elementwise ops of at least 65536 elements without a transpose, whose rows are short enough for
# LLVM to unroll into scalar code: rows of 16 lanes over a parallel outer loop (tidal-tile-elementwise,
# uneven chunks on 2 and 3 threads), broadcast operands read once per row.
ROWS = {
    "nchw_plus_one": (lambda x: x + 1, (4, 16, 32, 32)),
    "minus_row_mean": (lambda x: x - x.mean(-1, keepdim=True), (16, 97, 48)),
    "per_channel_scale": (lambda x: x * x.amax(dim=(0, 2, 3), keepdim=True) + 0.5, (5, 32, 32, 16)),
    "silu_rank2": (torch.nn.functional.silu, (1025, 64)),
}


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("name", list(ROWS))
def test_short_rows_in_vector_tiles(threads, name, n, tmp_path):
    fn, shape = ROWS[name]
    x = torch.randn(shape) * 3
    threads(n)
    with torch.no_grad():
        got = torch.compile(fn, backend="tidal", options={"fallback": "error", "dump_dir": str(tmp_path)})(x)
        torch.testing.assert_close(got, fn(x))
    (llvm,) = tmp_path.glob("*/03-llvm.mlir")
    assert "vector<16xf32>" in llvm.read_text()


def test_permutes_around_a_channels_last_convolution_are_tiled(tmp_path):
    """A conv block with 32 channels: the permutes to and from NHWC are shuffled in registers,
    and the block still matches eager."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.GroupNorm(8, 32), torch.nn.SiLU(),
                                torch.nn.Conv2d(32, 16, 3, padding=1))
    x = torch.randn(2, 32, 16, 16)
    with torch.no_grad():
        got = torch.compile(block, backend="tidal", options={"fallback": "error", "dump_dir": str(tmp_path)})(x)
        torch.testing.assert_close(got, block(x), rtol=1e-4, atol=1e-5)
    (llvm,) = tmp_path.glob("*/03-llvm.mlir")  # graphs are numbered per process
    assert "llvm.shufflevector" in llvm.read_text()
