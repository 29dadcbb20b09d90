"""The benchmark cases of bench/run.py.

Each case says which units to run (`units`: one fresh process each, see harness.run_unit), how to
run one unit in the child (`run_unit`: yields (row, column, record)), which columns and metrics the
table shows, and how to summarise its rows. torch is imported only on the child side.
"""

from __future__ import annotations

import os
import statistics
import time

BACKENDS = ("eager", "inductor", "tidal")


def _u(case, column, backend, rows, variant=None, params=None, env=None):
    """A unit: one process running `backend` for the given rows (cells: (row, column))."""
    return {
        "case": case, "column": column, "backend": backend, "variant": variant,
        "params": params or {}, "cells": [[r, column] for r in rows], "env": env or {},
    }


# glibc serves every buffer of 64 KiB or more with its own mapping and unmaps it when freed, so the
# RSS follows the live buffers. Only for measuring memory: under it every large buffer page-faults
# afresh on each call, which users' programs (and the timings) do not pay.
MEMORY_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def memory_twins(units, device):
    """On the CPU each configuration runs twice: timed with the default allocator, and once more
    under MEMORY_ENV for its peak memory (run.py merges the two records of a cell)."""
    if device != "cpu":
        return units
    return [dict(u, part=part, env={**u["env"], **(MEMORY_ENV if part == "memory" else {})})
            for u in units for part in ("time", "memory")]


def _std_columns():
    return [{"key": b, "backend": b, "title": b} for b in BACKENDS]


class Case:
    name = ""
    title = ""
    description = ""
    # metrics shown per column: (record key, header, scale, format)
    metrics = [("time_s", "ms", 1e3, "{:.3f}")]
    show_compile = True
    ratios = True  # tidal speedup vs eager and vs inductor from time_s

    def columns(self):
        return _std_columns()

    def units(self, quick: bool, device: str):
        raise NotImplementedError

    def row_params(self, quick: bool) -> dict:
        return {}

    def rows_for(self, quick: bool, device: str) -> dict:
        """The rows measured on `device` (most cases: the same everywhere)."""
        return self.row_params(quick)

    def run_unit(self, ctx, unit):
        raise NotImplementedError

    def summarize(self, rows: list[dict]) -> dict:
        return {}


# ----------------------------------------------------------------------------------------------
# programs (child side: these import torch)


def rnn_params(h, device, requires_grad=False):
    import torch

    g = torch.Generator().manual_seed(0)
    w = (torch.randn(h, h, generator=g) * h**-0.5).to(device)
    u = (torch.randn(h, h, generator=g) * h**-0.5).to(device)
    b = (torch.randn(h, generator=g) * 0.1).to(device)
    return [torch.nn.Parameter(t, requires_grad=requires_grad) for t in (w, u, b)]


