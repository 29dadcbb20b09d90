"""The GPU backend on a GPU (the H100/H200 test machine; CI has none): every corpus program,
compiled strictly by torch.compile(backend="tidal") on CUDA tensors, matches eager PyTorch on
CUDA. On a machine without CUDA these tests are skipped: test_gpu_lowering.py checks there that
the same kernels compile."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

from test_reduced_precision import DTYPE_GENERIC_CORPUS, in_reduced_precision
from tidal.tools.tidal_compile import load_program_file

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU machine)")

CORPUS = Path(__file__).parents[1] / "corpus"
STRICT = {"fallback": "error"}


def _cuda(tree):
    return pytree.tree_map(lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, tree)


def _corpus_on_cuda(path):
    """A corpus program and its example inputs on the GPU, Dynamo's caches reset."""
    model, inputs = load_program_file(str(path))
    if isinstance(model, torch.nn.Module):
        model = model.cuda()
    torch._dynamo.reset()
    return model, _cuda(inputs)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.py")), ids=lambda p: p.stem)
def test_corpus_matches_eager_on_cuda(path):
    model, inputs = _corpus_on_cuda(path)
    # the corpus programs make tensors without naming a device (torch.zeros(...)): CUDA's here
    with warnings.catch_warnings(), torch.no_grad(), torch.device("cuda"):
        warnings.simplefilter("ignore")
        expected = model(*inputs)
        got = torch.compile(model, backend="tidal", fullgraph=True, options=STRICT)(*inputs)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert all(t.device.type == "cuda" for t in pytree.tree_leaves(got) if isinstance(t, torch.Tensor))


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.py")), ids=lambda p: p.stem)
def test_corpus_graph_replays_read_the_inputs_current_values(path):
    """A program without host reads is captured as a CUDA graph when the same buffers come a second
    time and replayed after: after the float inputs change in place the replay must see the new
    values; new buffers get their own capture. Every result against eager (those of a program that
    reads the host come from its plan, as before)."""
    model, inputs = _corpus_on_cuda(path)
    with warnings.catch_warnings(), torch.no_grad(), torch.device("cuda"):
        warnings.simplefilter("ignore")
        compiled = torch.compile(model, backend="tidal", fullgraph=True, options=STRICT)
        compiled(*inputs)
        compiled(*inputs)  # the same buffers again: captured
        for t in pytree.tree_leaves(inputs):
            if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
                t.mul_(0.75)
        torch.testing.assert_close(compiled(*inputs), model(*inputs), rtol=1e-4, atol=1e-4)  # a replay
        fresh = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, inputs)
        for _ in range(3):  # plan, capture, replay
            torch.testing.assert_close(compiled(*fresh), model(*fresh), rtol=1e-4, atol=1e-4)


def _gpu_program(fn, inputs):
    from tidal.compiler import gpu_function
    from tidal.importer import import_program

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gpu_function(import_program(fn, inputs))


def test_what_is_captured_as_a_cuda_graph():
    """The logistic map (a while loop in one kernel, no host read) is captured; a cond whose branch
    reduces reads its predicate on the host: never captured, and its plan stays right."""
    model, cpu_inputs = load_program_file(str(CORPUS / "while_logistic_map.py"))
    program = _gpu_program(model, cpu_inputs)  # exported on the CPU examples, run on CUDA tensors
    inputs = _cuda(cpu_inputs)
    with torch.no_grad():
        first = program(*inputs)
        assert not program._graphs  # buffers met once: no capture
        results = [first, program(*inputs), program(*inputs)]  # captured, then replayed
        expected = model(*inputs)
    assert program._graphs_enabled and program._graphs and all(v is not False for v in program._graphs.values())
    for got in results:
        torch.testing.assert_close(list(got), list(expected))
    batches = [[t.clone() for t in inputs] for _ in range(3)]  # alive together: three sets of buffers
    with torch.no_grad():
        for batch in batches:  # new buffers at every call (a training step's activations): never captured
            program(*batch)
    assert len(program._graphs) == 1

    def branchy(x):
        return torch.cond(x.sum() > 0, lambda x: x.sum(0), lambda x: x.amax(0), (x,))

    program = _gpu_program(branchy, (torch.rand(64, 32),))
    x = torch.rand(64, 32, device="cuda")
    with torch.no_grad():
        for flip in (False, False, True, False):  # the same buffer every call: a capture is tried
            if flip:
                x.neg_()  # the other branch
            torch.testing.assert_close(program(x)[0], branchy(x))
    assert not program._graphs_enabled


