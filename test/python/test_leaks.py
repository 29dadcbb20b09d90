"""No leaks: repeated calls keep RSS flat, and tidal's caches stay bounded.

RSS is read from /proc/self/statm (resident pages), so these tests need Linux.
"""

import gc
import os
import warnings

import pytest
import torch
from torch._higher_order_ops import scan, while_loop

import tidal.dynamo
from tidal.compiler import compile_exported, compile_program
from tidal.importer import export_program
from tidal.runtime import cache

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm")

MiB = 2**20


def rss_bytes() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def count_to(limit: int):
    def program(i, x):
        def cond_fn(i, x):
            return i < limit

        def body_fn(i, x):
            return i + 1, torch.tanh(x * 1.5 + 0.1)

        return while_loop(cond_fn, body_fn, (i, x))

    return program


def scaled_loop(k: int):
    """Tiny programs that differ only in a constant (so each has its own IR and cache key)."""

    def program(i, x):
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * (1.0 + k / 100)), (i, x))

    return program


ARGS = (torch.zeros((), dtype=torch.int64), torch.randn(4))


def test_10000_calls_keep_rss_flat():
    program = compile_program(count_to(5), ARGS)
    expected = count_to(5)(*ARGS)
    with torch.no_grad():
        for _ in range(500):  # warm-up: allocator pools, lazy imports, ctypes caches
            out = program(*ARGS)
        before = rss_bytes()
        for _ in range(10_000):
            out = program(*ARGS)
        after = rss_bytes()
    torch.testing.assert_close(out, expected)
    assert after - before < 10 * MiB, f"RSS grew {(after - before) / MiB:.1f} MiB over 10,000 calls"


def test_3000_torch_compile_calls_keep_rss_flat():
    compiled = torch.compile(count_to(3), backend="tidal")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", tidal.dynamo.TidalFallbackWarning)
        for _ in range(300):
            compiled(*ARGS)
        before = rss_bytes()
        for _ in range(3000):
            compiled(*ARGS)
        after = rss_bytes()
    assert after - before < 10 * MiB, f"RSS grew {(after - before) / MiB:.1f} MiB over 3,000 calls"


def test_recompiling_does_not_leak_native_code(monkeypatch):
    """JIT-compiling the same program again and again (the memory cache cleared each time, so each
    round builds and drops an LLVM execution engine) keeps RSS flat."""
    monkeypatch.setattr(cache, "_memory", type(cache._memory)())
    ep = export_program(count_to(2), ARGS)
    sizes = []
    for _ in range(20):
        cache._memory.clear()
        program = compile_exported(ep)
        program(*ARGS)
        del program
        sizes.append(rss_bytes())
    growth = sizes[-1] - sizes[4]
    assert growth < 8 * MiB, f"RSS grew {growth / MiB:.1f} MiB over 15 compilations"


def test_memory_cache_stays_bounded(monkeypatch):
    monkeypatch.setattr(cache, "MEMORY_ENTRIES", 3)
    monkeypatch.setattr(cache, "_memory", type(cache._memory)())
    programs = []
    for k in range(6):
        programs.append(compile_program(scaled_loop(k), ARGS))
        assert cache.memory_entries() <= cache.MEMORY_ENTRIES
    assert cache.memory_entries() == 3
    # Programs whose native code was evicted from the cache still run (they own their code).
    with torch.no_grad():
        for k, program in enumerate(programs):
            torch.testing.assert_close(program(*ARGS), scaled_loop(k)(*ARGS))


def test_python_int_input_is_an_argument_not_a_specialization(compiled_programs):
    """A Python int input that Dynamo makes symbolic (after its second value) reaches the program
    as a 0-d tensor argument: one program serves every later value, none is baked in."""
    programs = compiled_programs

    def model(xs, n):
        c, ys = scan(lambda c, x: (torch.tanh(c + x * n), c * 2), torch.zeros(3), xs)
        return c * n, ys

    compiled = torch.compile(model, backend="tidal")
    xs = torch.randn(4, 3)
    with torch.no_grad():
        for n in list(range(1, 8)) + [2]:
            torch.testing.assert_close(compiled(xs, n), model(xs, n))
    assert len(programs) == 2  # n = 1 (static), then one program for every n


def aten_calls_in_a_loop(steps: int):
    """Each iteration makes ATen calls whose arguments use every ownership path of the stable ABI:
    tensor handles, int lists (convolution), a boxed optional tensor list (index_put), results."""
    conv = torch.nn.Conv2d(2, 2, 3, padding=1).eval()

    def program(i, x, buf):
        def body(i, x, buf):
            x = torch.tanh(conv(x))
            buf = torch.index_put(buf, ((i % 4).reshape(1),), x.reshape(1, -1), accumulate=True)
            return i + 1, x, buf

        return while_loop(lambda i, x, buf: i < steps, body, (i, x, buf))

    return program


def test_aten_calls_in_20000_iterations_keep_rss_flat():
    """20,000 iterations per call: a leak of even one handle per call site per iteration (~100
    bytes) would show as megabytes; stack slots growing per iteration would crash."""
    args = (torch.zeros((), dtype=torch.int64), torch.randn(1, 2, 4, 4), torch.zeros(4, 32))
    model = aten_calls_in_a_loop(20_000)
    with torch.no_grad():
        program = compile_program(model, args)
        program(*args)
        before = rss_bytes()
        for _ in range(5):
            out = program(*args)
        after = rss_bytes()
        # buf's rows each sum 5,000 steps' x in float32 at a magnitude of a few hundred (an ulp:
        # ~3e-5): x agreeing to an ulp (3e-8) still flips roundings of the sum, up to 5,000 ulps
        # (6e-4 relative); with rtol=1e-4 about one run in eight failed
        torch.testing.assert_close(out, model(*args), rtol=1e-3, atol=1e-4)
    assert after - before < 10 * MiB, f"RSS grew {(after - before) / MiB:.1f} MiB over 100,000 iterations"
