"""Measurement machinery for bench/run.py.

Parent side: `run_unit` starts one fresh Python process per unit (`run.py --_single UNIT`), with a
new Inductor cache directory, a new tidal cache directory and the thread count in its environment,
and collects the JSON records the child prints. A crash or a timeout becomes a failure record.

Child side: `child_main` builds the unit's programs (bench/cases.py) and `measure` times one
(program, inputs) pair under one backend: first call (compile included), warm-up, then the median
of timed repeats. Every record is a dict with a "status":

  ok               time_s (median), times_s, repeats, first_call_s, compile_s (first - median,
                   compiled backends only), max_abs_err against the reference where one is given, on cuda back_to_back_s
                   (per call, calls queued without synchronizing), plus case metrics
  failed           error_type, error (first line), cause (innermost exception), phase
  fallback         tidal ran the graph in eager (TidalFallbackWarning): reason; no time reported
  unsupported      not run
  skipped          not run (--backends)
  n/a              the cell does not exist for this row
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

RESULT_MARK = "@@TIDAL_BENCH_RESULT@@ "
ERROR_CHARS = 300


# ----------------------------------------------------------------------------------------------
# records


def failure(exc: BaseException, phase: str) -> dict:
    rec = {"status": "failed", "phase": phase, "error_type": type(exc).__name__, "error": _first_line(exc)}
    inner = _innermost(exc)
    if inner is not exc:
        rec["cause"] = f"{type(inner).__name__}: {_first_line(inner)}"
    return rec


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[0][:ERROR_CHARS] if lines else ""


def _innermost(exc: BaseException) -> BaseException:
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = getattr(exc, "inner_exception", None) or exc.__cause__
        if nxt is None:
            break
        exc = nxt
    return exc


def status_record(status: str, reason: str) -> dict:
    return {"status": status, "reason": reason}


# ----------------------------------------------------------------------------------------------
# parent side


def child_env(threads: int, extra: dict | None = None) -> tuple[dict, str]:
    """Environment of one unit's process: a fresh (cold) Inductor and tidal cache, N threads."""
    tmp = tempfile.mkdtemp(prefix="tidal-bench-")
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    env["TIDAL_CACHE_DIR"] = os.path.join(tmp, "tidal")
    env["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
    env.pop("TIDAL_DUMP_DIR", None)
    env.update(extra or {})
    return env, tmp


def run_unit(run_py: str, unit: dict, args) -> tuple[list[tuple[str, str, dict]], float]:
    """Run one unit in a fresh process; returns ([(row, column, record)], wall seconds)."""
    import shutil

    env, tmp = child_env(args.threads, unit.get("env"))
    cmd = [
        sys.executable, run_py, "--_single", json.dumps(unit), "--device", args.device,
        "--threads", str(args.threads),
    ]
    if args.quick:
        cmd.append("--quick")
    start = time.perf_counter()
    got: list[tuple[str, str, dict]] = []
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.unit_timeout)
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        crash = None
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        rc = None
        crash = {"status": "failed", "phase": "timeout", "error_type": "Timeout",
                 "error": f"unit did not finish within --unit-timeout {args.unit_timeout} s"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - start
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARK):
            item = json.loads(line[len(RESULT_MARK):])
            got.append((item["row"], item["column"], item["record"]))
    if crash is None and rc != 0:
        tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        crash = {"status": "failed", "phase": "process", "error_type": "ChildProcessError",
                 "error": f"exit code {rc}: {tail[-1][:ERROR_CHARS] if tail else ''}"}
    if crash is not None:
        done = {(r, c) for r, c, _ in got}
        for row, col in unit["cells"]:
            if (row, col) not in done:
                got.append((row, col, dict(crash)))
    if args.verbose and stderr.strip():
        sys.stderr.write(stderr)
    return got, wall


# ----------------------------------------------------------------------------------------------
# child side


class Context:
    def __init__(self, device: str, quick: bool, threads: int, part: str = "both"):
        self.device = device
        self.quick = quick
        self.threads = threads
        # "time" or "memory": a case measuring peak memory on the CPU runs each configuration twice
        # (see cases.memory_twins); "both" otherwise
        self.part = part
        if quick:
            self.budget_s, self.min_repeats, self.max_repeats, self.warmup_calls, self.warmup_s = 0.2, 2, 5, 1, 0.0
        else:
            # A millisecond call gets 100 repeats after 0.1 s of warm-up: with 25 after two calls,
            # the median of an encoder layer (2.3 ms, MKL gemms) moved by 3% between processes,
            # the allocator and the gemm's buffers still settling.
            self.budget_s, self.min_repeats, self.max_repeats, self.warmup_calls, self.warmup_s = 2.0, 3, 100, 2, 0.1

    def sync(self):
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()