def _bench_case(name):
    """(function, inputs of a given size, the dims to mark dynamic) of a bench program on CUDA."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    import cases

    if name == "linear_recurrence":
        return (cases.linear_recurrence("generic"),
                lambda n: ((0.9 + 0.1 * torch.rand(n, 16)).cuda(), torch.randn(n, 16).cuda()), [(0, 0), (1, 0)])
    if name == "rnn_scan":
        return cases.make_rnn("scan", 64, "cuda"), lambda n: cases.rnn_inputs(n, 8, 64, "cuda"), [(1, 0)]
    return cases.cond_clamp, lambda n: (torch.randn(n, 64, device="cuda"),), [(0, 0)]


@pytest.mark.parametrize("name", ["while_logistic_map", "rnn_scan_wide", "cond_clamp_invalid", "linear_recurrence"])
def test_a_compiled_call_goes_into_the_callers_cuda_graph(name):
    """torch.cuda.graph around a compiled call (after warm-up, as torch asks): the plan's kernels go
    into the caller's graph, and its replays recompute from the new values of the static inputs.
    tidal replaying a graph of its own there raised "Cannot prepare for replay during capturing
    stage". Covers one kernel with the loop inside, the row kernel, a device-side cond, and the
    look-back scan (its flags zeroed by a kernel of the plan)."""
    if name == "linear_recurrence":
        model, make, _ = _bench_case(name)
        inputs = make(1 << 16)
        torch._dynamo.reset()
    else:
        model, inputs = _corpus_on_cuda(CORPUS / f"{name}.py")
    compiled = torch.compile(model, backend="tidal", fullgraph=True, options=STRICT)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # compiled, then captured and replayed by tidal itself
                compiled(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = compiled(*inputs)
        for scale in (0.5, 0.75):
            for t in pytree.tree_leaves(inputs):
                if isinstance(t, torch.Tensor) and t.dtype.is_floating_point:
                    t.mul_(scale)
            graph.replay()
            torch.testing.assert_close(static_out, model(*inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["cond_clamp", "rnn_scan", "linear_recurrence"])
def test_a_dynamic_size_is_read_on_the_host_without_synchronizing(name):
    """A dynamic size (Dynamo's, after a second shape or mark_dynamic) keeps the GPU path's
    device-side forms: a cond of elementwise branches stays a select on the device (it read its
    predicate on the host), the RNN stays one row kernel with T an argument (it ran as a host
    loop), and a size the boundary passes as a 0-d CPU tensor is read on the host where it is
    (it was copied to the GPU and read back). Before, on an H100: cond_clamp 23 -> 184 us a
    call, the RNN 86 -> 271 us. One graph serves every size, and once a size's buffers come
    back the calls replay a CUDA graph without synchronizing."""
    fn, make, dynamic_dims = _bench_case(name)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(fn, backend="tidal", options=STRICT)
    graphs = []
    with torch.no_grad():
        for n in (96, 160, 200):
            inputs = make(n)
            for i, d in dynamic_dims:
                torch._dynamo.mark_dynamic(inputs[i], d)
            torch.testing.assert_close(compiled(*inputs), fn(*inputs), rtol=1e-4, atol=1e-4)
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        assert graphs[1] == graphs[2], graphs  # the last size needed no new graph
        for _ in range(2):  # the plan, then a capture
            compiled(*inputs)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            outs = [compiled(*inputs) for _ in range(3)]
        finally:
            torch.cuda.set_sync_debug_mode("default")
    for out in outs:
        torch.testing.assert_close(out, fn(*inputs), rtol=1e-4, atol=1e-4)


def test_a_host_read_inside_the_callers_cuda_graph_is_a_clear_error():
    """A cond whose branches reduce reads its predicate on the host: inside the caller's capture
    that is an error naming the cond's line, not a CUDA error from the capture."""
    from tidal.diagnostics import TidalError

    def branchy(x):
        return torch.cond(x.sum() > 0, lambda x: x.sum(0), lambda x: x.amax(0), (x,))

    torch._dynamo.reset()
    compiled = torch.compile(branchy, backend="tidal", fullgraph=True, options=STRICT)
    x = torch.rand(64, 32, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), branchy(x))  # outside a capture: one read
        graph = torch.cuda.CUDAGraph()
        with pytest.raises(TidalError, match="reads its predicate on the host") as caught:
            with torch.cuda.graph(graph):
                compiled(x)
    assert f"{Path(__file__).name}:" in str(caught.value), str(caught.value)
    with torch.no_grad():  # the GPU is still usable, and so is the program outside a capture
        torch.testing.assert_close(compiled(-x), branchy(-x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("path", DTYPE_GENERIC_CORPUS, ids=lambda p: p.stem)
def test_corpus_in_reduced_precision_matches_eager_on_cuda(path, dtype):
    """The corpus in float16/bfloat16 on CUDA: each rounding op computed in float32 and rounded
    once (tidal/importer/reduced_precision.py), as eager's opmath, to a few roundings (eager's
    reduced-precision matmuls round their float32 sums once too, but may sum in another order)."""
    model, inputs = in_reduced_precision(*_corpus_on_cuda(path), dtype)
    with warnings.catch_warnings(), torch.no_grad(), torch.device("cuda"):
        warnings.simplefilter("ignore")
        expected = model(*inputs)
        got = torch.compile(model, backend="tidal", fullgraph=True, options=STRICT)(*inputs)
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got, expected, rtol=4 * eps, atol=4 * eps)


_TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs (the two-GPU test machine)")


@_TWO_GPUS
@pytest.mark.parametrize("name", ["rnn_scan_wide", "while_logistic_map", "s5_linear_recurrence", "chunked_cross_entropy",
                                  "cond_clamp_invalid", "gru_scan"])
def test_a_program_on_the_second_gpu_runs_there(name):
    """Inputs on cuda:1 while cuda:0 is current: the kernels, allocations, constants and CUDA
    graph captures all go to cuda:1 (before, the kernels launched on cuda:0, which Triton refused:
    "Pointer argument cannot be accessed"). The kernels of the same texts compiled for cuda:0
    first: each GPU loads its own (a Triton kernel launches only where it was loaded)."""
    model, inputs = load_program_file(str(CORPUS / f"{name}.py"))
    for device in ("cuda:0", "cuda:1"):
        torch._dynamo.reset()
        if isinstance(model, torch.nn.Module):
            model = model.to(device)
        args = pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)
        compiled = torch.compile(model, backend="tidal", fullgraph=True, options=STRICT)
        with warnings.catch_warnings(), torch.no_grad(), torch.device(device):
            warnings.simplefilter("ignore")
            with torch.cuda.device(device):  # eager's scan makes some tensors on the current device
                expected = model(*args)
            with torch.cuda.device(0):
                for _ in range(3):  # the same buffers again: captured as a CUDA graph, then replayed
                    got = compiled(*args)
                    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
                    assert all(t.device == torch.device(device) for t in pytree.tree_leaves(got) if isinstance(t, torch.Tensor))


@_TWO_GPUS
def test_a_graph_with_inputs_on_two_gpus_runs_in_eager_with_a_warning():
    """tidal runs a graph's kernels on one GPU: inputs on two make the graph an eager fallback
    that names the devices (strict mode raises)."""
    from tidal.dynamo import TidalCompileError, TidalFallbackWarning

    def f(x, y):
        return x * 2, y + 1

    x, y = torch.rand(8, device="cuda:0"), torch.rand(8, device="cuda:1")
    torch._dynamo.reset()
    with pytest.warns(TidalFallbackWarning, match=r"inputs on several devices \(cuda:0, cuda:1\)"):
        got = torch.compile(f, backend="tidal", options={"fallback": "warn"})(x, y)
    torch.testing.assert_close(got, f(x, y))
    torch._dynamo.reset()
    with pytest.raises(TidalCompileError, match="several devices"):
        torch.compile(f, backend="tidal", options=STRICT)(x, y)


_SCAN_TOLERANCES = {torch.float64: {}, torch.float32: {"rtol": 1e-4, "atol": 1e-4}}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_linear_recurrence_over_many_chunks_and_columns(dtype):
    """The scan kernels' tiles, look-back chunks and column blocks: T and C not multiples of the
    blocks (130 columns: three column blocks of look-back chunks)."""
    from torch._higher_order_ops import associative_scan

    def recurrence(a, b):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=0, combine_mode="generic")[1]

    gen = torch.Generator().manual_seed(0)
    for length, width in ((1, 3), (1000, 70), (100_003, 16), (300_001, 3), (50_000, 64), (70_001, 130)):
        a = (0.5 + 0.5 * torch.rand(length, width, generator=gen, dtype=torch.float64))
        b = torch.randn(length, width, generator=gen, dtype=torch.float64)
        torch._dynamo.reset()
        got = torch.compile(recurrence, backend="tidal", fullgraph=True, options=STRICT)(a.to("cuda", dtype), b.to("cuda", dtype))
        a_np, b_np = a.numpy(), b.numpy()
        ref, h = b_np.copy(), b_np[0]
        for t in range(1, length):
            h = a_np[t] * h + b_np[t]
            ref[t] = h
        torch.testing.assert_close(got.cpu().double(), torch.from_numpy(ref), **_SCAN_TOLERANCES[dtype])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_linear_recurrence_reverse_long(dtype):
    """A long scan read from the end (PyTorch's reverse=True)."""
    from torch._higher_order_ops import associative_scan

    def recurrence(a, b):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=0, reverse=True, combine_mode="generic")[1]

    gen = torch.Generator().manual_seed(1)
    length, width = 200_001, 5
    a = (0.5 + 0.5 * torch.rand(length, width, generator=gen, dtype=torch.float64))
    b = torch.randn(length, width, generator=gen, dtype=torch.float64)
    torch._dynamo.reset()
    got = torch.compile(recurrence, backend="tidal", fullgraph=True, options=STRICT)(a.to("cuda", dtype), b.to("cuda", dtype))
    a_np, b_np = a.numpy(), b.numpy()
    ref, h = b_np.copy(), b_np[-1]
    for t in range(length - 2, -1, -1):
        h = a_np[t] * h + b_np[t]
        ref[t] = h
    torch.testing.assert_close(got.cpu().double(), torch.from_numpy(ref), **_SCAN_TOLERANCES[dtype])