def make_rnn(kind: str, h: int, device: str, requires_grad=False):
    """h_t = tanh(x_t W + h_{t-1} U + b) over xs [T, B, H]; returns (h_T, all h_t)."""
    import torch
    from torch._higher_order_ops import scan

    class RNNScan(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W, self.U, self.b = rnn_params(h, device, requires_grad)

        def forward(self, h0, xs):
            def step(hh, x):
                hh = torch.tanh(x @ self.W + hh @ self.U + self.b)
                return hh, hh.clone()

            return scan(step, h0, xs)

    class RNNLoop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W, self.U, self.b = rnn_params(h, device, requires_grad)

        def forward(self, h0, xs):
            hh, ys = h0, []
            for t in range(xs.shape[0]):
                hh = torch.tanh(xs[t] @ self.W + hh @ self.U + self.b)
                ys.append(hh)
            return hh, torch.stack(ys)

    return (RNNScan if kind == "scan" else RNNLoop)()


def rnn_inputs(t, b, h, device):
    import torch

    g = torch.Generator().manual_seed(1)
    return (torch.zeros(b, h).to(device), torch.randn(t, b, h, generator=g).to(device))


def while_program(i0, x, n):
    from torch._higher_order_ops import while_loop

    def cond_fn(i, y):
        return i < n

    def body_fn(i, y):
        return i + 1, y * 0.5 + 1

    return while_loop(cond_fn, body_fn, (i0, x))


def linear_recurrence(combine_mode):
    from torch._higher_order_ops import associative_scan

    def program(a, b):
        def combine(left, right):
            a1, b1 = left
            a2, b2 = right
            return a1 * a2, a2 * b1 + b2

        return associative_scan(combine, (a, b), dim=0, combine_mode=combine_mode)[1]

    return program


def cond_clamp(x):
    import torch

    def scrub(t):
        return torch.nan_to_num(t, 0.0, 1e4, -1e4)

    def identity(t):
        return t.clone()

    return torch.cond(x.isnan().any() | x.isinf().any(), scrub, identity, (x,))


def chunked_ce_programs(chunk: int):
    """Mean cross-entropy of hidden @ weight against integer targets, as fn(hidden, targets, weight):
    full logits ("naive"), chunk by chunk in a Python loop ("loop"), or chunk by chunk with scan
    ("scan", paper appendix F.3)."""
    import torch
    from torch._higher_order_ops import scan

    def chunk_nll_sum(h, t, weight):
        logits = h @ weight
        lse = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(1, t.unsqueeze(1)).squeeze(1)
        return (lse - picked).sum()

    def naive(hidden, targets, weight):
        return chunk_nll_sum(hidden, targets, weight) / hidden.shape[0]

    def loop(hidden, targets, weight):
        n = hidden.shape[0]
        total = hidden.new_zeros(())
        for s in range(0, n, chunk):
            total = total + chunk_nll_sum(hidden[s:s + chunk], targets[s:s + chunk], weight)
        return total / n

    def scanned(hidden, targets, weight):
        n = hidden.shape[0]
        hs = hidden.reshape(n // chunk, chunk, hidden.shape[1])
        ts = targets.reshape(n // chunk, chunk)

        def step(acc, xs):
            h, t = xs
            s = chunk_nll_sum(h, t, weight)
            return acc + s, s.clone()

        total, _ = scan(step, hidden.new_zeros(()), (hs, ts))
        return total / n

    return {"naive": naive, "loop": loop, "scan": scanned}


def make_chunked_ce(variant: str, d: int, vocab: int, chunk: int, device: str):
    """`chunked_ce_programs`' variant over a fixed weight: fn(hidden, targets)."""
    weight = make_weight(dict(d=d, V=vocab), device)
    program = chunked_ce_programs(chunk)[variant]
    return lambda hidden, targets: program(hidden, targets, weight)


# ----------------------------------------------------------------------------------------------
# cases


class CompileTime(Case):
    name = "compile_time"
    title = "Compile time vs trip count, RNN cell h = tanh(x_t W + h U + b)"
    description = (
        "Cold compile time (first call minus steady-state call, fresh caches, after compiling an "
        "unrelated tiny graph once per process) for T steps: a Python for-loop (Dynamo unrolls it: T "
        "cells in one straight-line graph) under Inductor and under tidal, and scan under Inductor and "
        "under tidal. Ratio column: t(T)/t(T_min)."
    )
    metrics = [("compile_s", "compile s", 1.0, "{:.2f}"), ("compile_ratio", "t/t0", 1.0, "{:.2f}")]
    show_compile = False
    ratios = False
    COLS = [("inductor:loop", "inductor", "loop", "inductor for-loop"),
            ("tidal:loop", "tidal", "loop", "tidal for-loop"),
            ("inductor:scan", "inductor", "scan", "inductor scan"),
            ("tidal:scan", "tidal", "scan", "tidal scan")]

    def sizes(self, quick):
        return dict(B=4, H=16, Ts=[4, 16]) if quick else dict(B=32, H=128, Ts=[8, 32, 128, 512])

    def columns(self):
        return [{"key": k, "backend": b, "title": t} for k, b, _, t in self.COLS]

    def row_params(self, quick):
        s = self.sizes(quick)
        return {f"T={t}": {"T": t, "B": s["B"], "H": s["H"]} for t in s["Ts"]}

    def units(self, quick, device):
        s = self.sizes(quick)
        return [_u(self.name, key, backend, [f"T={t}"], variant=variant, params={"T": t, "B": s["B"], "H": s["H"]})
                for t in s["Ts"] for key, backend, variant, _ in self.COLS]

    def run_unit(self, ctx, unit):
        from harness import measure

        p = unit["params"]
        model = make_rnn(unit["variant"], p["H"], ctx.device)
        inputs = rnn_inputs(p["T"], p["B"], p["H"], ctx.device)
        import torch

        with torch.no_grad():
            ref = model(*inputs)
        rec = measure(ctx, unit["backend"], model, inputs, reference=ref)
        yield f"T={p['T']}", unit["column"], rec

    def summarize(self, rows):
        out = {}
        for col, _, _, _ in self.COLS:
            first = None
            for row in rows:
                rec = row["cells"].get(col, {})
                if rec.get("status") != "ok":
                    continue
                if first is None:
                    first = (row["label"], rec["compile_s"])
                rec["compile_ratio"] = rec["compile_s"] / first[1] if first[1] > 0 else None
            if first is not None:
                last = [r for r in rows if r["cells"].get(col, {}).get("status") == "ok"][-1]
                out[f"{col} compile t({last['label']})/t({first[0]})"] = last["cells"][col]["compile_ratio"]
        return out


class RnnScan(Case):
    name = "rnn_scan"
    title = "RNN over a sequence with scan"
    description = (
        "h_t = tanh(x_t W + h U + b) via scan, forward (no_grad) and forward+backward (grad of "
        "sum of outputs wrt W, U, b). The same scan program under every backend."
    )

    def sizes(self, quick):
        return dict(T=8, B=4, H=16) if quick else dict(T=128, B=32, H=128)

    def rows(self, quick):
        s = self.sizes(quick)
        rows = [f"forward T={s['T']}"]
        if not quick:
            rows += [f"forward+backward T={s['T']}", f"forward T={s['T']}, capture_scalar_outputs=False"]
        return rows

    def row_params(self, quick):
        return {r: self.sizes(quick) for r in self.rows(quick)}

    def units(self, quick, device):
        rows = self.rows(quick)
        units = [_u(self.name, b, b, rows[:2], params=self.sizes(quick)) for b in BACKENDS]
        if not quick:
            units.append(_u(self.name, "inductor", "inductor", rows[2:], variant="no_capture", params=self.sizes(quick)))
        return units

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        p = unit["params"]
        fwd, fwdbwd = f"forward T={p['T']}", f"forward+backward T={p['T']}"
        inputs = rnn_inputs(p["T"], p["B"], p["H"], ctx.device)
        if unit["variant"] == "no_capture":
            torch._dynamo.config.capture_scalar_outputs = False
            model = make_rnn("scan", p["H"], ctx.device)
            with torch.no_grad():
                ref = model(*inputs)
            rec = measure(ctx, unit["backend"], model, inputs, reference=ref)
            rec["capture_scalar_outputs"] = False
            yield f"{fwd}, capture_scalar_outputs=False", unit["column"], rec
            return
        model = make_rnn("scan", p["H"], ctx.device)
        with torch.no_grad():
            ref = model(*inputs)
        yield fwd, unit["column"], measure(ctx, unit["backend"], model, inputs, reference=ref)
        if any(c[0] == fwdbwd for c in unit["cells"]):
            model = make_rnn("scan", p["H"], ctx.device, requires_grad=True)
            params = list(model.parameters())

            def train_step(fn, xs):
                for q in params:
                    q.grad = None
                h_last, ys = fn(*xs)
                (h_last.sum() + ys.sum()).backward()
                return tuple(q.grad.clone() for q in params)

            # The reference is the Python loop's gradients: eager scan's own autograd (torch 2.11, CUDA)
            # was measured 100% off them, while tidal's matched them to 1e-7 relative.
            loop = make_rnn("loop", p["H"], ctx.device, requires_grad=True)
            loop_params = list(loop.parameters())
            ref = _train_step(loop_params)(loop, inputs) if unit["backend"] != "eager" else None
            yield fwdbwd, unit["column"], measure(ctx, unit["backend"], model, inputs, invoke=train_step,
                                                  reference=ref, grad=True)

    def summarize(self, rows):
        fwd = rows[0]
        out = {f"{fwd['label']}: tidal speedup vs eager": fwd["ratios"].get("tidal_vs_eager"),
               f"{fwd['label']}: tidal speedup vs inductor": fwd["ratios"].get("tidal_vs_inductor")}
        for r in rows[2:]:
            rec = r["cells"].get("inductor", {})
            st = rec.get("status")
            if st == "ok":
                st = f"ok, {rec['time_s'] * 1e3:.3f} ms (compile {rec.get('compile_s', 0):.2f} s)"
            elif st == "failed":
                st = f"failed: {rec.get('error_type')}: {rec.get('error')}"
            out[f"inductor with {r['label'].split(', ', 1)[-1]}"] = st
        return out


class WhileLoop(Case):
    name = "while_loop"
    title = "while_loop per-iteration cost, tiny body"
    description = (
        "Carries (i, x), x a 4-element tensor; body (i + 1, x * 0.5 + 1); cond i < n with the trip "
        "count n a tensor input, so one compilation serves every n. Metric: iterations per second."
    )
    metrics = [("time_s", "ms", 1e3, "{:.3f}"), ("iters_per_s", "it/s", 1.0, "{:.3g}")]

    def trips(self, quick):
        return [10, 100] if quick else [1_000, 10_000, 100_000]

    def row_params(self, quick):
        return {f"n={n}": {"n": n} for n in self.trips(quick)}

    def units(self, quick, device):
        return [_u(self.name, b, b, list(self.row_params(quick))) for b in BACKENDS]

    def run_unit(self, ctx, unit):
        import torch

        x0 = torch.tensor([0.0, 1.0, -3.0, 10.0], device=ctx.device)
        i0 = torch.zeros((), dtype=torch.int64, device=ctx.device)
        fn_cache = {}
        for row, params in self.row_params(ctx.quick).items():
            if [row, unit["column"]] not in unit["cells"]:
                continue
            n = params["n"]
            nt = torch.tensor(n, dtype=torch.int64, device=ctx.device)
            # closed form of n steps of x <- x/2 + 1 (an eager reference would take seconds)
            ref = (torch.tensor(n, dtype=torch.int64, device=ctx.device), 2.0 + (x0 - 2.0) * 0.5**n)
            rec = _measure_shared(ctx, unit["backend"], while_program, (i0, x0, nt), ref, fn_cache)
            if rec.get("status") == "ok":
                rec["iters_per_s"] = n / rec["time_s"]
            yield row, unit["column"], rec

    def summarize(self, rows):
        return {f"{r['label']}: tidal it/s / inductor it/s": r["ratios"].get("tidal_vs_inductor") for r in rows}


def _measure_shared(ctx, backend, program, inputs, ref, cache):
    """measure(), but one compiled function serves every row (same graph, new input values):
    only the first row's first call compiles. A fallback of the first row holds for all rows
    (tidal warns once per graph, so later rows could not see it)."""
    import torch

    import harness

    if "fallback" in cache:
        return dict(cache["fallback"])
    first = "fn" not in cache
    if first:
        torch._dynamo.reset()
        cache["fn"] = harness.compiled(program, backend)
    rec = harness.measure(ctx, backend, program, inputs, reference=ref, fn=cache["fn"])
    if rec.get("status") == "fallback":
        cache["fallback"] = rec
    elif rec.get("status") == "failed":
        cache.pop("fn", None)
    elif not first and "compile_s" in rec:
        del rec["compile_s"]  # compiled by an earlier row
        rec["note"] = "compiled in the first row"
    return rec


def copy_bandwidth(ctx) -> float:
    """GB/s of a tensor copy on ctx.device (bytes read plus written; median of 10 copies after 3):
    the memory-bound ceiling a scan's effective GB/s is read against. 256 MiB on a GPU (past its
    L2), 64 MiB on the CPU (4 MiB with --quick)."""
    import torch

    n = (1 << 22 if ctx.quick else 1 << 24) if ctx.device == "cpu" else 1 << 26
    x = torch.rand(n, device=ctx.device)
    y = torch.empty_like(x)
    times = []
    for i in range(13):
        if ctx.device == "cuda":  # device time: a host clock would add the launch and the sync
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            y.copy_(x)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            y.copy_(x)
            seconds = time.perf_counter() - t0
        if i >= 3:
            times.append(seconds)
    return 2 * x.numel() * x.element_size() / statistics.median(times) / 1e9


def recurrence_inputs(p, device):
    """a in [0.9, 1), b normal, both [T, C] (a stable recurrence)."""
    import torch

    g = torch.Generator().manual_seed(3)
    a = (0.9 + 0.1 * torch.rand(p["T"], p["C"], generator=g)).to(device)
    return a, torch.randn(p["T"], p["C"], generator=g).to(device)


class AssociativeScan(Case):
    name = "associative_scan"
    title = "Linear recurrence h_t = a_t h_{t-1} + b_t with associative_scan"
    description = (
        "16 channels, a, b of shape [T, 16] float32, combine ((a1, b1), (a2, b2)) -> (a1 a2, a2 b1 + b2), "
        "combine_mode='generic' on the CPU; on cuda 'pointwise' for eager and Inductor (which need it) and "
        "'generic' for tidal (one HOP either way). Effective GB/s = bytes of a and b read plus h written / time; "
        "'% copy' = that against the copy bandwidth measured in the same process (a large tensor copied on "
        "the same device, 256 MiB on a GPU; bytes read plus written)."
    )
    metrics = [("time_s", "ms", 1e3, "{:.3f}"), ("gb_per_s", "GB/s", 1.0, "{:.2f}"),
               ("back_to_back_s", "ms b2b", 1e3, "{:.3f}"), ("gb_per_s_b2b", "GB/s b2b", 1.0, "{:.2f}"),
               ("pct_of_copy_b2b", "% copy b2b", 1.0, "{:.0f}")]
    C = 16

    def lengths(self, quick, device="cpu"):
        if quick:
            return [64, 256]
        return [1024, 65536, 1 << 20] if device == "cuda" else [1024, 16384, 131072]

    def row_params(self, quick, device="cpu"):
        return {f"T={t}": {"T": t, "C": self.C} for t in self.lengths(quick, device)}

    def rows_for(self, quick, device):
        return self.row_params(quick, device)

    def units(self, quick, device):
        return [_u(self.name, b, b, list(self.row_params(quick, device))) for b in BACKENDS]

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        cuda_eager_mode = ctx.device == "cuda" and unit["backend"] != "tidal"
        program = linear_recurrence("pointwise" if cuda_eager_mode else "generic")
        copy_gb_per_s = copy_bandwidth(ctx)
        for row, p in self.row_params(ctx.quick, ctx.device).items():
            a, b = recurrence_inputs(p, ctx.device)
            with torch.no_grad():
                ref = program(a, b)
            rec = measure(ctx, unit["backend"], program, (a, b), reference=ref)
            if rec.get("status") == "ok":
                nbytes = 3 * a.numel() * a.element_size()
                rec["gb_per_s"] = nbytes / rec["time_s"] / 1e9
                if "back_to_back_s" in rec:
                    rec["gb_per_s_b2b"] = nbytes / rec["back_to_back_s"] / 1e9
                    rec["pct_of_copy_b2b"] = 100 * rec["gb_per_s_b2b"] / copy_gb_per_s
                rec["copy_gb_per_s"] = copy_gb_per_s
            yield row, unit["column"], rec


class CondClamp(Case):
    name = "cond_clamp"
    title = "cond: scrub NaN/inf only when present"
    description = (
        "torch.cond(x.isnan().any() | x.isinf().any(), nan_to_num(t, 0, 1e4, -1e4), t.clone(), (x,)) "
        "on a 4096x4096 float32 tensor, clean and with one NaN (one compilation serves both). On cuda, "
        "'b2b': per call with calls queued back to back (the device's time; 'ms' synchronizes every call)."
    )
    metrics = [("time_s", "ms", 1e3, "{:.3f}"), ("back_to_back_s", "ms b2b", 1e3, "{:.3f}")]

    def n(self, quick):
        return 256 if quick else 4096

    def row_params(self, quick):
        n = self.n(quick)
        return {f"{n}x{n} clean": {"N": n, "nan": False}, f"{n}x{n} one NaN": {"N": n, "nan": True}}

    def units(self, quick, device):
        return [_u(self.name, b, b, list(self.row_params(quick))) for b in BACKENDS]

    def run_unit(self, ctx, unit):
        import torch

        fn_cache = {}
        for row, p in self.row_params(ctx.quick).items():
            x = torch.randn(p["N"], p["N"], generator=torch.Generator().manual_seed(4)).to(ctx.device)
            if p["nan"]:
                x[p["N"] // 3, p["N"] // 5] = float("nan")
            with torch.no_grad():
                ref = cond_clamp(x)
            yield row, unit["column"], _measure_shared(ctx, unit["backend"], cond_clamp, (x,), ref, fn_cache)


class ChunkedCE(Case):
    name = "chunked_ce"
    title = "Chunked cross-entropy (paper appendix F.3, scaled down)"
    description = (
        "Mean cross-entropy of hidden[N, d] @ W[d, V] against integer targets: full logits (naive), "
        "a Python loop over chunks (unrolled), and scan over chunks. Peak memory = extra peak RSS of one "
        "call (VmHWM after resetting it through /proc/self/clear_refs, minus RSS before the call; "
        "in a second process whose glibc maps every buffer of 64 KiB or more, so freed buffers leave the RSS; "
        "timed in a process with the default allocator); cuda: allocator peak."
    )
    metrics = [("time_s", "ms", 1e3, "{:.2f}"), ("peak_mem_mb", "peak MB", 1.0, "{:.1f}")]
    VARIANTS = [("naive", "naive (full logits)"), ("loop", "Python loop over chunks"), ("scan", "scan over chunks")]

    def sizes(self, quick):
        return dict(N=256, d=32, V=512, chunk=64) if quick else dict(N=4096, d=256, V=8192, chunk=512)

    def row_params(self, quick):
        return {label: dict(self.sizes(quick), variant=v) for v, label in self.VARIANTS}

    def units(self, quick, device):
        return memory_twins([_u(self.name, b, b, [label], variant=v, params=self.sizes(quick))
                             for v, label in self.VARIANTS for b in BACKENDS], device)

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        p = unit["params"]
        program = make_chunked_ce(unit["variant"], p["d"], p["V"], p["chunk"], ctx.device)
        g = torch.Generator().manual_seed(5)
        hidden = torch.randn(p["N"], p["d"], generator=g).to(ctx.device)
        targets = torch.randint(0, p["V"], (p["N"],), generator=g).to(ctx.device)
        with torch.no_grad():
            ref = torch.nn.functional.cross_entropy(hidden @ make_weight(p, ctx.device), targets)
        rec = measure(ctx, unit["backend"], program, (hidden, targets), reference=ref, memory=True)
        yield unit["cells"][0][0], unit["column"], rec


class ChunkedCETrain(ChunkedCE):
    name = "chunked_ce_train"
    title = "Chunked cross-entropy training step: gradients wrt hidden and weight"
    description = (
        "One forward+backward of the mean cross-entropy of hidden[N, d] @ W[d, V] (both require grad): "
        "full logits (naive), a Python loop over chunks, scan over chunks (tidal: its scan rule keeps only "
        "the accumulator entering each chunk and recomputes the chunk's logits in the backward, so no "
        "[N, V] logits are ever live). Peak memory = extra peak RSS of one step."
    )

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        p = unit["params"]
        g = torch.Generator().manual_seed(5)
        hidden = torch.randn(p["N"], p["d"], generator=g).to(ctx.device).requires_grad_()
        targets = torch.randint(0, p["V"], (p["N"],), generator=g).to(ctx.device)
        weight = make_weight(p, ctx.device).requires_grad_()
        program = chunked_ce_programs(p["chunk"])[unit["variant"]]
        step = _train_step([hidden, weight])
        ref_hidden, ref_weight = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
        ref = _train_step([ref_hidden, ref_weight])(
            lambda h, t, w: torch.nn.functional.cross_entropy(h @ w, t), (ref_hidden, targets, ref_weight))
        rec = measure(ctx, unit["backend"], program, (hidden, targets, weight), invoke=step, reference=ref,
                      grad=True, memory=True)
        yield unit["cells"][0][0], unit["column"], rec


def make_denoiser_sampler(c: int, device: str):
    """test/corpus/conv_denoiser_scan.py's sampler (a conv denoiser over a timestep schedule with
    scan) with `c` channels."""
    import torch

    from tidal.tools.tidal_compile import load_program_file

    corpus = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test", "corpus")
    model, _ = load_program_file(os.path.join(corpus, "conv_denoiser_scan.py"))
    torch.manual_seed(0)
    return type(model)(c).eval().to(device)


class ConvDenoiser(Case):
    name = "conv_denoiser"
    title = "Conv denoiser over a timestep schedule (scan; convolutions as ATen calls inside the loop)"
    description = (
        "x <- x - 0.1 * denoiser(x, t) for each t of a schedule, with scan; denoiser = Conv2d(3, c) -> "
        "GroupNorm(4, c) + Linear(1, c)(t) -> SiLU -> Conv2d(c, 3), float32, batch 2 "
        "(test/corpus/conv_denoiser_scan.py)."
    )

    def sizes(self, quick):
        return [(4, 16, 16)] if quick else [(10, 32, 32), (10, 64, 64)]

    def row_params(self, quick):
        return {f"T={t} {n}x{n} c={c}": {"T": t, "N": n, "C": c} for t, n, c in self.sizes(quick)}

    def units(self, quick, device):
        return [_u(self.name, b, b, [row], params=p) for row, p in self.row_params(quick).items() for b in BACKENDS]

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        p = unit["params"]
        program = make_denoiser_sampler(p["C"], ctx.device)
        g = torch.Generator().manual_seed(6)
        x = torch.randn(2, 3, p["N"], p["N"], generator=g).to(ctx.device)
        ts = torch.linspace(1.0, 0.05, p["T"]).to(ctx.device)
        with torch.no_grad():
            ref = program(x, ts)
        yield unit["cells"][0][0], unit["column"], measure(ctx, unit["backend"], program, (x, ts), reference=ref)


def _train_step(params):
    """invoke(fn, inputs): one forward+backward, gradients of sum of every output wrt `params`."""

    def step(fn, xs):
        for q in params:
            q.grad = None
        outs = fn(*xs)
        sum(o.sum() for o in (outs if isinstance(outs, (tuple, list)) else (outs,))).backward()
        return tuple(q.grad.clone() for q in params)

    return step


class RnnScanSizes(Case):
    name = "rnn_scan_sizes"
    title = "RNN scan forward over batch, width and length (run and compile time)"
    description = (
        "h_t = tanh(x_t W + h U + b) via scan, forward (no_grad), at several (B, H, T). On cuda tidal runs "
        "it as one persistent kernel where the step's weights fit on chip (H <= 128 in f32), else as a "
        "host loop of kernels."
    )

    SIZES = [(32, 128, 128), (256, 128, 128), (32, 64, 1024), (32, 256, 128)]

    def row_params(self, quick):
        sizes = [(4, 16, 8)] if quick else self.SIZES
        return {f"B={b} H={h} T={t}": dict(B=b, H=h, T=t) for b, h, t in sizes}

    def units(self, quick, device):
        return [_u(self.name, be, be, [row], params=p) for row, p in self.row_params(quick).items() for be in BACKENDS]

    def run_unit(self, ctx, unit):
        from harness import measure

        p = unit["params"]
        inputs = rnn_inputs(p["T"], p["B"], p["H"], ctx.device)
        model = make_rnn("scan", p["H"], ctx.device)
        loop = make_rnn("loop", p["H"], ctx.device)
        import torch

        with torch.no_grad():
            ref = loop(*inputs)
        yield unit["cells"][0][0], unit["column"], measure(ctx, unit["backend"], model, inputs, reference=ref)


class RnnTrain(Case):
    name = "rnn_train"
    title = "RNN forward+backward: Python loop vs scan"
    description = (
        "h_t = tanh(x_t W + h U + b), T=128, B=32, H=128: grad of sum(h_T) + sum(all h_t) wrt W, U, b. "
        "Columns: eager Python for-loop, eager scan (PyTorch's scan autograd), Inductor scan, tidal scan "
        "(tidal's scan rule: the hidden states it returns are the entering carries the backward reads, reverse scan of the step's VJP). Peak MB = extra "
        "peak RSS of one step. Target: tidal <= 0.5x the eager loop's time."
    )
    metrics = [("time_s", "ms", 1e3, "{:.2f}"), ("peak_mem_mb", "peak MB", 1.0, "{:.1f}")]
    COLS = [("eager:loop", "eager", "loop", "eager loop"), ("eager", "eager", "scan", "eager scan"),
            ("inductor", "inductor", "scan", "inductor scan"), ("tidal", "tidal", "scan", "tidal scan")]

    def sizes(self, quick):
        return dict(T=8, B=4, H=16) if quick else dict(T=128, B=32, H=128)

    def columns(self):
        return [{"key": k, "backend": b, "title": t} for k, b, _, t in self.COLS]

    def row_params(self, quick):
        s = self.sizes(quick)
        return {f"T={s['T']} B={s['B']} H={s['H']}": s}

    def units(self, quick, device):
        (row, s), = self.row_params(quick).items()
        return memory_twins([_u(self.name, k, b, [row], variant=v, params=s) for k, b, v, _ in self.COLS], device)

    def run_unit(self, ctx, unit):
        from harness import measure

        p = unit["params"]
        inputs = rnn_inputs(p["T"], p["B"], p["H"], ctx.device)
        ref_model = make_rnn("loop", p["H"], ctx.device, requires_grad=True)
        ref = _train_step(list(ref_model.parameters()))(ref_model, inputs)
        model = make_rnn(unit["variant"], p["H"], ctx.device, requires_grad=True)
        step = _train_step(list(model.parameters()))
        yield unit["cells"][0][0], unit["column"], measure(
            ctx, unit["backend"], model, inputs, invoke=step, reference=ref, grad=True, memory=True)

    def summarize(self, rows):
        t = {k: (v.get("time_s") if v.get("status") == "ok" else None) for k, v in rows[0]["cells"].items()}
        return {"tidal time / eager loop time (target <= 0.5)": t["tidal"] / t["eager:loop"]
                if t.get("tidal") and t.get("eager:loop") else None}


class AssociativeScanTrain(AssociativeScan):
    name = "associative_scan_train"
    title = "Linear recurrence forward+backward with associative_scan: time and peak memory vs T"
    description = (
        "h_t = a_t h_{t-1} + b_t over 16 channels via associative_scan (generic; on cuda pointwise for eager and "
        "Inductor), grad of sum(h) wrt a and b. tidal: results as the only residuals; the adjoint of this "
        "elementwise combine is a reverse associative scan over per-element affine maps (O(T)); PyTorch's rule for the HOP builds a TxT matrix. Peak MB = extra "
        "peak RSS of one step (cuda: allocator peak)."
    )
    metrics = [("time_s", "ms", 1e3, "{:.3f}"), ("peak_mem_mb", "peak MB", 1.0, "{:.1f}")]

    def lengths(self, quick, device="cpu"):
        return [64, 256] if quick else [1024, 8192, 65536]

    def units(self, quick, device):
        # one process per length: a failure (or PyTorch's TxT memory) at one T spares the others
        return memory_twins([_u(self.name, b, b, [row], params=p)
                             for row, p in self.row_params(quick).items() for b in BACKENDS], device)

    def run_unit(self, ctx, unit):
        from harness import measure

        p = unit["params"]
        program = linear_recurrence("pointwise" if ctx.device == "cuda" and unit["backend"] != "tidal" else "generic")
        a, b = (t.requires_grad_() for t in recurrence_inputs(p, ctx.device))

        def step(fn, xs):
            a.grad = b.grad = None
            fn(*xs).sum().backward()
            return a.grad.clone(), b.grad.clone()

        ref = step(program, (a, b)) if unit["backend"] != "eager" else None
        yield unit["cells"][0][0], unit["column"], measure(
            ctx, unit["backend"], program, (a, b), invoke=step, reference=ref, grad=True, memory=True)


def straight_line_program(kind: str, device: str):
    """(module or function, inputs) of one straight-line case: no control flow, the code around loops."""
    import torch

    g = torch.Generator().manual_seed(7)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    if kind == "rnn8":
        class Unrolled(torch.nn.Module):
            def __init__(self, h=128):
                super().__init__()
                self.W, self.U, self.b = rnn_params(h, device)

            def forward(self, xs):
                h = torch.zeros(xs.shape[1], xs.shape[2], device=xs.device)
                for t in range(8):
                    h = torch.tanh(xs[t] @ self.W + h @ self.U + self.b)
                return h

        return Unrolled(), (randn(8, 32, 128),)
    if kind == "mlp":
        torch.manual_seed(7)
        mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256), torch.nn.LayerNorm(256))
        return mlp.to(device), (randn(64, 256),)
    if kind == "attention":
        def attention(q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2) / 8, dim=-1) @ v

        return attention, (randn(4, 64, 32), randn(4, 64, 32), randn(4, 64, 32))
    if kind == "conv_block":
        torch.manual_seed(7)
        block = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.GroupNorm(8, 32), torch.nn.SiLU(),
                                    torch.nn.Conv2d(32, 32, 3, padding=1))
        return block.to(device), (randn(8, 32, 32, 32),)
    if kind == "encoder_layer":
        torch.manual_seed(7)
        layer = torch.nn.TransformerEncoderLayer(128, 4, dim_feedforward=512, dropout=0.0, batch_first=True)
        return layer.to(device).eval(), (randn(8, 64, 128),)
    raise ValueError(kind)