def emit(row: str, column: str, record: dict) -> None:
    print(RESULT_MARK + json.dumps({"row": row, "column": column, "record": record}), flush=True)


def compiled(program, backend: str):
    import torch

    if backend == "eager":
        return program
    return torch.compile(program, backend=backend, fullgraph=True, dynamic=False)


def warm_up_compiler(ctx: Context, backend: str) -> None:
    """Compile an unrelated tiny graph once, so one-time costs of the process (importing the
    compiler's modules, Inductor's C++ prefix, tidal's MLIR context and JIT) are not counted as
    the benchmark's compile time. Skipped in --quick."""
    import torch

    if backend == "eager" or ctx.quick:
        return

    def tiny(a, w):
        return torch.tanh(a @ w + 1.0).sum(0)

    args = (torch.randn(3, 5, device=ctx.device), torch.randn(5, 7, device=ctx.device))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with torch.no_grad():
                compiled(tiny, backend)(*args)
        except Exception:  # noqa: BLE001 - the measured compile will report any real failure
            pass
    torch._dynamo.reset()


def _fallback_messages(caught) -> list[str]:
    return [str(w.message) for w in caught if w.category.__name__ == "TidalFallbackWarning"]


def _max_abs_err(got, ref) -> float:
    import torch

    leaves_g = [t for t in torch.utils._pytree.tree_leaves(got) if isinstance(t, torch.Tensor)]
    leaves_r = [t for t in torch.utils._pytree.tree_leaves(ref) if isinstance(t, torch.Tensor)]
    if len(leaves_g) != len(leaves_r):
        return float("inf")
    err = 0.0
    for g, r in zip(leaves_g, leaves_r):
        if g.shape != r.shape:
            return float("inf")
        g, r = g.detach().double().cpu(), r.detach().double().cpu()
        both_nan = torch.isnan(g) & torch.isnan(r)
        diff = (g - r).abs().masked_fill(both_nan, 0.0)
        if diff.numel():
            err = max(err, float(diff.max()))
    return err


def _allclose(got, ref, rtol, atol) -> bool:
    import torch

    try:
        torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
        return True
    except AssertionError:
        return False