@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("length", [1, 2, 3, 8, 33, 257])
def test_batched_combines_match_a_python_loop(length, reverse):
    """Combines that are not elementwise (products of 2x2 rotations, also through a cond of
    matmuls; the row of larger norm, a reduction gating a select; a max through a while_loop
    whose trip count differs by slice), scanned by the odd/even scan of batched combines
    (plan._odd_even_combine): every length (odd, even, 1), either direction, along dim 1 and 0,
    against the combines taken one at a time."""
    from torch._higher_order_ops import associative_scan

    def products(m):
        return associative_scan(lambda p, q: p @ q, m, dim=1, reverse=reverse, combine_mode="generic")

    def either_way(p, q):  # a cond that stays a cond (matmul branches): both batched, then a select
        def transposed(p, q):
            return (q.transpose(-1, -2) @ p.transpose(-1, -2)).transpose(-1, -2).contiguous()

        return torch.cond(p.sum() > 0, lambda p, q: p @ q, transposed, (p, q))

    def branchy(m):
        return associative_scan(either_way, m, dim=1, reverse=reverse, combine_mode="generic")

    def larger(a, b):
        return torch.where(a.square().sum(-1, keepdim=True) >= b.square().sum(-1, keepdim=True), a, b)

    def looped_max(a, b):  # a while_loop inside: 0 or 1 iterations, slice by slice
        from torch._higher_order_ops import while_loop

        return while_loop(lambda c: (c < b).any(), lambda c: (torch.maximum(c, b),), (a.clone(),))[0]

    def gated(x):
        return associative_scan(larger, x, dim=0, reverse=reverse, combine_mode="generic")

    gen = torch.Generator().manual_seed(length)
    angle = torch.rand(3, length, generator=gen, dtype=torch.float64) * 6.283
    m = torch.stack([torch.stack([angle.cos(), -angle.sin()], -1), torch.stack([angle.sin(), angle.cos()], -1)], -2)
    x = torch.randn(length, 6, 4, generator=gen, dtype=torch.float64)
    order = range(length - 1, -1, -1) if reverse else range(length)
    ref_m, ref_x = m.clone(), x.clone()
    acc_m = acc_x = None
    for t in order:
        acc_m = m[:, t] if acc_m is None else acc_m @ m[:, t]
        acc_x = x[t] if acc_x is None else larger(acc_x, x[t])
        ref_m[:, t], ref_x[t] = acc_m, acc_x
    torch._dynamo.reset()
    got_m = torch.compile(products, backend="tidal", fullgraph=True, options=STRICT)(m.cuda())
    got_x = torch.compile(gated, backend="tidal", fullgraph=True, options=STRICT)(x.cuda())
    got_b = torch.compile(branchy, backend="tidal", fullgraph=True, options=STRICT)(m.cuda())
    looped = torch.compile(lambda x: associative_scan(looped_max, x, dim=0, reverse=reverse, combine_mode="generic"),
                           backend="tidal", fullgraph=True, options=STRICT)(x.cuda())
    ref_max = (x.flip(0).cummax(0).values.flip(0) if reverse else x.cummax(0).values)
    # rotations re-associated (a tree, not a chain) round apart in f64 only
    torch.testing.assert_close(got_m.cpu(), ref_m, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(got_x.cpu(), ref_x, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(got_b.cpu(), ref_m, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(looped.cpu(), ref_max, rtol=0, atol=0)


def test_products_of_dynamic_sizes_run_batched():
    """Matrix-product combines with the batch and the length dynamic (one graph for both calls):
    torch-mlir's broadcast gathers run batched, against the products taken one at a time."""
    from torch._higher_order_ops import associative_scan

    products = torch.compile(lambda m: associative_scan(lambda p, q: p @ q, m, dim=1, combine_mode="generic"),
                             backend="tidal", fullgraph=True, dynamic=True, options=STRICT)
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(0)
    for batch, length in ((3, 5), (4, 19)):
        m = torch.linalg.matrix_exp(0.3 * torch.randn(batch, length, 3, 3, generator=gen, dtype=torch.float64))
        ref, acc = m.clone(), m[:, 0]
        for t in range(1, length):
            acc = acc @ m[:, t]
            ref[:, t] = acc
        torch.testing.assert_close(products(m.cuda()).cpu(), ref, rtol=1e-9, atol=1e-9)


def test_long_scan_of_booleans_and_doubles():
    """Look-back records of a bool (stored as bytes) and an f64 component: a running "seen a
    True" and a running sum over 300k rows of 16 columns (look-back chunks of 4 KiB-element
    tiles), against cummax and cumsum."""
    from torch._higher_order_ops import associative_scan

    def seen_and_sum(x, y):
        return associative_scan(lambda a, b: (a[0] | b[0], a[1] + b[1]), (x, y), dim=0, combine_mode="generic")

    gen = torch.Generator().manual_seed(4)
    x = (torch.rand(300_000, 16, generator=gen) > 0.99999).cuda()
    y = torch.randn(300_000, 16, generator=gen, dtype=torch.float64).cuda()
    torch._dynamo.reset()
    seen, total = torch.compile(seen_and_sum, backend="tidal", fullgraph=True, options=STRICT)(x, y)
    torch.testing.assert_close(seen, torch.cummax(x.int(), 0).values.bool())
    torch.testing.assert_close(total, torch.cumsum(y, 0))

def test_long_scans_stay_right_across_launches_and_replays():
    """30 calls over new values in the same buffers (CUDA graph replays after the second), an f32
    recurrence whose running product nothing reads (never written) and an int32 running maximum,
    each checked."""
    from torch._higher_order_ops import associative_scan

    def scans(a, b, k):
        h = associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=0, combine_mode="generic")[1]
        return h, associative_scan(lambda l, r: torch.maximum(l, r), k, dim=0, combine_mode="generic")

    torch._dynamo.reset()
    f = torch.compile(scans, backend="tidal", fullgraph=True, options=STRICT)
    gen = torch.Generator().manual_seed(2)
    length, width = 1 << 20, 16
    a, b = torch.empty(length, width, device="cuda"), torch.empty(length, width, device="cuda")
    k = torch.empty(length, 7, dtype=torch.int32, device="cuda")
    for call in range(30):
        a.copy_(0.9 + 0.1 * torch.rand(length, width, generator=gen))
        b.copy_(torch.randn(length, width, generator=gen))
        k.copy_(torch.randint(-2**30, 2**30, (length, 7), generator=gen, dtype=torch.int32))
        with torch.no_grad():
            h, running_max = f(a, b, k)
        torch.testing.assert_close(running_max, torch.cummax(k, 0).values)
        torch.testing.assert_close(h, associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a.double(), b.double()),
                                                       dim=0, combine_mode="pointwise")[1].float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "name,fn,shape",
    [
        ("sum_all", lambda x: x.sum(), (4096, 4096)),
        ("row_amax", lambda x: x.amax(-1), (3000, 999)),
        ("col_mean", lambda x: x.mean(0), (5000, 37)),
        ("softmax", lambda x: torch.softmax(x, -1), (2048, 1000)),
        ("logsumexp", lambda x: torch.logsumexp(x, -1), (513, 4099)),
        ("argmax", lambda x: x.argmax(-1), (1000, 300)),
        ("norm_cond", lambda x: torch.cond(x.norm() > 10, lambda x: x / x.norm(), lambda x: x * 2, (x,)), (1024, 1024)),
    ],
)
def test_reductions_match_eager(name, fn, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)).cuda()
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(fn, backend="tidal", fullgraph=True, options=STRICT)(x)
        expected = fn(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("init", ["literal", "loaded"])
def test_split_reductions_fold_on_the_device_at_every_call(init, monkeypatch):
    """The last program of each row block folds the partials, and zeroes its arrival counter for
    the next launch: 20 calls (CUDA graph replays after the second) over new values in the same
    buffers, with many row blocks of many splits (row sums of [64, 300000]), one row block of
    1056 splits (a full sum) and NaNs; the initial value as a literal or read from the fill."""
    import tidal.backends.gpu.plan as gpu_program

    if init == "loaded":
        monkeypatch.setattr(gpu_program, "_folded_fill_literal", lambda value: None)

    def stats(x, y):
        return x.sum(-1), x.amax(-1), y.sum(), y.isnan().any()

    torch._dynamo.reset()
    f = torch.compile(stats, backend="tidal", fullgraph=True, options=STRICT)
    gen = torch.Generator().manual_seed(11)
    x, y = torch.empty(64, 300000, device="cuda"), torch.empty(4096, 4096, device="cuda")
    for call in range(20):
        x.copy_(torch.randn(x.shape, generator=gen))
        y.copy_(torch.randn(y.shape, generator=gen))
        if call % 3 == 1:
            x[call, call * 7] = float("nan")
            y[call, -call] = float("nan")
        with torch.no_grad():
            got, expected = f(x, y), stats(x, y)
        torch.testing.assert_close(list(got), list(expected), rtol=1e-4, atol=1e-2, equal_nan=True)


def test_row_wise_scan_trains_on_cuda(tmp_path):
    """The wide RNN's forward scan and its adjoint (a reverse scan reading Uᵀ) each run as ONE
    persistent row kernel; the gradients match the Python loop's on CUDA (eager scan's own autograd
    on CUDA was measured wrong, bench/cases.py says)."""
    from loop_reference import python_loops

    model, inputs = _corpus_on_cuda(CORPUS / "rnn_scan_wide.py")
    compiled = torch.compile(model, backend="tidal", fullgraph=True, options={**STRICT, "dump_dir": str(tmp_path)})

    def grads(fn):
        model.zero_grad()
        h, ys = fn(*inputs)
        (h.sum() + (ys * ys).sum()).backward()
        return [p.grad.clone() for p in model.parameters()]

    got = grads(compiled)
    with python_loops(model):
        expected = grads(model)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    (graph,) = tmp_path.glob("graph*")
    for part in ("forward", "backward"):
        assert list((graph / part).glob("tidal_scan_rows_*.tt*ir")), part


@pytest.mark.parametrize("kind,h", [("lstm", 64), ("gru", 64), ("mingru", 64), ("lstm", 32), ("lstm", 128), ("gru", 128),
                                    ("lstm", 256), ("gru", 512), ("ln_lstm", 64), ("residual_rnn", 64), ("ln_lstm", 128),
                                    ("gru", 96), ("lstm", 384), ("lstm", 320)])
def test_gated_cells_run_as_row_kernels_and_train(kind, h, tmp_path):
    """LSTM, GRU and minGRU steps split their gates with `chunk`: each gate is a column block of
    the row kernel, so forward and adjoint are ONE persistent kernel each (40 rows: a partial
    block of 16; H = 128: the weights pass shared memory, so LSTM and GRU split every gate's
    columns among programs exchanging h through L2, each keeping its slice of the weights in shared
    memory, as TF32 parts or, with H = 256 and 512, as f32 values; LayerNorm-LSTM's are streamed
    from L2 at every step; widths not powers of two, 96 = 3·32, 384 = 3·128, 320 = 5·64, shared
    out among a multiple of 3 or 5 programs, each a power of two of the columns); LayerNorm-LSTM and the
    residual RNN normalize rows (reductions inside the kernel); outputs and the gradients of x and every weight match the same cell written
    as a Python loop."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import make_cell

    gen = torch.Generator().manual_seed(2)
    xs, cotangent = torch.randn(48, 40, h, generator=gen).cuda(), torch.randn(48, 40, h, generator=gen).cuda()

    def run(model):
        x = xs.clone().requires_grad_(True)
        ys = model(x)
        (ys * cotangent).sum().backward()
        return [ys.detach(), x.grad] + [p.grad for p in model.parameters() if p.grad is not None]

    torch._dynamo.reset()
    cell = make_cell(kind, h, "cuda", "scan")
    got = run(torch.compile(cell, backend="tidal", fullgraph=True, options={**STRICT, "dump_dir": str(tmp_path)}))
    expected = run(make_cell(kind, h, "cuda", "loop"))  # the same weights (one seed)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        # a weight's gradient sums 40 x 48 rows' products: its error scales with its largest entry
        # (LayerNorm cells, H200: up to 4.1e-4 off in 5-59 of 4k-65k entries, against the absolute
        # 1e-4; tf32x3 products and another summation order against IEEE fp32)
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4 * max(1.0, e.abs().max().item()))
    (graph,) = tmp_path.glob("graph*")
    for part in ("forward", "backward"):
        assert list((graph / part).glob("tidal_scan_rows_*.tt*ir")), part


@pytest.mark.parametrize("kind,h", [("rnn", 64), ("lstm", 128), ("gru", 128)])
def test_row_kernels_under_tf32_precision_stay_within_eagers_error(kind, h, tmp_path):
    """With torch.set_float32_matmul_precision("high") the row kernel multiplies with one TF32
    product (as cuBLAS then does, and cuDNN's RNNs by default): its outputs and gradients are no
    further from the cell in float64 than eager's own Python loop under the same precision."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import GATES, make_cell

    gen = torch.Generator().manual_seed(3)
    xs, cotangent = torch.randn(32, 40, h, generator=gen), torch.randn(32, 40, h, generator=gen)

    def run(model, device, dtype):
        x = xs.to(device, dtype).requires_grad_(True)
        ys = model(x)
        (ys * cotangent.to(device, dtype)).sum().backward()
        return [t.detach().cpu().double() for t in [ys, x.grad, *(p.grad for p in model.parameters() if p.grad is not None)]]

    exact = run(make_cell(kind, h, "cpu", "loop").double(), "cpu", torch.float64)
    default = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        torch._dynamo.reset()
        compiled = torch.compile(make_cell(kind, h, "cuda", "scan"), backend="tidal", fullgraph=True,
                                 options={**STRICT, "dump_dir": str(tmp_path)})
        got = run(compiled, "cuda", torch.float32)
        eager = run(make_cell(kind, h, "cuda", "loop"), "cuda", torch.float32)
    finally:
        torch.set_float32_matmul_precision(default)
        torch._dynamo.reset()
    for g, e, x in zip(got, eager, exact):
        ours, theirs = (g - x).abs().max().item(), (e - x).abs().max().item()
        assert ours <= 2 * theirs + 1e-5 * x.abs().max().item(), (ours, theirs)
    (graph,) = tmp_path.glob("graph*")
    for part in ("forward", "backward"):
        (kernel,) = (graph / part).glob("tidal_scan_rows_*.tt*ir")
        text = kernel.read_text()
        assert "tf32x3" not in text, part
        if part == "forward":  # one product per gate block (and K chunk, where programs split the weights)
            assert text.count("tt.dot ") == GATES[kind] * (h // 16 if "exchange" in text else 1), text


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_rnn_modules_train_as_row_kernels_on_cuda(kind, tmp_path):
    """nn.LSTM / nn.GRU (2 layers, bidirectional, H = 64) in compiled code train with one row
    kernel per layer and direction, forward and adjoint; outputs and gradients against the same
    module in float64 on the CPU (cuDNN's own float32 runs TF32 by default)."""
    torch.manual_seed(0)
    module = getattr(torch.nn, kind)(64, 64, num_layers=2, bidirectional=True)
    reference = __import__("copy").deepcopy(module).double()
    module = module.cuda()
    x = torch.randn(24, 40, 64)
    cotangent = torch.randn(24, 40, 128)

    def run(model, x, device, dtype):
        x = x.to(device, dtype).requires_grad_(True)
        out = model(x)[0]
        (out * cotangent.to(device, dtype)).sum().backward()
        return [t.cpu().float() for t in [out.detach(), x.grad, *(p.grad for p in model.parameters())]]

    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):
        compiled = torch.compile(module, backend="tidal", fullgraph=True, options={**STRICT, "dump_dir": str(tmp_path)})
        got = run(compiled, x, "cuda", torch.float32)
    expected = run(reference, x, "cpu", torch.float64)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4 * max(1.0, e.abs().max().item()))
    (graph,) = tmp_path.glob("graph*")
    for part in ("forward", "backward"):
        assert len(list((graph / part).glob("tidal_scan_rows_*.tt*ir"))) == 4, part


def test_a_step_slicing_its_carry_matches_eager_on_cuda(tmp_path):
    """A step reading column slices of its carry (copied through shared memory in the row
    kernel) and concatenating them as a matmul's left-hand side."""
    from test_gpu_lowering import _carry_halves_swapped

    gen = torch.Generator().manual_seed(4)
    args = [torch.zeros(40, 64), torch.randn(30, 40, 64, generator=gen), torch.randn(64, 64, generator=gen) * 64**-0.5]
    args = [a.cuda() for a in args]
    torch._dynamo.reset()
    compiled = torch.compile(_carry_halves_swapped, backend="tidal", fullgraph=True, options={**STRICT, "dump_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(*args), _carry_halves_swapped(*args), rtol=1e-4, atol=1e-4)
    assert list(tmp_path.glob("graph*/tidal_scan_rows_*.tt*ir"))


def test_row_kernel_carries_nans_in_their_rows_only():
    """The row kernel's TF32 split feeds the tensor cores the unrounded rest of each operand: a NaN
    in h or x_t must still make that row (and only that row) NaN from its step on, as in eager."""
    model, (h0, xs) = _corpus_on_cuda(CORPUS / "rnn_scan_wide.py")
    h0, xs = h0.clone(), xs.clone()
    h0[3, 5] = float("nan")  # row 3 from the first step
    xs[4, 17, 2] = float("nan")  # row 17 (the partial block of 16) from step 4
    compiled = torch.compile(model, backend="tidal", fullgraph=True, options=STRICT)
    with torch.no_grad():
        expected, got = model(h0, xs), compiled(h0, xs)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
    ys = got[1]
    assert ys[:, 3].isnan().all() and ys[4:, 17].isnan().all() and not ys[:4, 17].isnan().any()
    assert ys.isnan().sum() == ys[:, 3].numel() + ys[4:, 17].numel()


@pytest.mark.parametrize("h,rows", [(256, 40), (512, 40), (1024, 16), (1024, 40)])
def test_a_scan_whose_weights_do_not_fit_on_chip_matches_eager_on_cuda(h, rows, tmp_path):
    """U does not fit in one SM's shared memory (row_scan.WEIGHT_BYTES_ON_CHIP), so programs share
    each block of rows, each with U's columns of its share of h in shared memory (8 programs at
    H = 256 and 512, 32 at H = 1024 with 16 rows), exchanging h through L2 at a barrier every step;
    H = 1024 with 40 rows fits no split and runs as the host loop of its step's kernels. All match
    eager."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    from cases import make_rnn, rnn_inputs

    model = make_rnn("scan", h, "cuda")
    inputs = rnn_inputs(16, rows, h, "cuda")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="tidal", fullgraph=True, options={**STRICT, "dump_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs), rtol=1e-4, atol=1e-4)
    assert bool(list(tmp_path.glob("graph*/tidal_scan_rows_*.tt*ir"))) == (h < 1024 or rows == 16)


def _cond_clamp(x):
    """bench/cases.py's cond_clamp (issue #13): two `any`s over x fused into one reduction kernel."""
    return torch.cond(x.isnan().any() | x.isinf().any(), lambda t: torch.nan_to_num(t, 0.0, 1e4, -1e4), lambda t: t.clone(), (x,))


@pytest.mark.parametrize("layout", ["contiguous", "odd_numel", "transposed", "misaligned"])
def test_fused_reductions_and_flat_kernels_match_eager(layout):
    """cond_clamp (one reduction kernel for both `any`s, flat vector kernels on contiguous
    operands) and sibling reductions of another kind (row sums and maxima of one matrix), on
    clean inputs and with a NaN or an inf; a transposed or misaligned input takes the strided
    variants of the same program, an odd numel the flat one without the multiple-of-16 promise."""
    shape = (257, 129) if layout == "odd_numel" else (512, 256)
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(shape, generator=gen)

    def on_cuda(t):
        if layout == "transposed":
            return t.t().contiguous().cuda().t()
        if layout == "misaligned":
            flat = torch.empty(t.numel() + 1, device="cuda")[1:]
            return flat.view(t.shape).copy_(t)
        return t.cuda()

    def row_stats(x):
        return x.sum(-1), x.amax(-1), x.abs().sum(-1)

    for fn in (_cond_clamp, row_stats):
        program = _gpu_program(fn, (base,))
        for poison in (None, float("nan"), float("inf"), float("-inf")):
            x = base.clone()
            if poison is not None:
                x[shape[0] // 3, shape[1] // 5] = poison
            x = on_cuda(x)
            with torch.no_grad():
                got, expected = program(x), fn(x)
            torch.testing.assert_close(list(got), list(expected) if isinstance(expected, tuple) else [expected],
                                       rtol=1e-4, atol=1e-4, equal_nan=True)


def test_replays_hand_out_a_view_of_a_plan_buffer_without_copying():
    """A result that is a view of a kernel's output (a reshape) is the graph's own memory too: a
    replay hands it out with no copy, and its values follow the inputs."""

    def flat_tanh(x):
        return torch.tanh(x * 2.0).reshape(-1)

    program = _gpu_program(flat_tanh, (torch.randn(32, 64),))
    x = torch.randn(32, 64, device="cuda")
    with torch.no_grad():
        program(x)
        program(x)  # captured
        (capture,) = next(iter(program._graphs.values()))
        x.mul_(-1.5)
        replayed = program(x)[0]
        assert capture.owned == [True]
        assert replayed.data_ptr() == capture.outs[0].data_ptr()  # the graph's memory, not a copy
        torch.testing.assert_close(replayed, flat_tanh(x))


def test_replays_hand_out_the_graph_outputs_without_overwriting_held_ones():
    """A replay's results are the graph's own outputs (no copy: the same memory at every replay
    whose results were dropped); while the caller holds them, the next call does not replay that
    graph (it would overwrite them) but a second capture, and the held results keep their values."""
    program = _gpu_program(_cond_clamp, (torch.randn(64, 64),))
    x = torch.randn(64, 64, device="cuda")
    with torch.no_grad():
        program(x)
        program(x)  # captured
        first = program(x)[0].data_ptr()  # a replay, dropped at once
        assert program(x)[0].data_ptr() == first  # the same graph output again: nothing copied
        held = program(x)[0]
        kept = held.clone()
        x.mul_(2)
        while_held = program(x)[0]  # `held` alive: a second capture serves
        again = program(x)[0]
        torch.testing.assert_close(held, kept)
        torch.testing.assert_close(while_held, _cond_clamp(x))
        torch.testing.assert_close(again, _cond_clamp(x))
        assert held.data_ptr() == first and again.data_ptr() != first
        captures = next(iter(program._graphs.values()))
        assert len(captures) == 2
        del held, while_held, again
        assert all(c.replayable() for c in captures)


def test_replays_hand_out_views_of_one_buffer_without_copying():
    """Results that view one plan buffer (a scan's [T, B, D] results and their [B, T, D]
    transpose, both returned for autograd) are the graph's own memory together: a replay hands
    both out with no copy, and while either is held the next call takes a second capture."""

    def both_ways(x):
        y = torch.tanh(x * 2.0)
        return y, y.transpose(0, 1)

    program = _gpu_program(both_ways, (torch.randn(8, 16, 32),))
    x = torch.randn(8, 16, 32, device="cuda")
    with torch.no_grad():
        program(x)
        program(x)  # captured
        (capture,) = next(iter(program._graphs.values()))
        assert capture.owned == [True, True]
        x.mul_(-0.5)
        y, yt = program(x)
        assert y.untyped_storage().data_ptr() == yt.untyped_storage().data_ptr() == capture.outs[0].untyped_storage().data_ptr()
        torch.testing.assert_close(y, torch.tanh(x * 2.0))
        torch.testing.assert_close(yt, torch.tanh(x * 2.0).transpose(0, 1))
        del y
        x.mul_(3.0)
        again = program(x)  # `yt` holds the buffer: not a replay of the first capture
        torch.testing.assert_close(yt, torch.tanh(x / 3.0 * 2.0).transpose(0, 1))  # unchanged
        torch.testing.assert_close(again[0], torch.tanh(x * 2.0))
        assert again[0].untyped_storage().data_ptr() != yt.untyped_storage().data_ptr()


def test_buffers_met_twice_by_chance_stop_the_captures(monkeypatch):
    """A program whose input buffers come back once and never again (the caching allocator
    handing a freed activation's address to the next call) stops capturing after two captures
    that never replayed: 40 buffers called twice each make a handful of captures, not 40, and
    every result is right."""
    import tidal.backends.gpu.program as gpu_program

    monkeypatch.setattr(gpu_program, "STAGING_SHARE", 0.0)  # no staged capture serving them instead
    program = _gpu_program(_cond_clamp, (torch.randn(64, 64),))
    held = []
    with torch.no_grad():
        for i in range(40):
            x = torch.randn(64, 64, device="cuda")
            held.append(x)  # a new address every time
            for _ in range(2):
                torch.testing.assert_close(program(x)[0], _cond_clamp(x))
    assert 3 <= len(program._keyed) <= gpu_program.WASTED_CAPTURES + gpu_program.GRAPHS_PER_PROGRAM, len(program._keyed)
    assert not program._keyed_captures_pay()


def test_a_training_steps_backward_replays_its_own_capture_without_copies(monkeypatch):
    """A backward's inputs are its forward's outputs, which the forward's replays hand out from
    the same graph buffers step after step: once they come back the backward captures them and
    replays with no copies, even where a staged capture (its inputs copied in at every call)
    already serves their shapes; gradients stay right throughout."""
    import tidal.backends.gpu.program as gpu_program
    from torch._higher_order_ops import associative_scan

    monkeypatch.setattr(gpu_program, "STAGING_SHARE", 1e9)  # a staged capture wherever one can be made
    staged_replays = []
    replay = gpu_program._Staged.replay
    monkeypatch.setattr(gpu_program._Staged, "replay", lambda self, tensors: staged_replays.append(1) or replay(self, tensors))

    def gated(g, x):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (g.exp(), x), dim=1,
                                combine_mode="generic")[1]

    gen = torch.Generator().manual_seed(8)
    g = torch.nn.functional.logsigmoid(torch.randn(4, 300, 64, generator=gen) + 3).cuda().requires_grad_()
    x, cot = torch.randn(4, 300, 64, generator=gen).cuda().requires_grad_(), torch.randn(4, 300, 64, generator=gen).cuda()
    gd, xd = g.detach().double().requires_grad_(), x.detach().double().requires_grad_()
    gated(gd, xd).backward(cot.double())
    torch._dynamo.reset()
    f = torch.compile(gated, backend="tidal", fullgraph=True, options=STRICT)
    counts = []
    for _ in range(10):
        g.grad = x.grad = None
        out = f(g, x)
        out.backward(cot)
        counts.append(len(staged_replays))
        torch.testing.assert_close(g.grad, gd.grad.float(), rtol=2e-4, atol=2e-3)
        torch.testing.assert_close(x.grad, xd.grad.float(), rtol=2e-4, atol=2e-3)
    assert counts[2] > 0, "no staged capture served the backward: the test tests nothing"
    assert counts[-1] == counts[-3], f"the last steps copied their inputs into a staged capture: {counts}"


def test_elementwise_results_follow_transposed_inputs_and_cat_its_largest_part():
    """An elementwise kernel over [T, B, D] views of [B, T, D] buffers writes its result in that
    dim order (the layout eager's TensorIterator gives it: read and written flat), and a concat
    of such a view keeps its order; the values are eager's."""

    def shifted_gate(x, g):
        xt, gt = x.transpose(0, 1), g.transpose(0, 1)
        a = torch.exp(gt) * xt
        return a, torch.cat([gt[1:], torch.zeros_like(gt[:1])], 0)  # an adjoint's shifted gate

    x, g = torch.randn(4, 96, 64), torch.randn(4, 96, 64) * 0.1
    program = _gpu_program(shifted_gate, (x, g))
    x, g = x.cuda(), g.cuda()
    with torch.no_grad():
        got, want = program(x, g), shifted_gate(x, g)
    torch.testing.assert_close(list(got), list(want))
    assert got[0].stride() == want[0].stride() == x.transpose(0, 1).stride()
    assert got[1].stride() == x.transpose(0, 1).stride()


def test_tanh_equals_eager_everywhere_on_cuda():
    """tidal's f32 tanh is libdevice's tanhf without its per-element branch (ttir._tanh_f32):
    the same values as eager's, bit for bit, across both paths, their boundary, tiny and huge
    magnitudes, signed zeros, infinities and NaN."""
    small = torch.logspace(-40, 1.5, 200_000)
    x = torch.cat([torch.linspace(-12, 12, 1 << 20), small, -small, torch.linspace(0.59, 0.61, 10_001),
                   torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 9.0109, 9.0110])]).cuda()
    torch._dynamo.reset()
    got = torch.compile(torch.tanh, backend="tidal", fullgraph=True, options=STRICT)(x)
    torch.testing.assert_close(got, torch.tanh(x), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(got[torch.isfinite(x) & (x == 0)]), torch.signbit(x[torch.isfinite(x) & (x == 0)]))


def _rnn_step_program(xs, w):
    def step(h, x_t):
        h = torch.tanh(x_t @ w + 0.5 * h)
        return h, h.clone()

    from torch._higher_order_ops.scan import scan

    return scan(step, torch.zeros_like(xs[0]), xs)[1]  # GPU_FAULT_LINE


@pytest.mark.parametrize("strict", [False, True], ids=["warn", "strict"])
def test_kernel_build_failure_is_the_eager_fallback(monkeypatch, strict):
    """A Triton kernel that fails to build (at the first call, where the GPU program builds its
    kernels) is the eager fallback with one warning naming the user's line, or strict mode's
    TidalCompileError; never an exception escaping from the call (issue #40)."""
    import tidal.backends.gpu.launch
    from tidal.dynamo import TidalCompileError, TidalFallbackWarning

    def broken(*args, **kwargs):
        raise RuntimeError("injected: triton could not compile the kernel")

    monkeypatch.setattr(tidal.backends.gpu.launch, "compile_kernel", broken)
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1) if text.endswith("# GPU_FAULT_LINE"))
    xs, w = torch.randn(6, 4, 8, device="cuda"), torch.randn(8, 8, device="cuda") / 3
    torch._dynamo.reset()
    compiled = torch.compile(_rnn_step_program, backend="tidal", options={"fallback": "error" if strict else "warn"})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if strict:
            with pytest.raises(TidalCompileError, match=f"test_gpu.py:{line}: error: internal error in tidal"):
                compiled(xs, w)
            return
        for _ in range(2):
            torch.testing.assert_close(compiled(xs, w), _rnn_step_program(xs, w))
    fallbacks = [str(c.message) for c in caught if issubclass(c.category, TidalFallbackWarning)]
    assert len(fallbacks) == 1 and "injected: triton could not compile" in fallbacks[0], fallbacks
    assert f"test_gpu.py:{line}:" in fallbacks[0], fallbacks


