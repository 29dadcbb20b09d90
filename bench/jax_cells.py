"""The JAX column of the `recurrences` benchmark: recurrent cells as `jax.lax.scan` under `jax.jit`.

Run by the python of a separate venv that has JAX (never the project's .venv; this file does not
import torch):

    /work/jaxenv/bin/python bench/jax_cells.py --cell rnn --B 32 --H 128 --T 128 --mode fwd \
        [--repeats 20] [--threads 1]
    /work/jaxenv/bin/python bench/jax_cells.py --check        # every cell, both modes, tiny size

Prints exactly one line `@@TIDAL_BENCH_RESULT@@ {json}` (bench/harness.py's RESULT_MARK) with
status ("ok", or "failed" with error_type and error), time_s (median seconds per call), times_s,
repeats, first_call_s (the first call, jit compile included), compile_s (first_call_s - time_s),
jax_version, cell, mode, B, H, T and the threading set-up.

Cells (the same programs as bench/cases.py's make_cell): xs [T, B, H] float32, input and hidden width
H, weights randn * H**-0.5 laid out [H, gates*H] (gates in torch.nn's order), biases randn * 0.1,
h0 = c0 = 0; one `lax.scan` over T whose step computes x_t W + h U (x_t W inside the step, as the
PyTorch scan does); the output is every step's hidden state ys [T, B, H].
  rnn           h = tanh(x W + h U + b)
  lstm          i, f, g, o = split(x W + h U + b, 4); c = s(f) c + s(i) tanh(g); h = s(o) tanh(c)
  gru           torch.nn.GRU: r = s(xW_r + b_ir + hU_r + b_hr), z = s(xW_z + b_iz + hU_z + b_hz),
                n = tanh(xW_n + b_in + r (hU_n + b_hn)), h = (1 - z) n + z h
  ln_lstm       lstm with 0.5 * LayerNorm (no affine, eps 1e-5, last dim) on x W and on h U before + b,
                and h = s(o) tanh(LN(c)) (c carried un-normalised)
  mingru        z = s(x W_z), ht = x W_h, h = (1 - z) h + z ht (W = [W_z | W_h], [H, 2H], one matmul)
  residual_rnn  h = LayerNorm(h + tanh(x W + h U + b))  (post-norm, as bench/cases.py)
Modes: fwd = jit(cell)(params, xs); fwdbwd = jit(grad(lambda params, xs: (cell(params, xs) * a fixed random cotangent).sum(),
argnums=(0, 1))): the gradients of every weight and of xs.

Timing: one call (compiles), 3 warm-up calls, then --repeats timed calls, each ending with
jax.block_until_ready; time_s is their median.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

RESULT_MARK = "@@TIDAL_BENCH_RESULT@@ "
CELLS = ("rnn", "lstm", "gru", "ln_lstm", "mingru", "residual_rnn", "linrec_scan", "linrec_assoc")
MODES = ("fwd", "fwdbwd")
GATES = {"rnn": 1, "residual_rnn": 1, "lstm": 4, "ln_lstm": 4, "gru": 3, "mingru": 2}
WARMUP_CALLS = 3


def restrict_threads(threads: int) -> dict:
    """Limit XLA:CPU to `threads` cores. Must run before jax is imported.

    Checked with jax/jaxlib 0.10.2 on Linux:
    * XLA_FLAGS=--xla_cpu_multi_thread_eigen=false is a valid flag (set here for threads == 1, as
      usually recommended) but does NOT keep XLA on one thread by itself: a jitted matmul still ran
      on both threads of XLA's intra-op pool (tf_XLAEigen) with or without it (also with
      --xla_cpu_use_xnnpack=false).
    * `intra_op_parallelism_threads=1` is not an XLA flag: written without dashes after the first
      flag it is silently ignored by XLA_FLAGS' parser, and `--intra_op_parallelism_threads=1` is a
      fatal "Unknown flag in XLA_FLAGS". So it is not passed.
    * What sizes the intra-op pool is the number of CPUs the process may run on (its affinity, as
      `taskset -c 0` would set): with one allowed CPU the pool has one thread and every kernel ran
      on the calling thread. So the process is pinned to `threads` of the CPUs it was allowed,
      with OMP_NUM_THREADS (and MKL/OPENBLAS) = threads as for the PyTorch columns.
    threads <= 0 leaves everything as it is (XLA's default: one pool thread per allowed CPU)."""
    info = {"threads": threads}
    if threads > 0:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ[var] = str(threads)
        if threads == 1:
            flags = os.environ.get("XLA_FLAGS", "")
            if "--xla_cpu_multi_thread_eigen" not in flags:
                os.environ["XLA_FLAGS"] = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
        if hasattr(os, "sched_setaffinity"):
            allowed = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, allowed[:threads])
    if hasattr(os, "sched_getaffinity"):
        info["cpu_affinity"] = sorted(os.sched_getaffinity(0))
    info["xla_flags"] = os.environ.get("XLA_FLAGS", "")
    return info