def _status_kb(key: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def peak_memory_of_call(ctx: Context, call) -> dict:
    """Peak extra memory of one call: on the CPU, the process's peak RSS (VmHWM, reset through
    /proc/self/clear_refs) minus its RSS just before the call; on cuda, the caching allocator's
    peak minus what was allocated before."""
    import torch

    gc.collect()
    if ctx.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = call()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        del out
        return {"peak_mem_mb": (peak - before) / 2**20, "peak_mem_method": "torch.cuda.max_memory_allocated"}
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _status_kb("VmRSS")
        out = call()
        peak = _status_kb("VmHWM")
        del out
        if before is not None and peak is not None:
            return {"peak_mem_mb": (peak - before) / 1024, "peak_mem_method": "VmHWM-VmRSS (clear_refs)"}
    except OSError:
        pass
    out = call()
    del out
    return {"peak_mem_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_mem_method": "ru_maxrss (whole process)"}


def _back_to_back(ctx: Context, call, estimate: float) -> float:
    """Median time per call of calls queued without a synchronization between them (the device's
    throughput: the host prepares call k+1 while the GPU runs call k), three runs of about a
    quarter of the time budget each."""
    k = max(5, min(1000, int(ctx.budget_s / 4 / max(estimate, 1e-9))))
    runs = []
    for _ in range(3):
        ctx.sync()
        t0 = time.perf_counter()
        for _ in range(k):
            call()
        ctx.sync()
        runs.append((time.perf_counter() - t0) / k)
    return sorted(runs)[1]


def measure(ctx: Context, backend: str, program, inputs, *, invoke=None, reference=None, grad=False,
            rtol=1e-3, atol=1e-3, memory=False, repeats=None, fn=None) -> dict:
    """Time `program(*inputs)` (or `invoke(fn, inputs)`) under `backend` in this process.

    `reference` is the eager result (or a callable giving it); the compiled result is compared
    with it. With grad=False everything runs under torch.no_grad()."""
    import torch

    invoke = invoke or (lambda fn, xs: fn(*xs))
    grad_mode = torch.enable_grad if grad else torch.no_grad
    torch._dynamo.config.error_on_recompile = False
    if fn is None:
        torch._dynamo.reset()
        fn = compiled(program, backend)
    rec: dict = {"status": "ok"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        # ---- first call: compiles
        try:
            with grad_mode():
                ctx.sync()
                t0 = time.perf_counter()
                out = invoke(fn, inputs)
                ctx.sync()
                first = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - a compiler failure is a result
            return failure(exc, "compile/first call")
        fallbacks = _fallback_messages(caught)
        if fallbacks:
            return {"status": "fallback", "reason": fallbacks[0], "first_call_s": first}
        # ---- correctness against eager (an eager column given a reference is another program:
        # a torch.nn module against the Python loop, a peer's kernel)
        if reference is not None:
            try:
                ref = reference() if callable(reference) else reference
                rec["max_abs_err"] = _max_abs_err(out, ref)
                if not _allclose(out, ref, rtol, atol):
                    rec["mismatch"] = True
            except Exception as exc:  # noqa: BLE001
                rec["reference_error"] = f"{type(exc).__name__}: {_first_line(exc)}"
        del out
        # ---- warm-up and timed repeats (no recompilation allowed from here on)
        try:
            if backend != "eager":
                torch._dynamo.config.error_on_recompile = True
            times = []
            with grad_mode():
                while len(times) < ctx.warmup_calls or sum(times) < ctx.warmup_s:
                    ctx.sync()
                    t0 = time.perf_counter()
                    invoke(fn, inputs)
                    ctx.sync()
                    times.append(time.perf_counter() - t0)
                estimate = min(times) if times else first
                n = repeats or max(ctx.min_repeats, min(ctx.max_repeats, int(ctx.budget_s / max(estimate, 1e-9))))
                if memory and ctx.part == "memory":
                    n = 0  # the twin process with the default allocator times it
                times = []
                for _ in range(n):
                    ctx.sync()
                    t0 = time.perf_counter()
                    invoke(fn, inputs)
                    ctx.sync()
                    times.append(time.perf_counter() - t0)
                if ctx.device == "cuda" and times:
                    rec["back_to_back_s"] = _back_to_back(ctx, lambda: invoke(fn, inputs), min(times))
                if memory and ctx.part != "time":
                    rec.update(peak_memory_of_call(ctx, lambda: invoke(fn, inputs)))
        except Exception as exc:  # noqa: BLE001
            return failure(exc, "steady-state call")
        finally:
            torch._dynamo.config.error_on_recompile = False
        fallbacks = _fallback_messages(caught)
        if fallbacks:
            return {"status": "fallback", "reason": fallbacks[0], "first_call_s": first}
    if not times:
        return rec
    times.sort()
    median = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
    rec.update({"time_s": median, "times_s": times, "repeats": len(times), "first_call_s": first})
    if backend != "eager":
        rec["compile_s"] = max(first - median, 0.0)
    rec["process_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return rec


MATMUL_PRECISION_ENV = "TIDAL_BENCH_MATMUL_PRECISION"


def child_main(unit: dict, device: str, threads: int, quick: bool) -> int:
    import torch

    torch.set_num_threads(threads)
    torch.set_float32_matmul_precision(os.environ.get(MATMUL_PRECISION_ENV, "highest"))
    # Inductor's scan (and while_loop with data-dependent pieces) needs scalar outputs captured
    # to compile at all; set for every compiled configuration (cases may override per row).
    torch._dynamo.config.capture_scalar_outputs = True
    warnings.filterwarnings("ignore", category=FutureWarning)
    if unit["backend"] == "tidal":
        import tidal.dynamo  # noqa: F401 - registers the backend (also an entry point)

    import cases

    ctx = Context(device, quick, threads, unit.get("part", "both"))
    warm_up_compiler(ctx, unit["backend"])
    case = cases.CASES[unit["case"]]
    try:
        for row, column, record in case.run_unit(ctx, unit):
            record.setdefault("torch_threads", torch.get_num_threads())
            record.setdefault("float32_matmul_precision", torch.get_float32_matmul_precision())
            emit(row, column, record)
    except Exception:  # noqa: BLE001 - report, the parent records the missing cells as failed
        traceback.print_exc()
        return 1
    return 0