class StraightLine(Case):
    name = "straight_line"
    title = "Straight-line programs: the code around the loops"
    description = (
        "No control flow: an RNN cell unrolled 8 times by Dynamo (B=32, H=128), Linear(256,512)-GELU-"
        "Linear(512,256)-LayerNorm on [64, 256], softmax(q kT / 8) v on [4, 64, 32], Conv2d-GroupNorm-SiLU-"
        "Conv2d on [8, 32, 32, 32], a TransformerEncoderLayer (d=128, 4 heads, ff 512) on [8, 64, 128]; "
        "inference. Run with --threads 1 and --threads 2. Target: tidal >= 1.0x Inductor on every row."
    )
    ROWS = [("rnn8", "RNN cell x8 unrolled"), ("mlp", "MLP + LayerNorm"), ("attention", "attention [4,64,32]"),
            ("conv_block", "conv block"), ("encoder_layer", "encoder layer")]

    def row_params(self, quick):
        return {label: {"kind": kind} for kind, label in self.ROWS}

    def units(self, quick, device):
        return [_u(self.name, b, b, [label for _, label in self.ROWS]) for b in BACKENDS]

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        for kind, label in self.ROWS:
            program, inputs = straight_line_program(kind, ctx.device)
            with torch.no_grad():
                ref = program(*inputs)
            yield label, unit["column"], measure(ctx, unit["backend"], program, inputs, reference=ref)


