"""The GPU backend without a GPU: every corpus program becomes Triton kernels that triton 3.6
compiles to PTX for sm_90 (what CI can check), with the structure that matters: an elementwise
associative_scan is ONE kernel with `tt.scan` and its time loop inside. Running them on a GPU
is test_gpu.py's job."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest


from tidal.backends.gpu.triton_compile import kernel_asm  # noqa: E402
from tidal.compiler import gpu_function  # noqa: E402
from tidal.importer import import_program  # noqa: E402
from tidal.tools.tidal_compile import load_program_file  # noqa: E402

CORPUS = Path(__file__).parents[1] / "corpus"


def _gpu_program(path: Path):
    model, inputs = load_program_file(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gpu_function(import_program(model, inputs))


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.py")), ids=lambda p: p.stem)
def test_corpus_kernels_compile_to_ptx_for_sm90(path):
    program = _gpu_program(path)
    for kernel in program.kernels_for_emit():
        ptx = kernel_asm(kernel, "ptx", ("cuda", 90))
        assert ".target sm_90" in ptx and f".entry {kernel.name}(" in ptx, kernel.name


def test_elementwise_associative_scan_is_one_tt_scan_kernel_with_the_time_loop_inside():
    program = _gpu_program(CORPUS / "s5_linear_recurrence.py")
    scans = [k for k in program.kernels_for_emit() if "tt.scan" in k.text]
    assert len(scans) == 1
    # the program returns h (y1), not the running product of the a's (y0): y0 is never written
    assert "y1" in scans[0].signature and "y0" not in scans[0].signature, scans[0].signature
    ttir = kernel_asm(scans[0], "ttir", ("cuda", 90))
    assert re.search(r'"tt\.scan"\(.*\) <\{axis = 0 : i32, reverse = false\}>', ttir)
    loop = ttir.index("scf.for")
    assert ttir.index('"tt.scan"', loop) > loop  # the chunks after the first are scanned inside the loop


def test_long_associative_scan_is_one_look_back_kernel():
    """A scan long enough to fill the GPU with chunks runs in one pass: each program scans one
    register tile, publishes its total (release), and looks back at a WINDOW of earlier chunks
    per step (acquire atomics on a vector of flags, volatile record loads, one segmented
    `tt.scan` restarting at the nearest inclusive prefix)."""
    from tidal.backends.gpu import kernels as K
    from tidal.backends.gpu.variants import _lookback_window, _ScanPlan

    assert _ScanPlan(1 << 20, 16, [4, 4]).key == ("lookback", 512, 16) and _lookback_window(16) == 32
    assert _ScanPlan(256, 16, [4, 4]).form == "scan"

    program = _gpu_program(CORPUS / "s5_linear_recurrence.py")
    (op,) = [o for o in _walk(program.module.operation) if o.name == "tidal.associative_scan"]
    kernel = K.lookback_scan_kernel(op, "look_back", 512, 16, 32, live=(False, True))
    ttir = kernel_asm(kernel, "ttir", ("cuda", 90))
    assert re.search(r"tt\.atomic_rmw add, acquire, gpu, %\w+, %\w+, %\w+ : \(tensor<32x!tt\.ptr<i32>>", ttir), ttir
    assert re.search(r"tt\.atomic_rmw exch, release, gpu", ttir)
    # the restart flags and the two records: one scan over the window
    assert re.search(r'"tt\.scan"\(%\w+, %\w+, %\w+\) <\{axis = 0 : i32, reverse = false\}>', ttir), ttir
    assert "isVolatile = true" in ttir
    ptx = kernel_asm(kernel, "ptx", ("cuda", 90))
    assert ".entry look_back(" in ptx and "atom.global.gpu.release.exch" in ptx


def test_look_back_tile_scans_each_threads_rows_in_registers():
    """The chunk is a [G, K, C] tile (row g*K + j at [g, j]) scanned along K, and Triton lays it
    out with no lane and no warp along K: each thread scans its K rows in registers; only the G
    group totals cross threads (a [G, C] scan of (prefix, has prefix, total) triples)."""
    from tidal.backends.gpu import kernels as K

    program = _gpu_program(CORPUS / "s5_linear_recurrence.py")
    (op,) = [o for o in _walk(program.module.operation) if o.name == "tidal.associative_scan"]
    kernel = K.lookback_scan_kernel(op, "look_back", 512, 16, 32, live=(False, True))
    ttgir = kernel_asm(kernel, "ttgir", ("cuda", 90))
    scan = re.search(r'"tt\.scan"\(%\w+, %\w+\) <\{axis = 1 : i32, reverse = false\}>.*?-> \(tensor<32x16x16xf32, (#\w+)>', ttgir, re.S)
    assert scan, ttgir
    layout = re.search(rf"^{scan.group(1)} = #ttg\.blocked<\{{(.*)\}}>", ttgir, re.M).group(1)
    threads = [int(n) for n in re.search(r"threadsPerWarp = \[(\d+), (\d+), (\d+)\]", layout).groups()]
    warps = [int(n) for n in re.search(r"warpsPerCTA = \[(\d+), (\d+), (\d+)\]", layout).groups()]
    assert threads[1] == 1 and warps[1] == 1, layout
    assert re.search(r'"tt\.scan"\((%\w+, ){4}%\w+\) <\{axis = 0 : i32, reverse = false\}>.*?tensor<32x16xi32', ttgir, re.S)


def test_wide_associative_scan_walks_its_rows_in_registers_with_no_look_back():
    """Columns enough to fill the GPU ([B, T, D] with thousands of channels): one program per
    column block walks every row in [G, 16, C] tiles (each thread scanning its 16 rows in
    registers), the tile total carried to the next in the loop: no flags, no atomics."""
    from tidal.backends.gpu import kernels as K
    from tidal.backends.gpu.variants import _ScanPlan

    assert _ScanPlan(4096, 8 * 1024, [4, 4]).key == ("wide", 256, 16)
    assert _ScanPlan(2048, 32 * 2048, [4, 4]).key == ("wide", 64, 64) and _ScanPlan(2048, 32 * 2048, [4, 4]).col_blocks == 1024
    assert _ScanPlan(65536, 256, [4, 4]).form == "lookback" and _ScanPlan(64, 8192, [4, 4]).form == "scan"

    program = _gpu_program(CORPUS / "s5_linear_recurrence.py")
    (op,) = [o for o in _walk(program.module.operation) if o.name == "tidal.associative_scan"]
    kernel = K.wide_scan_kernel(op, "wide", 256, 16, live=(False, True))
    assert kernel.num_warps == 8  # 256 threads: 16 groups of 16 rows x 16 columns
    ttgir = kernel_asm(kernel, "ttgir", ("cuda", 90))
    assert "atomic" not in ttgir and "isVolatile" not in ttgir
    loop = ttgir.index("scf.for")
    scan = re.search(r'"tt\.scan"\(%\w+, %\w+\) <\{axis = 1 : i32, reverse = false\}>.*?-> \(tensor<16x16x16xf32, (#\w+)>', ttgir[loop:], re.S)
    assert scan, ttgir
    layout = re.search(rf"^{scan.group(1)} = #ttg\.blocked<\{{(.*)\}}>", ttgir, re.M).group(1)
    threads = [int(n) for n in re.search(r"threadsPerWarp = \[(\d+), (\d+), (\d+)\]", layout).groups()]
    warps = [int(n) for n in re.search(r"warpsPerCTA = \[(\d+), (\d+), (\d+)\]", layout).groups()]
    assert threads[1] == 1 and warps[1] == 1, layout  # the 16 rows of a run: one thread's registers


def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


def test_elementwise_while_is_one_kernel_with_the_loop_inside():
    """A while_loop with an elementwise body and a condition on a 0-d counter: ONE kernel whose
    scf.while carries the counter as a scalar (the condition needs no reduction) and the data as
    tiles; nothing else runs per iteration."""
    program = _gpu_program(CORPUS / "while_logistic_map.py")
    kernels = program.kernels_for_emit()
    assert len(kernels) == 1, [k.name for k in kernels]
    ttir = kernel_asm(kernels[0], "ttir", ("cuda", 90))
    assert re.search(r"scf\.while \(%\w+ = %\w+, %\w+ = %\w+\) : \(i64, tensor<256xf32>\)", ttir), ttir
    assert re.search(r"arith\.cmpi slt, %\w+, %\w+ : i64", ttir)  # the condition, on scalars
    assert '"tt.reduce"' not in ttir


def test_cond_with_elementwise_branches_is_a_select_in_one_kernel():
    """cond_clamp_invalid's branches are elementwise: both run, fused with the select on the
    device-side predicate into one kernel; no cond is left for the host to decide."""
    program = _gpu_program(CORPUS / "cond_clamp_invalid.py")
    assert "tidal.cond" not in str(program.module)
    names = [k.name for k in program.kernels_for_emit()]
    # the mask, its any() and ONE kernel for both branches and the select
    assert [re.sub(r"_\d+.*", "", n) for n in names] == ["tidal_generic", "tidal_reduce", "tidal_generic"], names


def test_tidal_compile_emits_ptx_without_a_gpu():
    done = subprocess.run(
        [sys.executable, "-m", "tidal.tools.tidal_compile", str(CORPUS / "assoc_cumsum_dim1.py"), "--emit", "ptx", "--target", "cuda:90"],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "// kernel tidal_scan_" in done.stdout and ".target sm_90" in done.stdout


def test_tidal_compile_refuses_an_unknown_target():
    done = subprocess.run(
        [sys.executable, "-m", "tidal.tools.tidal_compile", str(CORPUS / "assoc_cumsum_dim1.py"), "--emit", "ptx", "--target", "rocm:9"],
        capture_output=True, text=True,
    )
    assert done.returncode == 1
    assert "error: unknown target 'rocm:9' (expected cuda:<sm>, e.g. cuda:90)" in done.stderr


def test_what_the_gpu_backend_cannot_compile_is_named_with_its_source_line(monkeypatch):
    """An op the plan refuses that came from no aten op (a control-flow op: no ATen call can run
    it) is a TidalUnsupported naming it and the user's line (under torch.compile: one fallback
    warning, or strict's error)."""
    import torch
    from torch._higher_order_ops import associative_scan

    from tidal.backends.gpu.plan import PlanBuilder
    from tidal.diagnostics import TidalUnsupported

    def refuse(self, op):
        raise TidalUnsupported("GPU backend: no lowering of this associative_scan (test)", op.location)

    monkeypatch.setattr(PlanBuilder, "_op_tidal_associative_scan", refuse)

    def products(m):
        return associative_scan(lambda p, q: p @ q, m, dim=0, combine_mode="generic")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = import_program(products, (torch.randn(5, 2, 2),))
    with pytest.raises(TidalUnsupported) as info:
        gpu_function(prog)
    message = info.value.format()
    assert "no lowering of this associative_scan (test)" in message
    assert "test_gpu_lowering.py:" in message