def test_linalg_info_check_raises_on_cuda_as_eager_does():
    """An ATen call with keyword-only arguments (`_linalg_check_errors(info, api_name, *,
    is_matrix)`) runs on CUDA tensors: a singular matrix in a scan step raises eager's LinAlgError.
    Was (torch 2.11): the check's result unused, dead code elimination dropped it and the program
    returned for a singular matrix."""
    from torch._higher_order_ops import scan

    def fn(S, x0):
        def step(x, S):
            x = torch.linalg.solve(S, x)
            return x, x.clone()

        return scan(step, x0, torch.stack([torch.eye(3, device=S.device), S]))

    compiled = torch.compile(fn, backend="tidal", fullgraph=True, options=STRICT)
    x0 = torch.randn(3, device="cuda")
    with torch.no_grad():
        good = 2 * torch.eye(3, device="cuda")
        torch.testing.assert_close(compiled(good, x0), fn(good, x0))
        with pytest.raises(torch.linalg.LinAlgError, match="singular"):
            compiled(torch.zeros(3, 3, device="cuda"), x0)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_scan_over_any_dim_stacks_its_outputs_as_the_installed_torch_does(dim):
    """torch 2.11 (the GPU machine's) stacks a scan's per-step outputs on dim 0 whatever `dim`
    is; 2.13 stacks them on `dim`. tidal follows the installed torch: same values, same shape."""
    from torch._higher_order_ops import scan

    def fn(init, xs):
        return scan(lambda c, x: (c * 0.9 + x, (c * x).sin()), init, xs, dim=dim)

    xs = torch.randn(3, 5, 4, device="cuda")
    init = torch.zeros([s for i, s in enumerate(xs.shape) if i != dim], device="cuda")
    expected = fn(init, xs)
    got = torch.compile(fn, backend="tidal", fullgraph=True, options=STRICT)(init, xs)
    assert got[1].shape == expected[1].shape
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("sign", [1, -1], ids=["then", "else"])
def test_cond_branches_of_unequal_shapes_on_cuda(sign):
    """The cond's result has an unbacked size ([?, 4]) and each branch its own ([6, 4], [1, 4])."""
    from test_regressions import _branches_of_unequal_shapes

    x = torch.randn(3, 4, device="cuda").abs() * sign
    with torch.no_grad():
        got = torch.compile(_branches_of_unequal_shapes, backend="tidal", fullgraph=True, options=STRICT)(x)
    torch.testing.assert_close(got, _branches_of_unequal_shapes(x))


