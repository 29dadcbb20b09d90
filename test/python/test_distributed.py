"""Data-parallel training through torch.compile(backend="tidal"): DDP and FSDP2 (`fully_shard`),
2 processes (gloo on the CPU, NCCL on 2 GPUs), each rank with its own shard of the batch. After 3
SGD steps every rank's full parameters must match one process that trains the same model, its time
loop a Python for-loop in eager, on the whole batch (loop_reference.py says why the reference is
not eager's own `scan` autograd). Strict: a graph tidal cannot compile raises in the rank.

One pair of processes per backend trains all three set-ups in turn (spawning and the first
compiles cost most of the time; the later set-ups hit tidal's in-memory artifact cache):
- `ddp`: DDP, one bucket, so DDPOptimizer leaves Dynamo's graph whole;
- `ddp-split`: DDP with tiny buckets, so DDPOptimizer splits the graph at the bucket boundary
  (input projection + scan | head) and tidal compiles each piece;
- `fsdp2`: `fully_shard` on the model; its hooks run in eager around the compiled forward.

docs/distributed.md says how tidal composes with DDP and FSDP2.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._higher_order_ops import associative_scan, scan

import tidal  # noqa: F401 - registers backend="tidal" (in the spawned ranks too)
from loop_reference import python_loops

try:  # torch >= 2.6
    from torch.distributed.fsdp import fully_shard
except ImportError:  # older: the composable API's own path
    from torch.distributed._composable.fsdp import fully_shard

STRICT = {"fallback": "error"}
WORLD = 2
B, T, D, H, O = 4, 6, 8, 16, 3  # B: one rank's shard of the batch
STEPS, LR = 3, 0.5
WRAPPERS = ("ddp", "ddp-split", "fsdp2")
TIMEOUT_S = 300  # a hung collective fails the test instead of hanging the run


class GRUScan(torch.nn.Module):
    """An input projection, a GRU layer (nn.GRU's cell, parameters and initialization) whose time
    loop is a `scan`, and a linear head: batch-first (B, T, D) → (B, T, O)."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        bound = 1 / math.sqrt(H)

        def uniform(*shape):
            return torch.nn.Parameter(torch.rand(*shape, generator=gen) * 2 * bound - bound)

        self.w_ih, self.w_hh = uniform(3 * H, D), uniform(3 * H, H)
        self.b_ih, self.b_hh = uniform(3 * H), uniform(3 * H)
        # (outside the scan: DDPOptimizer counts only parameters that ops outside HOPs use, and
        # needs some on both sides of a bucket boundary to split the graph)
        self.proj, self.head = torch.nn.Linear(D, D), torch.nn.Linear(H, O)
        with torch.no_grad():
            for p in (*self.proj.parameters(), *self.head.parameters()):
                p.copy_(uniform(*p.shape))

    def forward(self, x):
        def step(h, x_t):
            gx = x_t @ self.w_ih.t() + self.b_ih
            gh = h @ self.w_hh.t() + self.b_hh
            r = torch.sigmoid(gx[:, :H] + gh[:, :H])
            z = torch.sigmoid(gx[:, H : 2 * H] + gh[:, H : 2 * H])
            n = torch.tanh(gx[:, 2 * H :] + r * gh[:, 2 * H :])
            h = (1 - z) * n + z * h
            return h, h.clone()

        h0 = torch.zeros(x.shape[0], H, dtype=x.dtype, device=x.device)
        _, hs = scan(step, h0, self.proj(x).transpose(0, 1))
        return self.head(hs.transpose(0, 1))


def _batch():
    """The whole batch (WORLD shards of B along dim 0) and its target."""
    gen = torch.Generator().manual_seed(11)
    return torch.randn(WORLD * B, T, D, generator=gen), torch.randn(WORLD * B, T, O, generator=gen)


def _train(model, forward, x, target):
    """STEPS of SGD on a mean-reduced loss (DDP and FSDP2 average the ranks' gradients, so the
    ranks' mean over equal shards is the whole batch's); the loss before each step."""
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        loss = torch.nn.functional.mse_loss(forward(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


# -- the ranks ---------------------------------------------------------------------------------------


def _wrapped(model, wrapper, device):
    """The model in its data-parallel wrapper, and the module whose parameters it trains."""
    if wrapper in ("ddp", "ddp-split"):
        kwargs = {"device_ids": [device.index]} if device.type == "cuda" else {}
        if wrapper == "ddp-split":
            # DDPOptimizer takes the first bucket's cap from here (1 MiB, and asserts that the
            # other buckets' is no smaller): 204 bytes of head parameters fill it.
            dist._DEFAULT_FIRST_BUCKET_BYTES = 64
            kwargs["bucket_cap_mb"] = 256 / 2**20
        ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
        return ddp, ddp.module
    from torch.distributed.device_mesh import init_device_mesh

    fully_shard(model, mesh=init_device_mesh(device.type, (WORLD,)))
    return model, model


@contextlib.contextmanager
def _counting_compiles():
    """Counts the Dynamo graphs given to tidal and the programs tidal compiles (strict mode makes
    each either a program or an error; the counts show that there were graphs at all)."""
    import tidal.compiler
    import tidal.dynamo

    counts = {"graphs": 0, "programs": 0}
    backend, compile_program = tidal.dynamo._compile_dynamo_graph, tidal.compiler.compile_graph_module

    def counting_backend(*args, **kwargs):
        counts["graphs"] += 1
        return backend(*args, **kwargs)

    def counting_program(*args, **kwargs):
        counts["programs"] += 1
        return compile_program(*args, **kwargs)

    tidal.dynamo._compile_dynamo_graph, tidal.compiler.compile_graph_module = counting_backend, counting_program
    try:
        yield counts
    finally:
        tidal.dynamo._compile_dynamo_graph, tidal.compiler.compile_graph_module = backend, compile_program


def _full(p):
    return p.full_tensor() if hasattr(p, "full_tensor") else p  # FSDP2's parameters: sharded DTensors


def _rank(rank, backend, rendezvous, out_dir):
    """One rank: trains its shard in each set-up in turn and saves its full parameters, losses and
    compile counts; a failure is saved as its traceback (and raised: the process exits nonzero)."""
    try:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # as torchrun's OMP_NUM_THREADS=1: the ranks share the cores
        if backend == "nccl":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend, init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        try:
            x, target = _batch()
            shard = slice(rank * B, (rank + 1) * B)
            x, target = x[shard].to(device), target[shard].to(device)
            first_bucket = dist._DEFAULT_FIRST_BUCKET_BYTES
            for wrapper in WRAPPERS:
                torch._dynamo.reset()
                model, trained = _wrapped(GRUScan().to(device), wrapper, device)
                with _counting_compiles() as counts:
                    losses = _train(trained, torch.compile(model, backend="tidal", options=STRICT), x, target)
                dist._DEFAULT_FIRST_BUCKET_BYTES = first_bucket
                params = {name: _full(p).detach().cpu() for name, p in trained.named_parameters()}
                result = {"params": params, "losses": losses.cpu(), **counts}
                torch.save(result, os.path.join(out_dir, f"{wrapper}.rank{rank}.pt"))
        finally:
            dist.destroy_process_group()
    except BaseException:
        with open(os.path.join(out_dir, f"rank{rank}.error"), "w") as f:
            f.write(traceback.format_exc())
        raise


def _run_ranks(backend, out_dir):
    """Spawns the WORLD ranks and waits for them: each set-up's per-rank results, and the failed
    ranks' tracebacks ("" if none failed). When one rank fails, torch.multiprocessing ends the
    others."""
    args = (backend, str(out_dir / "rendezvous"), str(out_dir))
    context = mp.start_processes(_rank, args=args, nprocs=WORLD, join=False, start_method="spawn")
    failure = ""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {WORLD} ranks did not finish in {TIMEOUT_S} s")
    except Exception as exc:  # noqa: BLE001 - reported by every test that lacks its results
        # the first rank to fail first: the others' errors are mostly its peers' lost connections
        errors = sorted((f.stat().st_mtime, f.stem, f.read_text()) for f in out_dir.glob("rank*.error"))
        failure = "\n".join(f"{stem}:\n{text}" for _, stem, text in errors) or f"{type(exc).__name__}: {exc}"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join()
    results = {}
    for wrapper in WRAPPERS:
        files = [out_dir / f"{wrapper}.rank{r}.pt" for r in range(WORLD)]
        if all(f.exists() for f in files):
            results[wrapper] = [torch.load(f) for f in files]
    return results, failure


def _cuda_pair():
    return torch.cuda.is_available() and torch.cuda.device_count() >= WORLD and dist.is_nccl_available()


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("gloo", id="cpu-gloo", marks=pytest.mark.skipif(not dist.is_gloo_available(), reason="no gloo")),
        pytest.param(
            "nccl", id="cuda-nccl", marks=pytest.mark.skipif(not _cuda_pair(), reason=f"needs {WORLD} CUDA GPUs and NCCL")
        ),
    ],
)
def trained(request, tmp_path_factory):
    return _run_ranks(request.param, tmp_path_factory.mktemp(f"ranks-{request.param}"))


@pytest.fixture(scope="module")
def reference():
    """The Python-loop model trained in eager on the whole batch, in this process."""
    model = GRUScan()
    x, target = _batch()
    with python_loops(model):
        losses = _train(model, model, x, target)
    assert losses[-1] < losses[0]  # it does train
    return {name: p.detach() for name, p in model.named_parameters()}, losses


@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_data_parallel_training_matches_a_python_loop(trained, reference, wrapper):
    results, failure = trained
    if wrapper not in results:
        pytest.fail(f"{wrapper}: a rank failed\n{failure}", pytrace=False)
    expected, expected_losses = reference
    for rank, result in enumerate(results[wrapper]):
        for name, p in result["params"].items():
            torch.testing.assert_close(p, expected[name], msg=lambda m: f"rank {rank}, {name}: {m}")
        # every graph trained: a forward and a backward program each
        assert result["programs"] == 2 * result["graphs"] >= 2, result
    # the ranks' mean loss over equal shards is the whole batch's
    torch.testing.assert_close(sum(r["losses"] for r in results[wrapper]) / WORLD, expected_losses)
    if wrapper == "ddp-split":
        assert results[wrapper][0]["graphs"] == 2  # DDPOptimizer's two pieces, each compiled by tidal


# -- DDPOptimizer's graphs are tidal's ----------------------------------------------------------------


class MatrixProducts(torch.nn.Module):
    """Prefix products of T matrices: a generic-mode associative_scan (a matrix-product combine)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3, generator=torch.Generator().manual_seed(5)) * 0.3)

    def forward(self, x):
        return associative_scan(lambda a, b: a @ b, x + self.w, dim=0, combine_mode="generic")


def test_a_graph_ddp_optimizer_compiles_is_tidals(tmp_path, monkeypatch):
    """Under DDP, Dynamo compiles for DDPOptimizer.compile_fn, which passes the graph on to tidal:
    the graph is still recognised as tidal's while Dynamo builds it, so a generic associative_scan
    stays one HOP (PyTorch's own path unrolls it into slices, pads and matmuls) and differentiates
    with tidal's rule. One process, world size 1."""
    import tidal.dynamo

    graphs = []
    backend = tidal.dynamo._compile_dynamo_graph

    def recording(gm, *args, **kwargs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return backend(gm, *args, **kwargs)

    monkeypatch.setattr(tidal.dynamo, "_compile_dynamo_graph", recording)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model = MatrixProducts()
        x = torch.randn(5, 3, 3, generator=torch.Generator().manual_seed(6))
        ys = torch.compile(torch.nn.parallel.DistributedDataParallel(model), backend="tidal", options=STRICT)(x)
        (grad,) = torch.autograd.grad((ys * ys).mean(), model.w)
    finally:
        dist.destroy_process_group()
    assert len(graphs) == 1 and "associative_scan" in graphs[0], graphs
    products, expected = [], model.w.detach().clone().requires_grad_()
    for m in x + expected:
        products.append(m if not products else products[-1] @ m)
    expected_ys = torch.stack(products)
    torch.testing.assert_close(ys, expected_ys)
    torch.testing.assert_close(grad, torch.autograd.grad((expected_ys * expected_ys).mean(), expected)[0])