def _aten_calls(program) -> list[str]:
    return sorted(ir_attr_string(op.attributes["callee"]) for op in _walk(program.module.operation) if op.name == "tidal.aten_call")


def ir_attr_string(attr) -> str:
    from torch_mlir import ir

    return ir.StringAttr(attr).value


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "logcumsumexp"])
def test_an_op_without_a_triton_lowering_is_an_aten_call_inside_the_gpu_program(name):
    """Per-op fallback: the aten op whose lowering the Triton plan refuses (tm_tensor.scan) runs as an ATen call on the stream, in place and in loop bodies; the rest of the
    program still becomes kernels."""
    import torch
    from torch._higher_order_ops import scan

    from test_layers import CASES

    shape, f = CASES[name]
    # logcumsumexp is decomposed (tidal's capture) around a cumsum
    callee = {"logcumsumexp": "aten::cumsum"}.get(name, f"aten::{name}")

    def in_scan(x, xs):
        return scan(lambda c, x_t: (0.5 * c + 0.5 * x_t, f(c)[0].sin()), x, xs)

    assert _aten_calls(_traced_gpu_program(f, torch.randn(shape))) == [callee]
    program = _traced_gpu_program(in_scan, torch.randn(shape), torch.randn(3, *shape))
    assert _aten_calls(program) == [callee]
    assert program.kernels_for_emit(), "the elementwise ops around it are still kernels"


def test_an_invalid_kernel_is_refused_when_made_and_its_ops_become_aten_calls(monkeypatch):
    """Every kernel is checked by Triton's parser and verifier when the plan makes it, never at a
    call: an invalid one is the op's located TidalUnsupported, and the aten ops it came from run
    as ATen calls instead."""
    import torch

    from tidal.backends.gpu import kernels as K
    from tidal.backends.gpu.plan import PlanBuilder
    from tidal.backends.gpu.ttir import Kernel
    from tidal.diagnostics import TidalUnsupported

    made = K.generic_kernel

    def broken(op, name, *args, **kwargs):
        launch = made(op, name, *args, **kwargs)
        launch.kernel.text = launch.kernel.text.replace("tt.return", "tt.store %nowhere, %nothing\n    tt.return", 1)
        return launch

    monkeypatch.setattr(K, "generic_kernel", broken)
    program = _traced_gpu_program(lambda x: (x.sin() * 2,), torch.randn(8, 8))
    assert program.kernels_for_emit() == []
    assert _aten_calls(program) == ["aten::mul", "aten::sin"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = import_program(lambda x: (x.sin(),), (torch.randn(4),))
    builder = PlanBuilder(prog.module, None, None)
    (op,) = [o for o in _walk(prog.module.operation) if o.name.startswith("torch.aten")]
    bad = Kernel("bad", "module {\n  tt.func public @bad() {\n    %v = arith.extui None : tensor<4xi1> to tensor<4xi8>\n"
                        "    tt.return\n  }\n}\n", {})
    with pytest.raises(TidalUnsupported) as info:
        builder.take(bad, op)
    message = info.value.format()
    assert "not valid Triton IR" in message and "expected SSA operand" in message and "test_gpu_lowering.py:" in message


@pytest.fixture
def gpu_programs_of_torch_compile(monkeypatch):
    """torch.compile(backend="tidal") on CPU tensors taking the GPU path as far as a GPU is not
    needed: the GpuPrograms Dynamo's graphs (dynamic sizes included) became, in order. Their
    calls fail for want of CUDA; the graphs then run in eager."""
    import tidal.compiler
    import tidal.dynamo

    made = []
    build = tidal.compiler.gpu_function
    monkeypatch.setattr(tidal.dynamo, "_device", lambda inputs: "cuda")
    monkeypatch.setattr(tidal.compiler, "gpu_function", lambda *a, **k: made.append(build(*a, **k)) or made[-1])
    return made


def _compile_on_cpu_for_the_gpu(fn, calls):
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options={"fallback": "warn"})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for args in calls:
            compiled(*args)


@pytest.mark.parametrize("name", ["shape_predicate", "python_int_counter", "returns_the_counter", "branch_uses_a_size",
                                  "associative_scan_in_scan"])
def test_dynamic_size_programs_make_valid_kernels_at_plan_time(gpu_programs_of_torch_compile, name):
    """Dynamo's graphs with symbolic sizes (shape predicates, Python-int carries) build their
    kernels when the plan is made (a dynamic size as a typical one), each valid Triton IR; the
    Python-int counter's kernel stores a captured scalar as it is (it was text with no operand)."""
    from test_conformance import CASES

    from tidal.backends.gpu.triton_compile import kernel_errors

    fn, calls = CASES[name]
    _compile_on_cpu_for_the_gpu(fn, calls)
    assert len(gpu_programs_of_torch_compile) >= 2, "a static graph, then one with dynamic sizes"
    kernels = [k for p in gpu_programs_of_torch_compile for k in p.kernels_for_emit()]
    assert kernels
    assert [k.name for k in kernels if kernel_errors(k) is not None] == []
    for kernel in kernels[:3]:
        assert f".entry {kernel.name}(" in kernel_asm(kernel, "ptx", ("cuda", 90))


def test_a_linear_on_a_3d_input_with_dynamic_sizes_is_a_view_not_a_fallback(gpu_programs_of_torch_compile):
    """nn.Linear on [T, B, D] whose sizes change: Dynamo's second graph reshapes by sizes known
    only at run time (`tensor.reshape` of a shape made from them), a view read on the host."""
    import torch

    lin = torch.nn.Linear(8, 16)
    _compile_on_cpu_for_the_gpu(lin, [(torch.randn(5, 3, 8),), (torch.randn(7, 2, 8),)])
    programs = gpu_programs_of_torch_compile
    assert len(programs) == 2
    assert any(op.name in ("tensor.reshape", "tensor.expand_shape", "tensor.collapse_shape")
               for op in _walk(programs[1].module.operation))


def test_associative_scan_with_any_combine_is_planned_on_the_device(monkeypatch):
    """A combine that is not one elementwise kernel (a matrix product, a reduction feeding a
    select, operands of different shapes, a cond of matmuls) runs batched
    (conversion/batching.py), a while_loop inside too: the odd/even scan, one batched combine per
    level. A combine calling an ATen op without a batching rule (a cumsum, which has no Triton
    lowering) keeps the running combine, one per position. A map body runs batched, once."""
    from torch._higher_order_ops import while_loop
    import torch
    from torch._higher_order_ops import associative_scan
    from torch._higher_order_ops.map import map as hop_map

    from tidal.backends.gpu.plan import PlanBuilder

    chosen = []
    for form in ("_odd_even_combine", "_running_combine"):
        original = getattr(PlanBuilder, form)
        monkeypatch.setattr(PlanBuilder, form, lambda self, op, *a, _f=original, _n=form: chosen.append(_n) or _f(self, op, *a))

    def products(m):
        return associative_scan(lambda p, q: p @ q, m, dim=0, combine_mode="generic")

    def with_cond(x):
        return associative_scan(lambda a, b: torch.cond(a.sum() > 0, lambda a, b: a + b, lambda a, b: a * b, (a, b)),
                                x, dim=0, combine_mode="generic")

    def scaled_rows(w, v):
        return associative_scan(lambda l, r: (l[0] * r[0], l[1] * r[0].unsqueeze(-1) + r[1]), (w, v), dim=0,
                                combine_mode="generic")[1]

    def branchy(m):
        return associative_scan(lambda p, q: torch.cond(p.sum() > 0, lambda p, q: p @ q, lambda p, q: q @ p, (p, q)),
                                m, dim=0, combine_mode="generic")

    def halving(x):
        return associative_scan(lambda a, b: while_loop(lambda c: c.abs().sum() > 1.0, lambda c: (c * 0.5,), (a + b,))[0],
                                x, dim=0, combine_mode="generic")

    def running_sums(x):
        return associative_scan(lambda a, b: a + b.cumsum(0), x, dim=0, combine_mode="generic")

    for fn, args in ((products, (torch.randn(5, 2, 2),)), (with_cond, (torch.randn(6, 4),)),
                     (scaled_rows, (torch.rand(5, 3), torch.randn(5, 3, 2))), (branchy, (torch.randn(5, 2, 2),)),
                     (halving, (torch.randn(5, 3),)), (running_sums, (torch.randn(5, 3),))):
        program = _traced_gpu_program(fn, *args)
        for kernel in program.kernels_for_emit():
            assert f".entry {kernel.name}(" in kernel_asm(kernel, "ptx", ("cuda", 90))
    # the cumsum's first plan is refused (no Triton lowering) and made again with it an ATen call
    assert chosen[:5] == ["_odd_even_combine"] * 5 and set(chosen[5:]) == {"_running_combine"}, chosen
    # a dynamic batch size: torch-mlir broadcasts the matmul's operands by gathers whose sizes
    # are read once before them (tidal-hoist-body-sizes), batched like any generic
    chosen.clear()
    dims = ({0: torch.export.Dim("T", min=2), 1: torch.export.Dim("B", min=2)},)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu_function(import_program(lambda m: products(m), (torch.randn(5, 4, 3, 3),), dynamic_shapes=dims))
    assert chosen == ["_odd_even_combine"], chosen

    batched_maps = []
    original = PlanBuilder._batched_plan

    def recorded(self, op, batched):
        plan = original(self, op, batched)
        batched_maps.append((op.name, plan is not None))
        return plan

    monkeypatch.setattr(PlanBuilder, "_batched_plan", recorded)
    _traced_gpu_program(lambda xs, w: hop_map(lambda x, w: torch.tanh(x @ w), xs, w), torch.randn(5, 3, 4), torch.randn(4, 2))
    assert batched_maps == [("tidal.map", True)]