def xla_pool_threads() -> int | None:
    """Threads of XLA:CPU's intra-op pool (named tf_XLAEigen) in this process (Linux only)."""
    try:
        names = []
        for t in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        return sum(n == "tf_XLAEigen" for n in names)
    except OSError:
        return None


# ----------------------------------------------------------------------------------------------
# cells


def make_params(cell: str, H: int, seed: int = 0) -> dict:
    import jax

    n = GATES[cell]
    k = jax.random.split(jax.random.PRNGKey(seed), 4)
    p = {"W": jax.random.normal(k[0], (H, n * H), "float32") * H**-0.5}
    if cell == "mingru":
        return p
    p["U"] = jax.random.normal(k[1], (H, n * H), "float32") * H**-0.5
    p["b"] = jax.random.normal(k[2], (n * H,), "float32") * 0.1
    if cell == "gru":
        p["bh"] = jax.random.normal(k[3], (n * H,), "float32") * 0.1  # b_hr, b_hz, b_hn
    return p


def _layer_norm(v, eps=1e-5):
    """LayerNorm over the last dim without affine parameters (torch's biased variance)."""
    import jax
    import jax.numpy as jnp

    mean = jnp.mean(v, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(v - mean), axis=-1, keepdims=True)
    return (v - mean) * jax.lax.rsqrt(var + eps)


def make_linear_recurrence(cell: str):
    """h_t = exp(g_t) h_{t-1} + x_t over [B, T, D] along T (bench/cases.py's linear_recurrence):
    params {"g": gates}, xs the x; as lax.scan (`linrec_scan`) or lax.associative_scan
    (`linrec_assoc`) of the affine maps."""
    import jax
    import jax.numpy as jnp

    def run(p, xs):
        if cell == "linrec_assoc":
            def combine(left, right):
                return left[0] * right[0], right[0] * left[1] + right[1]

            return jax.lax.associative_scan(combine, (jnp.exp(p["g"]), xs), axis=1)[1]

        def step(h, gx):
            h = jnp.exp(gx[0]) * h + gx[1]
            return h, h

        _, ys = jax.lax.scan(step, jnp.zeros_like(xs[:, 0]), (jnp.swapaxes(p["g"], 0, 1), jnp.swapaxes(xs, 0, 1)))
        return jnp.swapaxes(ys, 0, 1)

    return run


def make_cell(cell: str):
    """cell(params, xs [T, B, H]) -> ys [T, B, H] (the linear recurrences: [B, T, D])."""
    import jax
    import jax.numpy as jnp
    from jax.nn import sigmoid

    if cell.startswith("linrec"):
        return make_linear_recurrence(cell)

    def step(p, carry, x):
        if cell == "rnn":
            h = jnp.tanh(x @ p["W"] + carry @ p["U"] + p["b"])
            return h, h
        if cell == "residual_rnn":
            h = _layer_norm(carry + jnp.tanh(x @ p["W"] + carry @ p["U"] + p["b"]))
            return h, h
        if cell in ("lstm", "ln_lstm"):
            h, c = carry
            xw, hu = x @ p["W"], h @ p["U"]
            if cell == "ln_lstm":
                xw, hu = 0.5 * _layer_norm(xw), 0.5 * _layer_norm(hu)
            i, f, g, o = jnp.split(xw + hu + p["b"], 4, axis=-1)
            c = sigmoid(f) * c + sigmoid(i) * jnp.tanh(g)
            h = sigmoid(o) * jnp.tanh(_layer_norm(c) if cell == "ln_lstm" else c)
            return (h, c), h
        if cell == "gru":
            i_r, i_z, i_n = jnp.split(x @ p["W"] + p["b"], 3, axis=-1)
            h_r, h_z, h_n = jnp.split(carry @ p["U"] + p["bh"], 3, axis=-1)
            r, z = sigmoid(i_r + h_r), sigmoid(i_z + h_z)
            h = (1 - z) * jnp.tanh(i_n + r * h_n) + z * carry
            return h, h
        if cell == "mingru":
            z, candidate = jnp.split(x @ p["W"], 2, axis=-1)
            z = sigmoid(z)
            h = (1 - z) * carry + z * candidate
            return h, h
        raise ValueError(cell)

    def run(p, xs):
        h0 = jnp.zeros(xs.shape[1:], xs.dtype)  # [B, H]
        carry = (h0, h0) if cell in ("lstm", "ln_lstm") else h0
        _, ys = jax.lax.scan(lambda c, x: step(p, c, x), carry, xs)
        return ys

    return run