def _lstm_scan(xs, h0, c0, U, b):
    from torch._higher_order_ops import scan

    def step(carry, x):
        h, c = carry
        i, f, g, o = (x + h @ U + b).chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return (h, c), h.clone()

    return scan(step, (h0, c0), xs)[1]


def test_new_buffers_at_every_call_replay_a_staged_capture(monkeypatch):
    """A host loop of kernels (an LSTM step of width 24: the row kernel takes powers of two) called
    with new buffers every time, as a training step's forward and backward are: from the third
    call a capture over private copies of the inputs replays, each call's inputs copied in;
    results held across calls stay right."""
    import tidal.backends.gpu.program as gpu_program

    monkeypatch.setattr(gpu_program, "STAGING_SHARE", 1e9)  # whatever the host time of this small plan
    g = torch.Generator().manual_seed(0)
    h = 24
    weights = [torch.randn(h, 4 * h, generator=g) * h**-0.5, torch.randn(4 * h, generator=g) * 0.1]

    def inputs():
        return [torch.randn(16, 8, 4 * h, generator=g), torch.zeros(8, h), torch.zeros(8, h), *weights]

    program = _gpu_program(_lstm_scan, inputs())
    batches = [_cuda(inputs()) for _ in range(5)]
    with torch.no_grad():
        results = [program(*batch) for batch in batches]  # all held: later replays must not overwrite them
        expected = [_lstm_scan(*batch) for batch in batches]
    for got, want in zip(results, expected):
        torch.testing.assert_close(got[0], want, rtol=1e-4, atol=1e-4)
    staged = [s for s in program._staged.values() if s]
    assert staged and isinstance(staged[0][0], gpu_program._Staged), program._staged