def test_row_wise_scan_is_one_kernel_with_the_time_loop_and_the_matmul_inside():
    """An RNN cell (rows never mix): ONE kernel per program block of batch rows, with the time loop
    (`scf.for` over T) and the cell's matmul inside, as three TF32 tensor-core products (hi·hi +
    hi·lo + lo·hi: fp32-accurate); the input projection x_t·W was hoisted out of the scan (one
    matmul before it, an ATen call), so the loop reads x_t·W."""
    program = _gpu_program(CORPUS / "rnn_scan_wide.py")
    kernels = program.kernels_for_emit()
    assert [k.name for k in kernels] == ["tidal_scan_rows_1"], [k.name for k in kernels]
    ttgir = kernel_asm(kernels[0], "ttgir", ("cuda", 90))
    loop = ttgir.index("scf.for")
    assert ttgir.index("tt.dot", loop) > loop
    assert ttgir.count("tt.dot ") == 3 and ttgir.count("inputPrecision = tf32") == 3, ttgir
    # the three products are independent (each from a zero tile, then added): one chain through
    # all three made every step wait out three times as many dependent mma (232 -> 207 us, H200)
    dots = re.findall(r"%(\w+) = tt\.dot %\w+, %\w+, %(\w+)", ttgir)
    zeros = set(re.findall(r"%(\w+) = arith\.constant dense<0\.000000e\+00> : tensor<16x\d+xf32", ttgir))
    assert len(dots) == 3 and all(acc in zeros for _, acc in dots), dots
    # x_t·W was loaded one step ahead: it comes in as a loop-carried value that the step adds,
    # and the loop's load is yielded for the next step (no step waits on its own load)
    (carried,) = re.findall(r"scf\.for %\w+ = .* iter_args\(%(\w+) = %\w+, %(\w+) = %\w+\)", ttgir)
    assert re.search(rf"arith\.addf (%\w+, %{carried[1]}|%{carried[1]}, %\w+)", ttgir), ttgir
    (yielded,) = re.findall(r"scf\.yield %\w+, %(\w+)", ttgir)
    assert re.search(rf"%{yielded} = tt\.load", ttgir), ttgir


def test_row_kernel_holds_the_weights_in_registers_as_dot_operands():
    """The row kernel is written at TTGIR level: U's TF32 high and low parts are split once,
    before the time loop, in the dot's B-operand layout (registers), and nothing in the loop
    reads them from shared memory; each step converts h to the A operand once. Left to Triton
    (TTIR), U's parts sat in shared memory and were reloaded every step."""
    program = _gpu_program(CORPUS / "rnn_scan_wide.py")
    (kernel,) = program.kernels_for_emit()
    assert kernel.stage == "ttgir"
    ttgir = kernel_asm(kernel, "ttgir", ("cuda", 90))
    head, loop = ttgir.split("scf.for", 1)
    rhs = r"#ttg\.dot_op<\{opIdx = 1"
    # U's high part (rounded in integer ops) and its low part (the rest, unrounded), once
    assert len(re.findall(r"arith\.andi .*" + rhs, head)) == 1 and len(re.findall(r"arith\.subf .*" + rhs, head)) == 1, head
    assert not re.search(r"(arith\.subf|arith\.andi).*" + rhs, loop)
    # no cvt.rna anywhere: the tensor cores truncate the low parts to TF32 themselves
    assert "cvt.rna" not in ttgir, ttgir
    assert "ttg.local_alloc" not in ttgir and "ttg.local_load" not in ttgir, ttgir
    assert loop.count("ttg.convert_layout") == 1, loop  # h -> A operand
    assert "@TARGET@" not in ttgir and 'ttg.target = "cuda:90"' in ttgir
    ptx = kernel_asm(kernel, "ptx", ("cuda", 90))
    assert ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") > 0


def test_tf32_rounding_in_integer_ops_rounds_as_cvt_rna():
    """round_to_tf32's two integer ops round to TF32 as cvt.rna.tf32.f32 does (to nearest, ties away
    from zero; overflow to inf), checked here against a rounding of the value in float64 on ties,
    the largest finite values, subnormals, zeros, infinities and 2M random bit patterns (all 2^32
    were checked once, 95 s)."""
    import numpy as np

    from tidal.backends.gpu.ttir import TF32_KEPT_BITS, TF32_ROUND_BIAS

    rng = np.random.default_rng(0)
    mantissas = np.array([0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FE000, 0x7FEFFF, 0x7FF000, 0x7FFFFF])
    exponents = np.array([0, 1, 2, 126, 127, 128, 253, 254]) << 23
    edges = (mantissas[:, None] | exponents[None, :]).ravel()
    bits = np.concatenate([edges, edges | 0x80000000, [0x7F800000, 0xFF800000],
                           rng.integers(0, 2**32, 2_000_000)]).astype(np.uint32)
    x = bits.view(np.float32)
    bits, x = bits[~np.isnan(x)], x[~np.isnan(x)]
    got = ((bits.astype(np.int64) + TF32_ROUND_BIAS) & (TF32_KEPT_BITS & 0xFFFFFFFF)).astype(np.uint32).view(np.float32)
    a = np.abs(x.astype(np.float64))
    with np.errstate(all="ignore"):
        ulp = np.ldexp(1.0, np.maximum(np.frexp(a)[1], -125) - 11)  # 10 mantissa bits; subnormals' spacing
        r = np.where(np.isinf(a), np.inf, np.floor(a / ulp + 0.5) * ulp)
        want = np.copysign(np.where(r >= 2.0**128, np.inf, r), x.astype(np.float64)).astype(np.float32)
    wrong = np.nonzero(want.view(np.uint32) != got.view(np.uint32))[0]
    assert wrong.size == 0, [(hex(bits[i]), float(x[i]), float(want[i]), float(got[i])) for i in wrong[:5]]


def test_tanh_is_branch_free():
    """tanh (f32, on tiles) computes both of libdevice's paths and selects: __nv_tanhf's
    per-element branch ran a thread's elements one after another (`ttir._tanh_f32`)."""
    import torch

    program = _traced_gpu_program(lambda x: torch.tanh(x) * 2.0, torch.randn(1000))
    (kernel,) = program.kernels_for_emit()
    ptx = kernel_asm(kernel, "ptx", ("cuda", 90))
    assert "__nv_tanhf" not in kernel.text and "ex2.approx.ftz.f32" in ptx and "rcp.approx.ftz.f32" in ptx
    body = ptx[ptx.index(".entry"):]
    assert not re.search(r"\bbra\b", body), body