def make_fn(cell: str, mode: str):
    import jax

    run = make_cell(cell)
    if mode == "fwd":
        return jax.jit(run)
    if mode == "fwdbwd":
        # a fixed random cotangent, as bench/cases.py: ys.sum() says nothing through a LayerNorm
        def loss(p, xs):
            ys = run(p, xs)
            return (ys * jax.random.normal(jax.random.PRNGKey(3), ys.shape, ys.dtype)).sum()

        return jax.jit(jax.grad(loss, argnums=(0, 1)))
    raise ValueError(mode)


def make_inputs(cell: str, B: int, H: int, T: int):
    import jax

    if cell.startswith("linrec"):  # [B, T, D=H]; gates log-sigmoid(N(3, 1)): decays near 1
        g = jax.nn.log_sigmoid(jax.random.normal(jax.random.PRNGKey(0), (B, T, H), "float32") + 3)
        return {"g": g}, jax.random.normal(jax.random.PRNGKey(1), (B, T, H), "float32")

    xs = jax.random.normal(jax.random.PRNGKey(1), (T, B, H), "float32")
    return make_params(cell, H), xs


# ----------------------------------------------------------------------------------------------
# timing


def bench(cell: str, mode: str, B: int, H: int, T: int, repeats: int) -> dict:
    import jax

    params, xs = jax.block_until_ready(make_inputs(cell, B, H, T))
    fn = make_fn(cell, mode)
    t0 = time.perf_counter()
    jax.block_until_ready(fn(params, xs))
    first = time.perf_counter() - t0
    for _ in range(WARMUP_CALLS):
        jax.block_until_ready(fn(params, xs))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(params, xs))
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {"status": "ok", "time_s": median, "times_s": times, "repeats": repeats,
            "warmup_calls": WARMUP_CALLS, "first_call_s": first, "compile_s": max(first - median, 0.0)}


def check(B: int = 2, H: int = 8, T: int = 5) -> int:
    """Smoke test: every cell and mode at a tiny size; shapes and finiteness, one line each."""
    import jax
    import jax.numpy as jnp

    bad = 0
    for cell in CELLS:
        params, xs = make_inputs(cell, B, H, T)
        ys = make_fn(cell, "fwd")(params, xs)
        g_params, g_xs = make_fn(cell, "fwdbwd")(params, xs)
        finite = bool(jnp.isfinite(ys).all())
        g_finite = all(bool(jnp.isfinite(g).all()) for g in jax.tree_util.tree_leaves((g_params, g_xs)))
        shapes_ok = ys.shape == xs.shape and g_xs.shape == xs.shape and all(
            g_params[k].shape == params[k].shape for k in params)
        ok = finite and g_finite and shapes_ok
        bad += not ok
        print(f"{cell:13s} ys {tuple(ys.shape)} finite={finite}  grads "
              + " ".join(f"{k}{tuple(v.shape)}" for k, v in sorted(g_params.items()))
              + f" xs{tuple(g_xs.shape)} finite={g_finite}  {'ok' if ok else 'BAD'}")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell", choices=CELLS, default="rnn")
    ap.add_argument("--mode", choices=MODES, default="fwd")
    ap.add_argument("--B", type=int, default=32)
    ap.add_argument("--H", type=int, default=128)
    ap.add_argument("--T", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="CPUs XLA may use (0: no limit); default 1")
    ap.add_argument("--check", action="store_true", help="smoke-test every cell and mode at a tiny size")
    args = ap.parse_args(argv)

    rec = {"cell": args.cell, "mode": args.mode, "B": args.B, "H": args.H, "T": args.T}
    try:
        rec.update(restrict_threads(args.threads))  # before jax is imported
        import jax
        import jaxlib

        # no persistent compilation cache: every first call compiles cold
        jax.config.update("jax_enable_compilation_cache", False)
        rec.update(jax_version=jax.__version__, jaxlib_version=jaxlib.__version__,
                   backend=jax.default_backend())
        if args.check:
            return check()
        rec.update(bench(args.cell, args.mode, args.B, args.H, args.T, args.repeats))
        rec["xla_pool_threads"] = xla_pool_threads()
    except Exception as exc:  # noqa: BLE001 - a failure is a result
        msg = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        rec.update(status="failed", phase="jax", error_type=type(exc).__name__, error=msg[:300])
    print(RESULT_MARK + json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