def make_weight(p, device):
    import torch

    g = torch.Generator().manual_seed(2)
    return (torch.randn(p["d"], p["V"], generator=g) * p["d"] ** -0.5).to(device)


# ----------------------------------------------------------------------------------------------
# recurrences: standard and custom recurrent cells written as a scan step


RECURRENT_CELLS = ("rnn", "lstm", "gru", "ln_lstm", "mingru", "residual_rnn")
STANDARD_MODULES = {"rnn": "RNN", "lstm": "LSTM", "gru": "GRU"}  # cells torch.nn (cuDNN, oneDNN) has
# a custom cell against the standard cell of (about) equal FLOPs
CUSTOM_VS_STANDARD = {"ln_lstm": "lstm", "residual_rnn": "rnn", "mingru": "rnn"}
GATES = {"rnn": 1, "lstm": 4, "gru": 3, "ln_lstm": 4, "mingru": 2, "residual_rnn": 1}


def make_cell(kind: str, h: int, device: str, impl: str):
    """A recurrent cell over xs [T, B, H] returning every step's hidden state [T, B, H]: as a
    `scan` step (impl="scan"), as a Python loop (impl="loop"), or as torch.nn's module with the
    same weights (impl="module": RNN, LSTM and GRU only). Weights scaled by H^-1/2 as models are;
    gates in torch.nn's order (LSTM i, f, g, o; GRU r, z, n), x_t W + h U with W, U [H, gates*H]."""
    import torch
    import torch.nn.functional as F
    from torch._higher_order_ops import scan

    g = torch.Generator().manual_seed(0)
    n = GATES[kind]

    def param(*shape, scale):
        return torch.nn.Parameter((torch.randn(*shape, generator=g) * scale).to(device))

    class Cell(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W = param(h, n * h, scale=h**-0.5)
            self.U = param(h, n * h, scale=h**-0.5)
            self.b = param(n * h, scale=0.1)  # GRU: the input bias
            self.bh = param(n * h, scale=0.1)  # GRU: the hidden bias (r * (h U + b_hn))

        def init(self, xs):
            zeros = xs.new_zeros(xs.shape[1], h)
            return (zeros, zeros.clone()) if kind in ("lstm", "ln_lstm") else zeros

        def step(self, carry, x):
            if kind == "rnn":
                hh = torch.tanh(x @ self.W + carry @ self.U + self.b)
                return hh, hh.clone()
            if kind == "residual_rnn":  # post-norm, as a residual block keeps its scale over T steps
                hh = F.layer_norm(carry + torch.tanh(x @ self.W + carry @ self.U + self.b), (h,))
                return hh, hh.clone()
            if kind in ("lstm", "ln_lstm"):
                hh, c = carry
                xw, hu = x @ self.W, hh @ self.U
                if kind == "ln_lstm":  # with a gain of 0.5, as a trained one is (1 makes the cell chaotic at T=128)
                    xw, hu = 0.5 * F.layer_norm(xw, (n * h,)), 0.5 * F.layer_norm(hu, (n * h,))
                i, f, gg, o = (xw + hu + self.b).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
                hh = torch.sigmoid(o) * torch.tanh(F.layer_norm(c, (h,)) if kind == "ln_lstm" else c)
                return (hh, c), hh.clone()
            if kind == "gru":
                i_r, i_z, i_n = (x @ self.W + self.b).chunk(3, dim=-1)
                h_r, h_z, h_n = (carry @ self.U + self.bh).chunk(3, dim=-1)
                r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
                hh = (1 - z) * torch.tanh(i_n + r * h_n) + z * carry
                return hh, hh.clone()
            if kind == "mingru":
                z, candidate = (x @ self.W).chunk(2, dim=-1)
                z = torch.sigmoid(z)
                hh = (1 - z) * carry + z * candidate
                return hh, hh.clone()
            raise ValueError(kind)

        def forward(self, xs):
            if impl == "scan":
                return scan(self.step, self.init(xs), xs)[1]
            carry, ys = self.init(xs), []
            for t in range(xs.shape[0]):
                carry, y = self.step(carry, xs[t])
                ys.append(y)
            return torch.stack(ys)

    cell = Cell()
    if impl != "module":
        return cell

    class Module(torch.nn.Module):
        """torch.nn's cell with the scan cell's weights (nn stores W^T; RNN and LSTM add one bias)."""

        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, STANDARD_MODULES[kind])(h, h).to(device)
            with torch.no_grad():
                self.rnn.weight_ih_l0.copy_(cell.W.t())
                self.rnn.weight_hh_l0.copy_(cell.U.t())
                self.rnn.bias_ih_l0.copy_(cell.b)
                self.rnn.bias_hh_l0.copy_(cell.bh if kind == "gru" else torch.zeros_like(cell.bh))

        def forward(self, xs):
            return self.rnn(xs)[0]

    return Module()