@pytest.mark.parametrize("shape,dim", [((4, 300, 96), 1), ((4, 300, 128), 1), ((4, 300, 96), 2), ((3, 5, 200_000, 2), 2),
                                       ((2, 70_000, 64), 1), ((3, 1000, 2048), 1), ((2, 777, 4100), 1), ((2, 1000, 33000), 1)],
                         ids=["btd_strided", "btd_unit_runs", "last_dim", "long_strided", "long_unit_runs", "wide_unit_runs",
                              "wide_strided", "wide_64_columns"])
def test_associative_scan_reads_and_writes_its_operands_in_place(shape, dim):
    """A scan along T of [B, T, D] (any dim) reads its operands where they are and writes its
    results in the same layout (`ScanLayout`: no contiguous copies), short (one program per column
    block), long (look-back) and wide (one program per column block in look-back-sized tiles; T
    not a multiple of the tile), with column blocks inside one run of D (one base and a range)
    or not (each column's offset); against the recurrence as a float64 loop on the CPU."""
    from torch._higher_order_ops import associative_scan

    def linrec(a, b):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (a, b), dim=dim, combine_mode="generic")[1]

    gen = torch.Generator().manual_seed(5)
    a = torch.rand(shape, generator=gen).mul_(0.5).add_(0.5)
    b = torch.randn(shape, generator=gen)
    torch._dynamo.reset()
    got = torch.compile(linrec, backend="tidal", fullgraph=True, options=STRICT)(a.cuda(), b.cuda())
    # the reference loop runs in float64 on the GPU: on the CPU, beside the other test workers,
    # the wide cases' loops took minutes
    rows_a, rows_b = (t.cuda().double().movedim(dim, 0).reshape(shape[dim], -1).contiguous() for t in (a, b))
    h, expected = torch.zeros_like(rows_b[0]), torch.empty_like(rows_b)
    for t in range(shape[dim]):
        h = rows_a[t] * h + rows_b[t]
        expected[t] = h
    expected = expected.reshape(b.movedim(dim, 0).shape).movedim(0, dim).float()
    torch.testing.assert_close(got, expected, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("shape", [(4, 300, 96), (2, 70_000, 64)], ids=["walk", "look_back"])
def test_a_gate_computed_inside_the_scan_kernel_matches_the_loop(shape):
    """a_t = 0.9 sigmoid(g_t) applied in the scan kernel to the g it loads (`ScanPrologue`: no
    kernel of its own writes a), both scan forms, against the recurrence as a float64 loop."""
    from torch._higher_order_ops import associative_scan

    def gated(g, x):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (torch.sigmoid(g) * 0.9, x), dim=1,
                                combine_mode="generic")[1]

    gen = torch.Generator().manual_seed(6)
    g, x = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(gated, backend="tidal", fullgraph=True, options=STRICT)(g.cuda(), x.cuda())
    a, h = torch.sigmoid(g.double()) * 0.9, torch.zeros_like(x[:, 0], dtype=torch.float64)
    expected = torch.empty_like(x, dtype=torch.float64)
    for t in range(shape[1]):
        h = a[:, t] * h + x[:, t]
        expected[:, t] = h
    torch.testing.assert_close(got.cpu(), expected.float(), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("shape", [(4, 300, 96), (2, 5000, 64), (2, 333, 2048)], ids=["walk", "look_back", "wide"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_linear_recurrence_trains_with_its_shifted_operands_read_in_place(shape, reverse):
    """The adjoint of h_t = exp(g_t) h_{t-1} + x_t scans G_t = h̄_t + a_{t+1} G_{t+1}: its
    operand a_{t+1} is `cat([a[1:], 0])`, which the scan kernel reads from a where it is
    (`ScanShift`), and x̄ = `cat([G_0, ...])` is written in place by the kernel making its tail
    (`_concat_slot`). Values and gradients of g and x against the recurrence as a Python loop,
    both scan forms and directions."""
    from torch._higher_order_ops import associative_scan

    def gated(g, x):
        return associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]), (g.exp(), x), dim=1,
                                reverse=reverse, combine_mode="generic")[1]

    def loop(g, x):
        h, ys = torch.zeros_like(x[:, 0]), [None] * x.shape[1]
        for t in (reversed(range(x.shape[1])) if reverse else range(x.shape[1])):
            h = g[:, t].exp() * h + x[:, t]
            ys[t] = h
        return torch.stack(ys, 1)

    gen = torch.Generator().manual_seed(7)
    g = torch.nn.functional.logsigmoid(torch.randn(shape, generator=gen) + 3).double()
    x, cot = torch.randn(shape, generator=gen).double(), torch.randn(shape, generator=gen).double()
    gq, xq = g.cuda().requires_grad_(), x.cuda().requires_grad_()
    # float64 on the GPU: the reference (5000 steps of autograd on the CPU, beside the other test
    # workers, ran past the timeout)
    reference = loop(gq, xq)
    reference.backward(cot.cuda())
    expected = (reference.detach().cpu(), gq.grad.cpu(), xq.grad.cpu())
    torch._dynamo.reset()
    f = torch.compile(gated, backend="tidal", fullgraph=True, options=STRICT)
    gc, xc = g.float().cuda().requires_grad_(), x.float().cuda().requires_grad_()
    out = f(gc, xc)
    out.backward(cot.float().cuda())
    for got, want in zip((out.detach(), gc.grad, xc.grad), expected):
        torch.testing.assert_close(got.cpu(), want.float(), rtol=2e-4, atol=2e-3)