@pytest.mark.parametrize("kind,h", [("lstm", 32), ("gru", 32), ("lstm", 128), ("ln_lstm", 32), ("residual_rnn", 32)])
def test_gated_cells_are_one_row_kernel_forward_and_backward(gpu_programs_of_torch_compile, kind, h):
    """LSTM and GRU steps split their gates with `chunk`: each gate is a column block of the row
    kernel (its own product by U's column block, its bias block, its xs columns), never the whole
    [B, 4H] tile, which registers cannot slice; the adjoint concatenates the gate cotangents and
    multiplies by Uᵀ, read as the sum of each part's product by Uᵀ's row block. Forward and
    adjoint are ONE persistent kernel each, with the time loop inside, and compile to PTX. With
    H = 128 the weights (512 KiB as TF32 parts) pass shared memory: 8 programs share a block of
    rows, each with 16 columns of every gate and U's blocks of them resident in shared memory (read
    a K chunk of 16 rows at a time), and exchange the matmul's left-hand side (h; the adjoint's
    gate cotangents) through L2 at a barrier every step."""
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import GATES, make_cell

    from tidal.backends.gpu.triton_compile import compile_kernel

    cell = make_cell(kind, h, "cpu", "scan")
    xs = torch.randn(8, 20, h, requires_grad=True)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(cell, backend="tidal", fullgraph=True, options={"fallback": "warn"})(xs).sum().backward()
    forward, backward = gpu_programs_of_torch_compile
    for program in (forward, backward):
        rows = [k for k in program.kernels_for_emit() if "scan_rows" in k.name]
        assert len(rows) == 1, [k.name for k in program.kernels_for_emit()]
        ttgir = kernel_asm(rows[0], "ttgir", ("cuda", 90))
        # per gate, three TF32 products (hi·hi, hi·lo, lo·hi) inside the time loop
        loop = ttgir.index("scf.for")
        if kind in ("ln_lstm", "residual_rnn"):  # LayerNorm: row reductions inside the loop
            assert ttgir.count('"tt.reduce"', loop) >= 2, ttgir
        elif h == 32:
            assert ttgir.count("tt.dot ", loop) == 3 * GATES[kind], ttgir
        else:  # 8 programs a block of rows, each with 16 columns of every gate and of U's blocks
            assert "exchange" in rows[0].signature and "tt.atomic_rmw" in ttgir[loop:], ttgir
            assert ttgir.count("tt.dot ", loop) == 3 * GATES[kind] * (h // 16), ttgir  # per K chunk
            assert len(re.findall(r"tt\.dot .* -> tensor<16x16xf32", ttgir[loop:])) == 3 * GATES[kind] * (h // 16), ttgir
            assert ttgir.count("ttg.local_alloc", 0, loop) >= 2 * GATES[kind] and "ttg.local_load" in ttgir[loop:]
            assert compile_kernel(rows[0], ("cuda", 90)).metadata.shared <= 227 * 1024
        assert f".entry {rows[0].name}(" in kernel_asm(rows[0], "ptx", ("cuda", 90))


@pytest.mark.parametrize("kind,h", [("rnn", 256), ("lstm", 256), ("gru", 256), ("rnn", 512), ("lstm", 512), ("gru", 512)])
def test_split_cells_fit_shared_memory_forward_and_backward(gpu_programs_of_torch_compile, kind, h):
    """The issue's cells past shared memory (B=64): forward and adjoint are one row kernel each,
    split among programs whose slices of the weights stay in shared memory with room for the
    left-hand side's part; `_split`'s estimate holds for both (at most 227 KiB: Triton refuses
    more at the first call)."""
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import make_cell

    from tidal.backends.gpu.triton_compile import compile_kernel

    xs = torch.randn(4, 64, h, requires_grad=True)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(make_cell(kind, h, "cpu", "scan"), backend="tidal", fullgraph=True, options={"fallback": "warn"})(xs).sum().backward()
    forward, backward = gpu_programs_of_torch_compile
    for program in (forward, backward):
        (rows,) = [k for k in program.kernels_for_emit() if "scan_rows" in k.name]
        assert "exchange" in rows.signature and "ttg.local_load" in rows.text
        assert compile_kernel(rows, ("cuda", 90)).metadata.shared <= 227 * 1024


@pytest.mark.parametrize("kind,h,rows,parts,weights", [
    ("rnn", 384, 64, 12, "resident"), ("lstm", 384, 64, 12, "resident_f32"), ("gru", 384, 64, 12, "resident_f32"),
    ("rnn", 96, 32, 6, "resident"), ("gru", 96, 32, 6, "resident"), ("lstm", 320, 32, 10, "resident_f32")])
def test_widths_not_powers_of_two_are_shared_out_in_powers_of_two(monkeypatch, kind, h, rows, parts, weights):
    """A width of a power of two times a small odd factor (384 = 3·128, 96 = 3·32, 320 = 5·64)
    has no tile of its own (Triton's shapes are powers of two): its columns go to a multiple of
    the factor of programs, each holding a power of two of them; the weights' K rows and the
    exchanged left-hand side sit in shared memory in pieces of a power of two of rows (columns),
    a K chunk read within one. Forward and adjoint are one row kernel each, within 227 KiB of
    shared memory, no register spilled."""
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import make_cell

    import tidal.backends.gpu.plan as plan
    from tidal.backends.gpu.triton_compile import compile_kernel

    launches, made = [], plan.row_scan_kernel
    monkeypatch.setattr(plan, "row_scan_kernel", lambda *a: launches.append(made(*a)) or launches[-1])
    xs = torch.randn(4, rows, h, requires_grad=True)
    torch._dynamo.reset()
    import tidal.dynamo

    monkeypatch.setattr(tidal.dynamo, "_device", lambda inputs: "cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(make_cell(kind, h, "cpu", "scan"), backend="tidal", fullgraph=True, options={"fallback": "warn"})(xs).sum().backward()
    assert not [str(c.message) for c in caught if "one step at a time" in str(c.message)]
    assert len(launches) == 2 and all(not isinstance(x, str) for x in launches), launches  # forward, adjoint
    piece = h & -h
    for launch in launches:
        assert (launch.block_rows, launch.parts, launch.weights) == (16, parts, weights)
        assert f"tensor<16x{h // parts}xf32, #mma>" in launch.kernel.text and f"16x{h}x" not in launch.kernel.text
        assert f"!ttg.memdesc<16x{piece}xf32" in launch.kernel.text  # the exchanged h, a piece at a time
        compiled = compile_kernel(launch.kernel, ("cuda", 90))
        assert compiled.metadata.shared <= 227 * 1024
        assert "spill" not in compiled.asm["ptx"]  # ptxas's -v is not kept; no local spill slots either
        assert ".local" not in compiled.asm["ptx"], launch.kernel.name


def test_a_width_not_a_power_of_two_with_a_row_reduction_says_why_it_is_not_a_kernel():
    """LayerNorm over 384 columns needs every column in one program: no split, so the scan runs
    one step at a time, and the warning says so."""
    import sys

    import torch

    from tidal.diagnostics import TidalPerformanceWarning

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import make_cell

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu_function(import_program(make_cell("ln_lstm", 384, "cpu", "scan"), (torch.randn(4, 32, 384),)))
    slow = [str(c.message) for c in caught if issubclass(c.category, TidalPerformanceWarning)]
    assert len(slow) == 1 and "its widths [384" in slow[0] and "a row reduction needs every column" in slow[0], slow


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_modules_train_as_row_kernels(gpu_programs_of_torch_compile, kind):
    """nn.LSTM / nn.GRU (2 layers, bidirectional) inside compiled code: each layer and direction
    is a scan (`tidal.importer.rnn`) whose forward and adjoint are one row kernel each. The
    adjoint's weight cotangent, accumulated as (p_tᵀ·h_t)ᵀᵀ (weights stored [4H, H]), leaves the
    loop (`tidal-scan-contractions`), so the adjoint step no longer mixes batch rows."""
    import torch

    module = getattr(torch.nn, kind)(32, 32, num_layers=2, bidirectional=True)
    xs = torch.randn(8, 16, 32, requires_grad=True)
    torch._dynamo.reset()
    with warnings.catch_warnings(), torch._dynamo.config.patch(allow_rnn=True):
        warnings.simplefilter("ignore")
        torch.compile(module, backend="tidal", options={"fallback": "warn"})(xs)[0].sum().backward()
    forward, backward = gpu_programs_of_torch_compile
    for program in (forward, backward):
        rows = [k for k in program.kernels_for_emit() if "scan_rows" in k.name]
        assert len(rows) == 4, [k.name for k in program.kernels_for_emit()]


def _carry_halves_swapped(h0, xs, u):
    from torch._higher_order_ops import scan

    import torch

    def step(h, x):
        left, right = h.chunk(2, dim=-1)
        h = torch.tanh(x + torch.cat([right, left], -1) @ u)
        return h, h.clone()

    return scan(step, h0, xs)


def test_a_step_slicing_its_carry_is_one_row_kernel():
    """Registers cannot slice a tile: a step reading column slices of its carry (and a concat of
    them as a matmul's left-hand side) copies the carry to shared memory and reads the slices
    back, inside the one row kernel."""
    import torch

    program = _traced_gpu_program(_carry_halves_swapped, torch.zeros(16, 32), torch.randn(6, 16, 32), torch.randn(32, 32) * 0.1)
    kernels = program.kernels_for_emit()
    assert [k.name for k in kernels] == ["tidal_scan_rows_1"], [k.name for k in kernels]
    ttgir = kernel_asm(kernels[0], "ttgir", ("cuda", 90))
    assert ttgir.count("ttg.memdesc_subslice", ttgir.index("scf.for")) == 2, ttgir
    assert f".entry {kernels[0].name}(" in kernel_asm(kernels[0], "ptx", ("cuda", 90))


def _wide_two_matrix_scan(h0, xs, u1, u2):
    from torch._higher_order_ops import scan

    import torch

    def step(h, x):
        h = torch.tanh(x + h @ u1)
        # through tanh: a product only stacked (h @ u2) would leave the loop (tidal-scan-contractions)
        return h, torch.tanh(h @ u2)

    return scan(step, h0, xs)


def test_row_kernel_whose_weights_exceed_the_registers_is_left_to_triton():
    """U1 [128, 128] and U2 [128, 32] take 160 KiB as TF32 parts: more than the registers of the
    kernel's 4 warps hold (64 KiB; its narrowest tile is 32 wide), within shared memory. The kernel
    stays TTIR (Triton places the weights in shared memory) and compiles."""
    import torch

    args = (torch.randn(16, 128), torch.randn(4, 16, 128), torch.randn(128, 128) * 0.05, torch.randn(128, 32) * 0.05)
    program = _traced_gpu_program(_wide_two_matrix_scan, *args)
    rows = [k for k in program.kernels_for_emit() if "scan_rows" in k.name]
    assert len(rows) == 1 and rows[0].stage == "ttir", [(k.name, k.stage) for k in program.kernels_for_emit()]
    ttir = kernel_asm(rows[0], "ttir", ("cuda", 90))
    assert ttir.count("tt.dot") == 2 and "tf32x3" in ttir
    assert ".entry" in kernel_asm(rows[0], "ptx", ("cuda", 90))


def cond_clamp(x):
    """bench/cases.py's cond_clamp: two `any` reductions over x, then a select on their `|`."""
    import torch

    return torch.cond(x.isnan().any() | x.isinf().any(), lambda t: torch.nan_to_num(t, 0.0, 1e4, -1e4), lambda t: t.clone(), (x,))


def _traced_gpu_program(fn, *inputs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gpu_function(import_program(fn, inputs))


@pytest.mark.parametrize("width,mixes_rows,why", [
    (64, False, None),
    (100, False, r"its carries' widths \[100\] are neither powers of two of at least 16 nor multiples of 16 with an "
                 r"odd factor of at most 7"),
    (64, True, r"its step makes a tensor that is not one row per batch row \(a reduction over the batch"),
])
def test_a_scan_run_one_step_at_a_time_warns_at_the_users_line_saying_why(width, mixes_rows, why):
    """A scan the GPU runs as a loop of launches (no row kernel) is a performance warning at the
    scan's line naming the reason; a row-kernel scan warns of nothing."""
    import torch
    from torch._higher_order_ops import scan

    from tidal.diagnostics import TidalPerformanceWarning

    class RNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(width, width) / width ** 0.5)

        def forward(self, h0, xs):
            def step(h, x):
                h = torch.tanh(x + h @ self.w)
                if mixes_rows:
                    h = h - h.mean(0)
                return h, h.clone()

            return scan(step, h0, xs)  # SCAN_LINE

    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith("# SCAN_LINE"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu_function(import_program(RNN(), (torch.zeros(8, width), torch.randn(5, 8, width))))
    slow = [str(c.message) for c in caught if issubclass(c.category, TidalPerformanceWarning)]
    if why is None:
        assert not slow, slow
        return
    assert len(slow) == 1, slow
    assert re.search(rf"test_gpu_lowering.py:{line}:\d+: warning: tidal runs this scan on the GPU one step at a time .*{why}", slow[0]), slow


def test_compile_workers_fill_tritons_disk_cache_for_the_launching_process(tmp_path, monkeypatch):
    """Kernels a worker process compiled load in this process without being parsed here (a
    Triton cache hit), and the C launcher asked for is in the cache; a kernel no worker compiled
    is parsed here (the counter can move); a kernel the worker cannot compile comes back with
    the reason."""
    import torch

    from tidal.backends.gpu import compile_worker
    from tidal.backends.gpu.compile_pool import CompilePool
    from tidal.backends.gpu.triton_compile import compile_kernel, kernel_text
    from tidal.backends.gpu.ttir import Kernel
    from triton.backends.compiler import GPUTarget

    cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    # a libcuda with no symbols: enough for Triton to build (not load) a kernel's C launcher here
    stub = tmp_path / "cuda"
    stub.mkdir()
    (stub / "stub.c").write_text("int tidal_stub;\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(stub / "libcuda.so.1"), str(stub / "stub.c")], check=True)
    (stub / "libcuda.so").symlink_to("libcuda.so.1")
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(stub))
    kernels = _traced_gpu_program(lambda x: (x.exp().sum(1), x.amax(0), torch.tanh(x) * 3), torch.randn(48, 24)).kernels_for_emit()
    assert len(kernels) == 3
    target = GPUTarget("cuda", 90, 32)
    pool = CompilePool(2)
    try:
        futures = [pool.submit(k, ("cuda", 90), kernel_text(k, target), launcher=n == 1) for n, k in enumerate(kernels[:2])]
        broken = pool.submit(Kernel("broken", "tt.func @broken( {", {}), ("cuda", 90), "tt.func @broken( {")
        assert [f.result(timeout=120) for f in futures] == [None, None]
        assert broken.result(timeout=120)
    finally:
        pool.close()
    assert len(list(cache.glob("*/__triton_launcher*"))) == 1  # the launcher asked for, built
    parsed = compile_worker.parsed
    for k in kernels[:2]:
        assert compile_kernel(k, ("cuda", 90)).asm["cubin"]
    assert compile_worker.parsed == parsed
    compile_kernel(kernels[2], ("cuda", 90))
    assert compile_worker.parsed == parsed + 1


def test_a_dead_compile_worker_answers_every_job_and_warns_once():
    """Workers killed: each job still gets an answer (the launch compiles it in-process), one
    warning says the first calls are slower and how to turn the workers off."""
    from tidal.backends.gpu.compile_pool import CompilePool
    from tidal.backends.gpu.ttir import Kernel

    pool = CompilePool(2)
    for worker in pool._workers:
        worker.kill()
        worker.wait()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        futures = [pool.submit(Kernel(f"k{n}", "", {}), ("cuda", 90), "") for n in range(5)]
        answers = [f.result(timeout=60) for f in futures]
    pool.close()
    assert all("compile worker" in a for a in answers), answers
    assert [str(w.message) for w in caught if "compile worker exited" in str(w.message)][:1] and \
        len([w for w in caught if "compile worker exited" in str(w.message)]) == 1


def test_compile_workers_setting(monkeypatch):
    """TIDAL_COMPILE_WORKERS: 0 means none (kernels compile in the launching process), a word is
    a clear error naming the setting; unset, one worker a CPU up to eight."""
    from tidal.backends.gpu import compile_pool

    monkeypatch.setenv("TIDAL_COMPILE_WORKERS", "0")
    assert compile_pool.worker_count() == 0 and compile_pool.shared_pool() is None
    monkeypatch.setenv("TIDAL_COMPILE_WORKERS", "many")
    with pytest.raises(ValueError, match="TIDAL_COMPILE_WORKERS='many'"):
        compile_pool.worker_count()
    monkeypatch.delenv("TIDAL_COMPILE_WORKERS")
    monkeypatch.setattr(compile_pool.os, "cpu_count", lambda: 64)
    assert compile_pool.worker_count() == compile_pool.MOST_WORKERS


def test_a_programs_kernels_go_to_the_compile_workers_once_before_its_first_launch(monkeypatch):
    """The first kernel a launch needs on a GPU hands the program's other kernels to the workers
    (once), waits for its own, then loads it here; a program of one kernel compiles it here."""
    from concurrent.futures import Future

    import torch

    import tidal.backends.gpu.launch as launch

    submitted, compiled_here = [], []

    class Pool:
        def submit(self, kernel, target, text, launcher=False):
            submitted.append((kernel.name, target, launcher))
            done = Future()
            done.set_result(None)
            return done

    monkeypatch.setattr(launch.compile_pool, "shared_pool", lambda: Pool())
    monkeypatch.setattr(launch, "compile_kernel", lambda kernel, device=None: compiled_here.append(kernel.name) or kernel.name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    program = _traced_gpu_program(lambda x: (x.exp().sum(1), x.amax(0), torch.tanh(x) * 2), torch.randn(64, 32))
    kernels = program.kernels_for_emit()
    launcher = program.launcher
    launcher.device = 0
    assert launcher.compiled(kernels[1]) == kernels[1].name
    assert submitted == [(k.name, ("cuda", 90), True) for k in kernels] and compiled_here == [kernels[1].name]
    assert launcher.compiled(kernels[0]) == kernels[0].name and len(submitted) == 3
    submitted.clear()
    single = _traced_gpu_program(lambda x: x * 2 + 1, torch.randn(64, 32))
    single.launcher.device = 0
    single.launcher.compiled(single.kernels_for_emit()[0])
    assert not submitted


def test_sibling_reductions_are_one_kernel_reading_their_operand_once():
    """cond_clamp's isnan().any() and isinf().any() both reduce x: ONE split-reduction kernel
    whose loop loads x once and writes both partials, then the select kernel."""
    import torch

    program = _traced_gpu_program(cond_clamp, torch.randn(256, 256))
    kernels = program.kernels_for_emit()
    assert [re.sub(r"_\d+.*", "", k.name) for k in kernels] == ["tidal_reduce", "tidal_generic"], [k.name for k in kernels]
    ttir = kernel_asm(kernels[0], "ttir", ("cuda", 90))
    partials = ttir[: ttir.index("gpu.barrier")]
    assert partials[partials.index("scf.for"):].count("tt.load") == 1, ttir
    assert partials.count("tt.store") == 2  # one partial per `any`
    assert partials.count('"tt.reduce"') == 2 and partials.index('"tt.reduce"') > partials.index("scf.yield")  # after the loop only


def test_split_reduction_folds_its_partials_in_its_last_program(monkeypatch):
    """The program arriving last (an acq_rel atomic counter, after a CTA barrier that orders the
    partial stores before it) folds every partial with volatile loads and writes the result: no
    ATen reduction, binary op or fill kernel after the reduction. The initial values of a
    reduction whose out is a constant fill are a literal in the kernel; other outs are read."""
    import torch
    import tidal.backends.gpu.plan as gpu_program

    program = _traced_gpu_program(cond_clamp, torch.randn(256, 256))
    reduce = program.kernels_for_emit()[0]
    assert "init0" not in reduce.signature and {"res0", "res1", "arrivals"} <= set(reduce.signature)
    ttir = kernel_asm(reduce, "ttir", ("cuda", 90))
    barrier, atomic = ttir.index("gpu.barrier"), ttir.index("tt.atomic_rmw add, acq_rel, gpu")
    fold = ttir[ttir.index("scf.if", atomic):]
    assert barrier < atomic and fold.count("isVolatile = true") == 2 and fold.count("tt.store") == 3  # 2 results, the counter
    ptx = kernel_asm(reduce, "ptx", ("cuda", 90))
    assert "atom.global.gpu.acq_rel.add" in ptx and "ld.volatile.global" in ptx

    monkeypatch.setattr(gpu_program, "_folded_fill_literal", lambda value: None)
    loaded = _traced_gpu_program(lambda x: x.sum(-1), torch.randn(64, 3000)).kernels_for_emit()[0]
    assert "init0" in loaded.signature
    assert "ld.volatile.global" in kernel_asm(loaded, "ptx", ("cuda", 90))


def _ptx_facts(kernel) -> tuple[set[str], int]:
    """The kinds of global loads and stores of a kernel's sm_90 PTX, and its integer div/rem count."""
    ptx = kernel_asm(kernel, "ptx", ("cuda", 90))
    return set(re.findall(r"(?:ld|st)\.global[\w.]*", ptx)), len(re.findall(r"\b(?:div|rem)\.[su]", ptx))


def test_contiguous_kernels_use_flat_offsets_and_vector_loads():
    """On contiguous operands of one shape (numel a multiple of 16) the elementwise kernel and the
    reduction read each element at its flat position: no div/rem by the sizes in the PTX, and
    128-bit loads (the select kernel's stores too); the 0-d predicates are one scalar load each."""
    import torch

    program = _traced_gpu_program(cond_clamp, torch.randn(256, 256))
    reduce, select = program.kernels_for_emit()
    assert reduce.name.endswith("_flat16") and select.name.endswith("_flat16")
    for kernel in (reduce, select):
        accesses, div_rem = _ptx_facts(kernel)
        assert div_rem == 0, kernel.name
        assert "ld.global.v4.b32" in accesses, (kernel.name, accesses)
    assert "st.global.v4.b32" in _ptx_facts(select)[0]
    assert select.text.count("tt.load %in0 : !tt.ptr<i8>") == 1 and select.text.count("tt.load %in1 : !tt.ptr<i8>") == 1


def test_broadcast_operands_keep_the_strided_kernel():
    """A row vector broadcast over a matrix is not read at flat positions: the kernel addresses
    it through its strides (div/rem recover the indices)."""
    import torch

    program = _traced_gpu_program(lambda x, v: x * v, torch.randn(64, 32), torch.randn(32))
    (kernel,) = program.kernels_for_emit()
    assert "_flat" not in kernel.name
    assert _ptx_facts(kernel)[1] > 0


def test_the_flat_variant_needs_contiguous_aligned_operands():
    """The launch-time choice of the variant (`_layout`): a transposed or a misaligned operand
    gets the strided kernel, a numel not a multiple of 16 the flat one without the promise; an
    elementwise kernel whose operands share one dense layout is flat whatever its dim order."""
    import torch

    from tidal.backends.gpu.variants import _layout

    assert _layout([True], [torch.empty(64, 32)], 2048) == (True, True)
    assert _layout([True], [torch.empty(64, 32)], 2047) == (True, False)
    assert _layout([True], [torch.empty(32, 64).t()], 2048) == (False, False)
    assert _layout([True], [torch.empty(2049)[1:]], 2048) == (False, False)
    assert _layout([False], [torch.empty(2049)[1:]], 2048) == (True, True)  # one element: a scalar load
    assert _layout(None, [torch.empty(64, 32)], 2048) == (False, False)
    # an elementwise kernel: operands all transposed alike are read flat too; a mix is not
    t = torch.empty(4, 64, 32).transpose(0, 1)
    assert _layout([True, True], [t, torch.empty(4, 64, 32).transpose(0, 1)], 8192, any_dense_order=True) == (True, True)
    assert _layout([True, True], [t, torch.empty(64, 4, 32)], 8192, any_dense_order=True) == (False, False)
    assert _layout([True], [t[1:]], 7936, any_dense_order=True) == (False, False)  # gaps between its rows
    assert _layout([True], [t], 8192) == (False, False)


class _WideRNN:
    """An RNN step `tanh(x + h U + b)` of width H, optionally post-normalized (a LayerNorm: row
    reductions, which need every column of a row in one program)."""

    @staticmethod
    def make(h, normalized=False):
        import torch
        import torch.nn.functional as F
        from torch._higher_order_ops import scan

        class RNN(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.U = torch.nn.Parameter(torch.randn(h, h) * h**-0.5)
                self.b = torch.nn.Parameter(torch.zeros(h))

            def forward(self, h0, xs):
                def step(carry, x):
                    new = torch.tanh(x + carry @ self.U + self.b)
                    new = F.layer_norm(carry + new, (h,)) if normalized else new
                    return new, new.clone()

                return scan(step, h0, xs)

        torch.manual_seed(0)
        return RNN()


def _row_scan_launches(monkeypatch, fn, *inputs):
    """The row kernels' launches (`RowScanLaunch`) of fn's GPU program, and the program's kernels."""
    import tidal.backends.gpu.plan as plan

    launches, made = [], plan.row_scan_kernel
    monkeypatch.setattr(plan, "row_scan_kernel", lambda *a: launches.append(made(*a)) or launches[-1])
    program = _traced_gpu_program(fn, *inputs)
    return [x for x in launches if not isinstance(x, str)], program.kernels_for_emit()  # a str: why there is none


@pytest.mark.parametrize("h,rows,block_rows,parts,weights", [
    (256, 40, 16, 8, "resident"), (512, 40, 16, 8, "resident_f32"), (256, 1024, 32, 2, "resident_f32"),
    (1024, 16, 16, 32, "resident_f32"), (1024, 40, None, None, None)])
def test_weights_past_shared_memory_are_split_among_programs(monkeypatch, h, rows, block_rows, parts, weights):
    """An RNN whose U (TF32 high and low parts: 8·H² bytes) passes shared memory is split by
    columns among `parts` programs a block of rows (8 if they fit), each keeping U's columns of
    its share of h in shared memory for the whole loop (their TF32 parts, or their f32 values
    split a K chunk at a time where the parts would not fit) with room for h, which it reads back
    a chunk at a time; every step each stores its columns of h, the programs meet at a counter in
    global memory (acq_rel arrival, acquire polls) and each reads the whole h back from L2 (.cg)
    for its product. The grid stays within half the SMs (all of a block's programs must run at
    once): 1024 rows take blocks of 32 rows in 2 parts. With H = 1024 and 40 rows no split fits
    227 KiB (a block of 64 rows would hold 256 KiB of h): the host loop."""
    import torch

    from tidal.backends.gpu.triton_compile import compile_kernel

    launches, kernels = _row_scan_launches(monkeypatch, _WideRNN.make(h), torch.zeros(rows, h), torch.randn(8, rows, h))
    if parts is None:
        assert not launches and kernels, [k.name for k in kernels]
        return
    (launch,) = launches
    assert (launch.block_rows, launch.parts, launch.weights) == (block_rows, parts, weights)
    assert launch.grid == (-(-rows // block_rows), parts, 1) and launch.kernel.num_warps == min(8, block_rows // 16 * (h // parts // 8))
    assert launch.arrivals == launch.grid[0]  # one exchange a step: h
    assert launch.exchange_floats == 2 * rows * h  # two buffers of h, by the step's parity
    ptx = kernel_asm(launch.kernel, "ptx", ("cuda", 90))
    loop = ptx[ptx.index("$L__BB0_"):]
    assert "atom.global.gpu.acq_rel.add" in loop and "ld.global.gpu.acquire" in loop and "ld.global.cg" in loop, loop
    assert "ld.shared" in loop and "ld.global.f32" not in loop.replace("ld.global.cg", ""), loop  # U from shared memory
    ttgir = kernel_asm(launch.kernel, "ttgir", ("cuda", 90))
    dots = re.findall(rf"tt\.dot .* -> tensor<{block_rows}x{h // parts}xf32", ttgir)  # its share of the columns
    assert len(dots) == 3 * (h // 16), ttgir  # three TF32 products a K chunk
    assert compile_kernel(launch.kernel, ("cuda", 90)).metadata.shared <= 227 * 1024


@pytest.mark.parametrize("h", [256, 512])
def test_weights_past_shared_memory_are_streamed_up_to_a_limit(monkeypatch, h):
    """A step that cannot be split by columns (a LayerNorm reads every column of a row) whose U
    passes shared memory: with H = 256 (512 KiB as TF32 parts) the row kernel streams U from L2
    at every step, a K chunk of 16 rows at a time (the left-hand side read back from shared
    memory a chunk at a time), within an SM's 227 KiB. With H = 512 (1 MiB of f32) streaming was
    measured slower than the host loop, which it takes; its kernels compile."""
    import torch

    launches, kernels = _row_scan_launches(monkeypatch, _WideRNN.make(h, normalized=True), torch.zeros(32, h),
                                           torch.randn(8, 32, h))
    if h == 512:
        assert not launches and kernels, [k.name for k in kernels]
        for k in kernels:
            assert f".entry {k.name}(" in kernel_asm(k, "ptx", ("cuda", 90))
        return
    from tidal.backends.gpu.triton_compile import compile_kernel

    (launch,) = launches
    assert launch.parts == 1 and launch.weights == "streamed"
    ttgir = kernel_asm(launch.kernel, "ttgir", ("cuda", 90))
    loop = ttgir[ttgir.index("scf.for"):]
    assert len(re.findall(r"tt\.load %\w+ : tensor<16x256x!tt\.ptr<f32>", loop)) == h // 16, loop  # U's chunks, in the loop
    assert "ttg.memdesc_subslice" in loop
    assert compile_kernel(launch.kernel, ("cuda", 90)).metadata.shared <= 227 * 1024


def test_a_tensor_past_32_bit_offsets_is_refused_with_its_source_line():
    """Every GPU kernel indexes with 32-bit offsets: a launch whose tensor spans 2^31 elements or
    more (by its size, or by its strides: one column of a wide matrix) raises with the op's
    source line instead of reading wrapped-around addresses; a broadcast (stride 0) is fine.
    Meta tensors: shapes and strides without memory."""
    import torch

    from tidal.backends.gpu.launch import _launch
    from tidal.diagnostics import TidalUnsupported

    launched = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args: launched.append((grid, len(args)))

    program = _gpu_program(CORPUS / "s5_linear_recurrence.py")
    (op,) = [o for o in _walk(program.module.operation) if o.name == "tidal.associative_scan"]
    fine = [torch.empty(4096, 16, device="meta"), torch.empty(1, device="meta").expand(1 << 32), 7]
    _launch(Kernel(), (3, 1, 1), fine, op)
    assert launched == [((3, 1, 1), 3)]
    for tensor in (torch.empty(1 << 31, dtype=torch.uint8, device="meta"), torch.empty(1 << 16, 1 << 16, device="meta")[:, 0]):
        with pytest.raises(TidalUnsupported, match="32-bit offsets") as raised:
            _launch(Kernel(), (1, 1, 1), [tensor], op)
        assert re.match(r".*s5_linear_recurrence\.py:\d+:\d+: error: GPU backend: a tensor of shape", raised.value.format())
    assert len(launched) == 1


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_kernels_compute_in_float32_and_compile(dtype):
    """float16/bfloat16 programs reach the GPU with their rounding ops in float32 (extf, the op,
    truncf: tidal/importer/reduced_precision.py): a sum accumulates in f32 and tanh finds its f32
    lowering. A max, which rounds nothing, stays in the narrow type, its identity the narrow
    type's -inf (an f32 bit pattern there was out of range: Triton refused the kernel)."""
    import torch

    def f(x):
        return torch.tanh(x).sum(0), x.amax(0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = gpu_function(import_program(f, (torch.rand(4096, 8, dtype=getattr(torch, dtype)),)))
    narrow, minus_inf = {"bfloat16": ("bf16", "0xFF80"), "float16": ("f16", "0xFC00")}[dtype]
    kernels = program.kernels_for_emit()
    loops = {k.name: re.search(r"scf\.for .* -> \(tensor<[0-9x]+x(\w+)>\)", k.text) for k in kernels}
    (total,) = [k for k in kernels if "arith.addf" in k.text and loops[k.name]]
    assert loops[total.name].group(1) == "f32", total.text
    (maximum,) = [k for k in kernels if "arith.maximumf" in k.text]
    assert loops[maximum.name].group(1) == narrow and f"dense<{minus_inf}> : tensor<1x2048x{narrow}>" in maximum.text
    for kernel in kernels:
        assert f".entry {kernel.name}(" in kernel_asm(kernel, "ptx", ("cuda", 90))


CHUNKED_CE_BY_VOCABULARY = '''
import torch
from torch._higher_order_ops import scan


def model(h, W_chunks, target):
    """Cross-entropy over vocabulary chunks: a running logsumexp (max m, sum-exp s) and the
    target's logit gathered from the chunk that holds it (a clamped local index)."""
    n, V = h.shape[0], W_chunks.shape[2]

    def step(carry, W):
        m, s, target_logit, offset = carry
        logits = h @ W
        m_new = torch.maximum(m, logits.amax(-1))
        s = s * torch.exp(m - m_new) + torch.exp(logits - m_new[:, None]).sum(-1)
        local = target - offset
        picked = logits.gather(1, local.clamp(0, V - 1)[:, None]).squeeze(1)
        target_logit = target_logit + torch.where((local >= 0) & (local < V), picked, torch.zeros_like(picked))
        return (m_new, s, target_logit, offset + V), m_new.clone()

    init = (torch.full((n,), float("-inf")), torch.zeros(n), torch.zeros(n), torch.zeros((), dtype=torch.long))
    (m, s, target_logit, _), _ = scan(step, init, W_chunks)
    return (m + s.log() - target_logit).mean()


torch.manual_seed(0)
example_inputs = (torch.randn(32, 16), torch.randn(8, 16, 64), torch.randint(0, 512, (32,)))
'''


@pytest.fixture
def chunked_ce_file(tmp_path):
    path = tmp_path / "chunked_ce_by_vocabulary.py"
    path.write_text(CHUNKED_CE_BY_VOCABULARY)
    return path


def test_gather_in_a_scan_step_compiles_for_sm90(chunked_ce_file):
    """torch-mlir's gather leaves its index-bounds check as a linalg.generic with no outputs (a
    body of cf.asserts): the host plan took outs[0] of it ('IndexError: list index out of
    range'). Kernels drop those checks, so the generic runs nothing."""
    done = subprocess.run(
        [sys.executable, "-m", "tidal.tools.tidal_compile", str(chunked_ce_file), "--emit", "ttir", "--target", "cuda:90"],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    program = _gpu_program(chunked_ce_file)
    for kernel in program.kernels_for_emit():
        assert f".entry {kernel.name}(" in kernel_asm(kernel, "ptx", ("cuda", 90))


def test_an_internal_error_of_the_gpu_lowering_names_the_op_line(chunked_ce_file, monkeypatch, capsys):
    """A case the kernel builder does not handle (here: made to fail) is a located error, with
    the user's line of the op: tidal-compile prints FILE:LINE:COL: error and exits 1 (under
    torch.compile, the fallback names the same line)."""
    from tidal.backends.gpu import kernels
    from tidal.tools import tidal_compile

    def broken(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(kernels, "generic_kernel", broken)
    assert tidal_compile.main([str(chunked_ce_file), "--emit", "ttir", "--target", "cuda:90"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    found = re.search(
        r"chunked_ce_by_vocabulary\.py:(\d+):\d+: error: GPU backend: internal error lowering 'linalg\.generic' "
        r"\(IndexError: list index out of range\)", err)
    assert found, err
    lines = CHUNKED_CE_BY_VOCABULARY.splitlines()
    first, last = lines.index("def model(h, W_chunks, target):") + 1, lines.index("    return (m + s.log() - target_logit).mean()") + 1
    assert first < int(found.group(1)) <= last, err  # a line of the model, not the file's 1:1


@pytest.mark.parametrize("pad", [(1, 2, 0, 1), (0, 3), (2, 0, 1, 1, 1, 0)], ids=lambda p: "_".join(map(str, p)))
def test_a_constant_pad_is_masked_loads_fused_with_its_neighbours(pad):
    """`tidal-pad-as-generic`: a constant pad is a generic reading its source at clamped indices
    under a mask, fused with the elementwise ops after it (one kernel, no ATen call). Its values
    are checked by running the rewritten linalg through the CPU backend against eager."""
    import torch
    import torch.nn.functional as F

    from tidal.compiler import lower
    from tidal.passes import run_pipeline
    from tidal.runtime import NativeFunction, signature_of

    def f(x):
        return (F.pad(x, pad, value=0.5).sin() * 2,)

    x = torch.randn(2, 3, 4, 5)
    program = _traced_gpu_program(f, x)
    assert _aten_calls(program) == [] and len(program.kernels_for_emit()) == 1
    assert "tt.load" in program.kernels_for_emit()[0].text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = import_program(f, (x,))
    lower(prog.module, prog.context, "linalg")
    with prog.context:
        run_pipeline(prog.module.operation, "builtin.module(tidal-pad-as-generic)", prog.context)
        assert "tensor.pad" not in str(prog.module)
        args, results = signature_of(prog.module, prog.func_name)
    lower(prog.module, prog.context, "llvm", start="linalg")
    with prog.context:
        native = NativeFunction.from_llvm_module(prog.module, prog.func_name, args, results)
    torch.testing.assert_close(native(x)[0], f(x)[0])


def test_staged_capture_copies_only_what_it_can_and_when_it_pays():
    """A call with new buffers replays a capture over private copies only where a copy into the
    private layout is exact (no expanded or gapped view) and copying costs less than a quarter of
    the host time of the plan (a host loop of kernels, not one launch)."""
    import torch

    from tidal.backends.gpu.program import _dense, _worth_staging

    base = torch.zeros(3, 4)
    assert _dense(base) and _dense(base.t()) and _dense(torch.zeros(2, 1, 3)) and _dense(torch.zeros(0, 3))
    assert not _dense(torch.zeros(1, 4).expand(3, 4)) and not _dense(base[:, :2])
    activations = [torch.zeros(128, 32, 512, device="meta")]  # 8 MiB on a device: 8 us at 1 TB/s and a launch
    assert _worth_staging(activations, host_s=60e-3)  # an LSTM's host loop: 60 ms
    assert not _worth_staging(activations, host_s=50e-6)  # one kernel's launch


def test_a_linear_recurrence_written_as_a_scan_step_is_the_associative_scan_kernel(gpu_programs_of_torch_compile):
    """h = exp(g_t) h + x_t as a `scan` step becomes what its `associative_scan` form is
    (`tidal-affine-scans`): ONE `tt.scan` kernel (the exp computed inside it), not the
    sequential row kernel walking the steps one by one."""
    import torch
    from torch._higher_order_ops import scan

    def by_scan(g, x):
        def step(h, gx):
            h = gx[0].exp() * h + gx[1]
            return h, h.clone()

        return scan(step, torch.zeros_like(x[:, 0]), (g, x), dim=1)[1]

    # a second length: Dynamo's graph of dynamic length takes the same form
    _compile_on_cpu_for_the_gpu(by_scan, [(torch.randn(2, 64, 16), torch.randn(2, 64, 16)),
                                          (torch.randn(2, 40, 16), torch.randn(2, 40, 16))])
    assert len(gpu_programs_of_torch_compile) == 2
    for program in gpu_programs_of_torch_compile:
        kernels = program.kernels_for_emit()
        assert not [k.name for k in kernels if "scan_rows" in k.name], [k.name for k in kernels]
        assert len([k for k in kernels if "tt.scan" in k.text]) == 1, [k.name for k in kernels]
        for kernel in kernels:
            assert f".entry {kernel.name}(" in kernel_asm(kernel, "ptx", ("cuda", 90))


def test_an_elementwise_gate_is_computed_inside_the_scan_kernel(gpu_programs_of_torch_compile):
    """h_t = a_t h_{t-1} + x_t with a_t = 0.9 sigmoid(g_t) made by an elementwise generic: the scan
    kernel loads g and applies the gate in registers (`ScanPrologue`), so the forward is one
    kernel and a_t never goes through memory; both scan forms compile. Where the gate is a result
    too, its own kernel still writes it (and the scan recomputes it from g)."""
    import torch
    from torch._higher_order_ops import associative_scan

    from tidal.backends.gpu import kernels as K
    from tidal.backends.gpu.plan import _scan_prologue

    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    def gated(g, x):
        return associative_scan(combine, (torch.sigmoid(g) * 0.9, x), dim=1, combine_mode="generic")[1]

    def gated_and_gate(g, x):
        a = torch.sigmoid(g) * 0.9
        return associative_scan(combine, (a, x), dim=1, combine_mode="generic")[1], a

    _compile_on_cpu_for_the_gpu(gated, [(torch.randn(2, 64, 16), torch.randn(2, 64, 16))])
    (program,) = gpu_programs_of_torch_compile
    (kernel,) = program.kernels_for_emit()
    assert "tt.scan" in kernel.text and "%x0_0:" in kernel.text and "%x0:" not in kernel.text
    assert "linalg.generic" not in [op.operation.name for op in program.plan.ops]
    (op,) = [o for o in _walk(program.module.operation) if o.name == "tidal.associative_scan"]
    prologues = tuple(f[0] if f else None for f in (_scan_prologue(v) for v in list(op.operands)))
    assert prologues[0] is not None and prologues[1] is None
    for built in (K.scan_kernel(op, "rows", 64, 16, live=(False, True), prologues=prologues),
                  K.lookback_scan_kernel(op, "look_back", 512, 16, 32, live=(False, True), prologues=prologues)):
        assert f".entry {built.name}(" in kernel_asm(built, "ptx", ("cuda", 90))

    gpu_programs_of_torch_compile.clear()
    _compile_on_cpu_for_the_gpu(gated_and_gate, [(torch.randn(2, 64, 16), torch.randn(2, 64, 16))])
    (program,) = gpu_programs_of_torch_compile
    assert "linalg.generic" in [op.operation.name for op in program.plan.ops]
    assert len(program.kernels_for_emit()) == 2


def test_linear_recurrence_adjoint_reads_its_shifted_operand_and_writes_its_cotangent_in_place(
        gpu_programs_of_torch_compile):
    """The adjoint of a linear recurrence scans (a_{t+1}, h̄_t) in reverse: `cat([a[1:], 0])`
    has no step of its own, the scan kernel loads a one row on (`ScanShift`), and x̄'s
    `cat([G_0, tail])` gets the tail written where it goes by the kernel making it
    (`_concat_slot`): neither concat copies a pass over memory. Both scan kernels compile."""
    import torch
    from torch._higher_order_ops import associative_scan

    from tidal.backends.gpu import kernels as K
    from torch_mlir import ir

    from tidal.backends.gpu.plan import _concat_slot, _shifted_operand

    def gated(g, x):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (g.exp(), x), dim=1,
                                combine_mode="generic")[1]

    torch._dynamo.reset()
    g, x = torch.randn(2, 64, 16, requires_grad=True), torch.randn(2, 64, 16, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(gated, backend="tidal", fullgraph=True, options={"fallback": "warn"})(g, x).sum().backward()
    backward = gpu_programs_of_torch_compile[1]
    ops = list(_walk(backward.module.operation))
    (scan,) = [o for o in ops if o.name == "tidal.associative_scan"]
    shifts = [_shifted_operand(v, 0) for v in list(scan.operands)]
    assert shifts[0] is not None and shifts[0][1] == K.ScanShift(1, "0.000000e+00") and shifts[1] is None
    concats = [o for o in ops if o.name == "tensor.concat"]
    planned = [o for o in backward.plan.ops if o.operation.name == "tensor.concat"]
    assert len(concats) == 2 and len(planned) == 1, [o.name for o in ops]
    (tail,) = [p for p in planned[0].operands if not isinstance(p.owner, ir.Block) and p.owner.name == "linalg.generic"]
    assert _concat_slot(tail) is not None
    (kernel,) = [k for k in backward.kernels_for_emit() if "tt.scan" in k.text]
    assert "%x0:" in kernel.text and f".entry {kernel.name}(" in kernel_asm(kernel, "ptx", ("cuda", 90))
    prologues = tuple(sh[1] if sh else None for sh in shifts)
    look_back = K.lookback_scan_kernel(scan, "look_back", 512, 16, 32, live=(False, True), prologues=prologues)
    assert f".entry look_back(" in kernel_asm(look_back, "ptx", ("cuda", 90))


def test_a_scan_reads_its_operands_in_place_where_their_columns_form_two_runs():
    """`_in_place_layout`: a [B, T, D] operand scanned along T is read where it is (row stride D,
    runs of D columns B·T·D... apart); blocks of columns inside one run of D are one base plus a
    range (unit runs), others get each column's offset; broadcast (overlapping) operands, operands
    of different strides and three runs are copied contiguous first."""
    import torch

    from tidal.backends.gpu.plan import _in_place_layout

    btd = torch.empty(2, 5, 128).movedim(1, 0)
    assert _in_place_layout([btd, torch.empty_like(btd)], 64) == (128, 128, 1, 640, True)
    assert _in_place_layout([torch.empty(2, 5, 96).movedim(1, 0)], 64) == (96, 96, 1, 480, False)
    assert _in_place_layout([torch.empty(5, 6)], 64) == (6, 6, 1, 6, True)  # contiguous rows: one run
    assert _in_place_layout([torch.empty(2, 3, 5).movedim(2, 0)], 16) == (1, 6, 5, 6, False)  # the last dim
    assert _in_place_layout([torch.empty(5, 3)[:, None].expand(5, 2, 3)], 16) is None
    assert _in_place_layout([btd, btd.contiguous()], 64) is None
    assert _in_place_layout([torch.empty(2, 5, 3, 4).permute(2, 0, 3, 1)], 16) is None


@pytest.mark.parametrize("unit_runs", [True, False])
def test_scan_kernels_of_either_column_addressing_compile_to_ptx(unit_runs):
    from tidal.backends.gpu import kernels as K

    program = _gpu_program(CORPUS / "s5_linear_recurrence.py")
    (op,) = [o for o in _walk(program.module.operation) if o.name == "tidal.associative_scan"]
    for kernel in (K.scan_kernel(op, "rows", 64, 16, unit_runs, live=(False, True)),
                   K.lookback_scan_kernel(op, "look_back", 512, 16, 32, unit_runs, live=(False, True)),
                   K.wide_scan_kernel(op, "wide", 256, 16, unit_runs, live=(False, True))):
        ptx = kernel_asm(kernel, "ptx", ("cuda", 90))
        assert f".entry {kernel.name}(" in ptx
        assert [n for n in ("RS", "CI", "IS", "CS") if f"%{n}" in kernel.text or n in kernel.signature] == ["RS", "CI", "IS", "CS"]


@pytest.mark.parametrize("precision", ["highest", "high"])
def test_row_kernel_products_follow_float32_matmul_precision(monkeypatch, precision):
    """fp32 products as three TF32 products (hi·hi + hi·lo + lo·hi) by default; one TF32 product
    where the user allows TF32 for fp32 matmuls (`torch.set_float32_matmul_precision("high")`, as
    cuBLAS and cuDNN's RNNs then compute), with weights of half the bytes: an LSTM with H = 128
    (256 KiB of TF32 high parts) is split in 2 programs a block instead of 4."""
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import make_cell

    default = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        rnn, _ = _row_scan_launches(monkeypatch, _WideRNN.make(64), torch.zeros(32, 64), torch.randn(8, 32, 64))
        lstm, _ = _row_scan_launches(monkeypatch, make_cell("lstm", 128, "cpu", "scan"), torch.randn(8, 32, 128))
        lstm256, _ = _row_scan_launches(monkeypatch, make_cell("lstm", 256, "cpu", "scan"), torch.randn(8, 64, 256))
    finally:
        torch.set_float32_matmul_precision(default)
    loop = kernel_asm(rnn[0].kernel, "ttgir", ("cuda", 90))
    loop = loop[loop.index("scf.for"):]
    assert loop.count("tt.dot ") == (3 if precision == "highest" else 1), loop
    (launch,) = lstm
    assert (launch.parts, launch.weights) == (8, "resident")  # 64 or 32 KiB of U a program
    ttgir = kernel_asm(launch.kernel, "ttgir", ("cuda", 90))
    assert len(re.findall(r"tt\.dot .* -> tensor<16x16xf32", ttgir)) == 4 * 8 * (3 if precision == "highest" else 1)
    (launch,) = lstm256  # 2 MiB of TF32 parts: 8 programs hold their f32 values (1 MiB high parts: those)
    assert (launch.parts, launch.weights) == (8, "resident_f32" if precision == "highest" else "resident")