def recurrence_xs(p, device):
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randn(p["T"], p["B"], p["H"], generator=g).to(device)


class _SizedFamily(Case):
    """A case family whose rows are sizes (`CPU_SIZES`, `GPU_SIZES`, `QUICK_SIZE`, or the
    comma-separated `AxBxC` list in the environment variable `SIZES_ENV`) and whose columns are
    `COLS` (key, backend, variant, title)."""

    ratios = False
    COLS: list = []
    CPU_SIZES: list = []
    GPU_SIZES: list = []
    QUICK_SIZE: tuple = ()
    SIZES_ENV = ""

    def columns(self):
        return [{"key": k, "backend": b, "title": t} for k, b, _, t in self.COLS]

    def sizes(self, quick, device):
        if os.environ.get(self.SIZES_ENV):
            return [tuple(int(v) for v in s.split("x")) for s in os.environ[self.SIZES_ENV].split(",")]
        return [self.QUICK_SIZE] if quick else (self.GPU_SIZES if device == "cuda" else self.CPU_SIZES)


class Recurrences(_SizedFamily):
    name = "recurrences"
    title = "recurrent cells written as a scan step, against cuDNN/oneDNN and JAX"
    description = (
        "Every step's hidden state of RNN-tanh, LSTM, GRU and three custom cells (LayerNorm-LSTM, minGRU, "
        "residual RNN) over xs [T, B, H] (input width H); forward (no_grad) and forward+backward "
        "(ys.backward(a fixed random cotangent), x and every weight requiring grad). Columns: the Python loop in eager, "
        "torch.nn's module (cuDNN on cuda, oneDNN on the CPU; standard cells only), Inductor and tidal on "
        "the scan, and on the CPU JAX (lax.scan under jit, bench/jax_cells.py, in its own venv named by "
        "TIDAL_BENCH_JAX_PYTHON). Values (ys; x's gradient) checked against the eager loop. Sizes: "
        "TIDAL_BENCH_RECURRENCE_SIZES=BxHxT,... overrides the rows' (B, H, T)."
    )
    COLS = [("loop", "eager", "loop", "eager loop"), ("nn", "eager", "module", "torch.nn"),
            ("inductor", "inductor", "scan", "inductor"), ("tidal", "tidal", "scan", "tidal"),
            ("jax", "eager", "jax", "JAX")]
    GPU_SIZES = [(32, 128, 128), (64, 256, 512), (64, 512, 256)]
    CPU_SIZES = [(32, 128, 128)]
    QUICK_SIZE = (4, 16, 8)
    SIZES_ENV = "TIDAL_BENCH_RECURRENCE_SIZES"

    def rows_for(self, quick, device):
        return {self.label(c, m, b, h, t): dict(cell=c, mode=m, B=b, H=h, T=t)
                for b, h, t in self.sizes(quick, device) for c in RECURRENT_CELLS for m in ("forward", "forward+backward")}

    @staticmethod
    def label(cell, mode, b, h, t):
        return f"{cell} {mode} B={b} H={h} T={t}"

    def units(self, quick, device):
        units = []
        for b, h, t in self.sizes(quick, device):
            rows = [self.label(c, m, b, h, t) for c in RECURRENT_CELLS for m in ("forward", "forward+backward")]
            for key, backend, variant, _ in self.COLS:
                if variant == "jax" and device != "cpu":
                    continue
                mine = [r for r in rows if variant != "module" or r.split()[0] in STANDARD_MODULES]
                units.append(_u(self.name, key, backend, mine, variant=variant, params=dict(B=b, H=h, T=t)))
        return units

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        p = unit["params"]
        for row, _ in unit["cells"]:
            kind, mode = row.split()[:2]
            if unit["variant"] == "jax":
                yield row, unit["column"], _jax_record(ctx, kind, mode, p)
                continue
            xs = recurrence_xs(p, ctx.device)
            loop = make_cell(kind, p["H"], ctx.device, "loop")
            model = make_cell(kind, p["H"], ctx.device, unit["variant"])
            if mode == "forward":
                with torch.no_grad():
                    ref = loop(xs)
                yield row, unit["column"], measure(ctx, unit["backend"], model, (xs,), reference=ref)
                continue
            x = xs.clone().requires_grad_()
            ref = _train_step_x(loop, x)(loop, (x,))
            yield row, unit["column"], measure(ctx, unit["backend"], model, (x,), invoke=_train_step_x(model, x),
                                               reference=ref, grad=True)

    def summarize(self, rows):
        t = {r["label"]: {k: (v.get("time_s") if v.get("status") == "ok" else None) for k, v in r["cells"].items()} for r in rows}
        out = {}
        for label, cells in t.items():
            kind = label.split()[0]
            if kind in STANDARD_MODULES and cells.get("tidal") and cells.get("nn"):
                out[f"{label}: tidal / torch.nn (target <= 1.25)"] = cells["tidal"] / cells["nn"]
            if kind in CUSTOM_VS_STANDARD and cells.get("tidal"):
                other = t.get(label.replace(kind, CUSTOM_VS_STANDARD[kind], 1), {})
                if other.get("tidal"):
                    out[f"{label}: tidal / tidal {CUSTOM_VS_STANDARD[kind]} (target <= 1.25)"] = cells["tidal"] / other["tidal"]
        return out