def test_linear_recurrence_written_as_a_scan_step_trains_on_cuda():
    """h = exp(g_t) h + x_t as a `scan` step over dim 1 of [B, T, D] (`tidal-affine-scans`: the
    forward and its adjoint become associative scans), forward and gradients of g and x against
    the same recurrence as a Python loop on the GPU."""
    from torch._higher_order_ops import scan

    def by_scan(g, x):
        def step(h, gx):
            h = gx[0].exp() * h + gx[1]
            return h, h.clone()

        ys = scan(step, torch.zeros_like(x[:, 0]), (g, x), dim=1)[1]
        return ys if ys.shape == x.shape else ys.movedim(0, 1)  # torch 2.11 stacks on dim 0

    from test_affine_scans import _gated_loop

    def loop(g, x):
        return _gated_loop(g, x)[1]

    gen = torch.Generator().manual_seed(6)
    g = torch.nn.functional.logsigmoid(torch.randn(4, 200, 64, generator=gen) + 2).cuda()
    x = torch.randn(4, 200, 64, generator=gen).cuda()
    cot = torch.randn(4, 200, 64, generator=gen).cuda()
    torch._dynamo.reset()
    f = torch.compile(by_scan, backend="tidal", fullgraph=True, options=STRICT)
    grads = []
    for fn in (f, loop):
        gq, xq = g.clone().requires_grad_(), x.clone().requires_grad_()
        out = fn(gq, xq)
        out.backward(cot)
        grads.append((out.detach(), gq.grad, xq.grad))
    for got, expected in zip(*grads):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