def _backward_step(leaves, returned):
    """invoke(fn, inputs): one forward+backward, out.backward(a fixed random cotangent) (out.sum()
    says nothing through a LayerNorm: its rows sum to 0); the gradients of `returned`, those of
    every leaf cleared first. The gradients as autograd left them, not copies: the peers' steps
    (`linear_recurrence._peer`) copy nothing either, and a copy of a [8, 4096, 1024] gradient
    costs as much as a pass of the kernel (0.07 ms on an H200)."""
    import torch

    cotangent = None

    def step(fn, inputs):
        nonlocal cotangent
        for q in leaves:
            q.grad = None
        out = fn(*inputs)
        if cotangent is None:
            cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out.device)
        out.backward(cotangent)
        return tuple(q.grad for q in returned)

    return step


def _train_step_x(model, x):
    """x's gradient of one forward+backward of `model` (its weights' cleared too)."""
    return _backward_step([x, *model.parameters()], [x])


def _jax_record(ctx, kind: str, mode: str, p: dict) -> dict:
    """One cell timed by bench/jax_cells.py under the python TIDAL_BENCH_JAX_PYTHON names."""
    import json
    import subprocess

    from harness import RESULT_MARK, failure, status_record

    python = os.environ.get("TIDAL_BENCH_JAX_PYTHON")
    if not python:
        return status_record("unsupported", "TIDAL_BENCH_JAX_PYTHON is not set (bench/README.md: JAX column)")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jax_cells.py")
    cmd = [python, script, "--cell", kind, "--B", str(p["B"]), "--H", str(p["H"]), "--T", str(p["T"]),
           "--mode", "fwd" if mode == "forward" else "fwdbwd", "--threads", str(ctx.threads)]
    if ctx.quick:
        cmd += ["--repeats", "3"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except Exception as exc:  # noqa: BLE001 - a result like any failure
        return failure(exc, "jax")
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    return {"status": "failed", "phase": "jax", "error_type": "NoResult", "error": (proc.stderr.strip().splitlines() or [""])[-1][:300]}


# ----------------------------------------------------------------------------------------------
# linear_recurrence: h_t = exp(g_t) * h_{t-1} + x_t over [B, T, D] (HGRN, Mamba, minGRU, RetNet)


def linear_recurrence_program(form: str, device: str):
    """h over [B, T, D] as `associative_scan` of the affine maps (a, x) or as a `scan` step."""
    import torch
    from torch._higher_order_ops import associative_scan, scan

    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    def by_associative_scan(g, x):
        mode = "pointwise" if device == "cuda" else "generic"  # eager's pointwise form needs CUDA
        return associative_scan(combine, (g.exp(), x), dim=1, combine_mode=mode)[1]

    def by_scan(g, x):
        def step(h, gx):
            h = gx[0].exp() * h + gx[1]
            return h, h.clone()

        ys = scan(step, torch.zeros_like(x[:, 0]), (g, x), dim=1)[1]
        return ys if ys.shape == x.shape else ys.movedim(0, 1)  # torch 2.11 stacks a scan's outputs on dim 0

    def loop(g, x):
        h, ys = torch.zeros_like(x[:, 0]), []
        for t in range(x.shape[1]):
            h = g[:, t].exp() * h + x[:, t]
            ys.append(h)
        return torch.stack(ys, 1)

    return {"associative_scan": by_associative_scan, "scan": by_scan, "loop": loop}[form]


def linear_recurrence_inputs(p, device):
    import torch

    g = torch.Generator().manual_seed(0)
    gate = torch.nn.functional.logsigmoid(torch.randn(p["B"], p["T"], p["D"], generator=g) + 3)  # decays near 1
    return gate.to(device), torch.randn(p["B"], p["T"], p["D"], generator=g).to(device)


# The field's hand-written Triton kernels (pure-Python wheels: bench/README.md, "Peers"): each
# takes its own layout and gate form, prepared outside the timed call, as its users call it.
LINREC_PEERS = {
    "accelerated_scan": ("accelerated_scan.scalar", "accelerated-scan 0.3.1 `scalar.scan(exp(g), x)` over [B, D, T]"),
    "fla_chunk": ("fla.ops.hgrn", "fla 0.6.0 `chunk_hgrn(x, g)`"),
    "fla_recurrent": ("fla.ops.hgrn", "fla 0.6.0 `fused_recurrent_hgrn(x, g)`"),
}


def linear_recurrence_peer(name: str, g, x, grad: bool):
    """(program, inputs, to_peer): `program(*inputs)` is the peer's h; `to_peer` maps a [B, T, D]
    tensor into the peer's layout (the reference, the cotangent)."""
    import importlib

    module = importlib.import_module(LINREC_PEERS[name][0])
    if name == "accelerated_scan":
        def to_peer(t):
            return t.transpose(1, 2)

        program, inputs = module.scan, [to_peer(t).contiguous() for t in (g.exp(), x)]
    else:
        def to_peer(t):
            return t

        kernel = module.chunk_hgrn if name == "fla_chunk" else module.fused_recurrent_hgrn
        program, inputs = (lambda g, x: kernel(x, g)[0]), [g.clone(), x.clone()]
    return program, tuple(t.detach().requires_grad_(grad) for t in inputs), to_peer


class LinearRecurrence(_SizedFamily):
    name = "linear_recurrence"
    title = "gated linear recurrence h_t = exp(g_t) h_{t-1} + x_t over [B, T, D]"
    description = (
        "As associative_scan of the affine maps (dim=1) and as a scan step, forward (no_grad) and "
        "forward+backward ((h * a fixed random cotangent).sum(), g and x requiring grad). Roofline: one "
        "elementwise op of the same traffic (torch.add(x, g, out=o): two reads, one write). JAX: lax.scan "
        "and lax.associative_scan under jit (bench/jax_cells.py, CPU, TIDAL_BENCH_JAX_PYTHON). Values "
        "checked against the Python loop in eager. TIDAL_BENCH_LINREC_SIZES=BxTxD,... overrides the rows."
    )
    COLS = [("roofline", "eager", "roofline", "roofline op"), ("accelerated_scan", "eager", "accelerated_scan", "accelerated-scan"),
            ("fla_chunk", "eager", "fla_chunk", "fla chunk"), ("fla_recurrent", "eager", "fla_recurrent", "fla recurrent"),
            ("inductor", "inductor", None, "inductor"), ("tidal", "tidal", None, "tidal"), ("jax", "eager", "jax", "JAX")]
    CPU_SIZES = [(4, 4096, 256)]
    GPU_SIZES = [(8, 4096, 1024), (4, 65536, 64), (16, 1 << 20, 1), (32, 2048, 2048)]
    QUICK_SIZE = (2, 64, 16)
    SIZES_ENV = "TIDAL_BENCH_LINREC_SIZES"
    FORMS = ("associative_scan", "scan")

    def rows_for(self, quick, device):
        return {f"{f} {m} [{b}, {t}, {d}]": dict(form=f, mode=m, B=b, T=t, D=d)
                for b, t, d in self.sizes(quick, device) for f in self.FORMS for m in ("forward", "forward+backward")}

    def units(self, quick, device):
        units = []
        for b, t, d in self.sizes(quick, device):
            rows = [f"{f} {m} [{b}, {t}, {d}]" for f in self.FORMS for m in ("forward", "forward+backward")]
            for key, backend, variant, _ in self.COLS:
                if (variant == "jax" and device != "cpu") or (variant in LINREC_PEERS and device != "cuda"):
                    continue
                mine = [r for r in rows if variant != "roofline" or r.startswith(f"{self.FORMS[0]} forward ")]
                if variant in LINREC_PEERS:  # one recurrence: the peers' cells sit in the associative_scan rows
                    mine = [r for r in rows if r.startswith(self.FORMS[0])]
                units.append(_u(self.name, key, backend, mine, variant=variant, params=dict(B=b, T=t, D=d)))
        return units

    def run_unit(self, ctx, unit):
        import torch

        from harness import measure

        p = unit["params"]
        g, x = linear_recurrence_inputs(p, ctx.device)
        for row, _ in unit["cells"]:
            form, mode = row.split()[:2]
            if unit["variant"] == "roofline":
                out = torch.empty_like(x)
                yield row, unit["column"], measure(ctx, "eager", lambda a, b: torch.add(a, b, out=out), (x, g))
                continue
            if unit["variant"] == "jax":
                cell = "linrec_assoc" if form == "associative_scan" else "linrec_scan"
                yield row, unit["column"], _jax_record(ctx, cell, mode, dict(B=p["B"], H=p["D"], T=p["T"]))
                continue
            if unit["variant"] in LINREC_PEERS:
                yield row, unit["column"], self._peer(ctx, unit["variant"], mode, p, g, x)
                continue
            program = linear_recurrence_program(form, ctx.device)
            loop = linear_recurrence_program("loop", ctx.device)
            if mode == "forward":
                with torch.no_grad():
                    ref = loop(g, x)
                yield row, unit["column"], measure(ctx, unit["backend"], program, (g, x), reference=ref)
                continue
            gq, xq = g.clone().requires_grad_(), x.clone().requires_grad_()
            step = _backward_step([gq, xq], [gq, xq])
            ref = step(loop, (gq, xq)) if p["T"] <= 8192 else None
            yield row, unit["column"], measure(ctx, unit["backend"], program, (gq, xq), invoke=step,
                                               reference=ref, grad=True)

    @staticmethod
    def _peer(ctx, name, mode, p, g, x):
        import torch

        from harness import failure, measure

        loop = linear_recurrence_program("loop", ctx.device)
        try:
            program, inputs, to_peer = linear_recurrence_peer(name, g, x, grad=mode != "forward")
        except ImportError as exc:
            return failure(exc, "import (bench/README.md, Peers: pip download the wheels)")
        if mode == "forward":
            with torch.no_grad():
                ref = to_peer(loop(g, x)) if p["T"] <= 8192 else None
            return measure(ctx, "eager", program, inputs, reference=ref)
        cotangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(4)).to(x.device)
        ref = None
        if p["T"] <= 8192:
            gq, xq = g.clone().requires_grad_(), x.clone().requires_grad_()
            loop(gq, xq).backward(cotangent)
            ref = (to_peer(xq.grad),)
        peer_cotangent = to_peer(cotangent).contiguous()

        def step(fn, args):
            for q in args:
                q.grad = None
            fn(*args).backward(peer_cotangent)
            return (args[1].grad,)  # x's cotangent: each peer takes its own gate form

        return measure(ctx, "eager", program, inputs, invoke=step, reference=ref, grad=True)

    def summarize(self, rows):
        out = {}

        def ok(cell):
            return cell.get("time_s") if cell.get("status") == "ok" else None

        # the roofline and the peers sit in the associative_scan rows: one per mode and size
        shared = {}
        for r in rows:
            form, mode, size = r["label"].split(" ", 2)
            if form == self.FORMS[0]:
                shared[mode, size] = {k: ok(v) for k, v in r["cells"].items() if k == "roofline" or k in LINREC_PEERS}
        for r in rows:
            form, mode, size = r["label"].split(" ", 2)
            t = {k: ok(v) for k, v in r["cells"].items()}
            if not t.get("tidal"):
                continue
            roof = shared.get(("forward", size), {}).get("roofline")
            if roof and mode == "forward":
                out[f"{r['label']}: roofline / tidal (target >= 0.5 on the CPU, 0.85 on the GPU)"] = roof / t["tidal"]
            for peer in LINREC_PEERS:
                if shared.get((mode, size), {}).get(peer):
                    out[f"{r['label']}: {peer} / tidal (target >= 1)"] = shared[mode, size][peer] / t["tidal"]
            for other in ("jax", "inductor"):
                if t.get(other):
                    out[f"{r['label']}: {other} / tidal (target > 1)"] = t[other] / t["tidal"]
        return out


CASES = {
    c.name: c
    for c in (CompileTime(), RnnScan(), RnnScanSizes(), RnnTrain(), WhileLoop(), AssociativeScan(), AssociativeScanTrain(),
              CondClamp(), ChunkedCE(), ChunkedCETrain(), ConvDenoiser(), StraightLine(), Recurrences(), LinearRecurrence())
}
