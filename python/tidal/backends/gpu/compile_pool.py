"""Kernels compiled ahead of their launch in worker processes, as Inductor's async compile does:
a program's kernels go to the workers as soon as the program is built (`CompilePool.submit`),
so that they compile while Dynamo and AOTAutograd trace the rest of the step (the backward); a
launch then waits for its kernel's worker and loads the binary from Triton's disk cache.

Processes, not threads: Triton's passes and LLVM hold the GIL; eight threads compiled a GRU's
kernels (B=64 H=256, fresh Triton cache, H200 machine) in 19.8 s against 21.5 s one after another.
A worker runs `compile_worker.py` by path and imports triton only, so it starts in a fraction of
a second and never touches a GPU (it compiles for the target it is given).

A worker's answer is only a warm cache: the launch compiles in-process either way (a load when
the worker succeeded), so a worker that fails or dies costs time, never a wrong kernel; its
errors are raised, located, by that in-process compile. `TIDAL_COMPILE_WORKERS=0` turns the
workers off.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import warnings
from concurrent.futures import Future

from tidal.backends.gpu import compile_worker

# Eight workers compile the fourteen kernels of an LSTM's training step in about the time of its
# two slowest; more only cost memory (each worker holds an LLVM context).
MOST_WORKERS = 8


class CompilePool:
    """`count` worker processes fed from one queue, each by a thread of this process; `env`:
    the workers' environment (None: this process's, its `sys.path` as their PYTHONPATH)."""

    def __init__(self, count: int, env: dict | None = None):
        if env is None:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._workers = []
        self._warned = False
        self._lock = threading.Lock()
        self._alive = count
        for n in range(count):
            worker = subprocess.Popen([sys.executable, compile_worker.__file__], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
            self._workers.append(worker)
            threading.Thread(target=self._feed, args=(worker,), daemon=True, name=f"tidal-compile-{n}").start()

    def submit(self, kernel, target: tuple[str, int], text: str, launcher: bool = False) -> Future:
        """A future of `kernel` (its text for `target` given) compiled into Triton's disk cache,
        with `launcher` its C launcher too (a GPU machine): its result is None, or why the worker
        could not compile the kernel."""
        future: Future = Future()
        job = {"name": kernel.name, "text": text, "signature": list(kernel.signature.items()),
               "stage": kernel.stage, "num_warps": kernel.num_warps, "target": list(target), "launcher": launcher}
        self._jobs.put((json.dumps(job) + "\n", future))
        return future

    def _feed(self, worker) -> None:
        while (item := self._jobs.get()) is not None:
            line, future = item
            try:
                worker.stdin.write(line)
                worker.stdin.flush()
                reply = worker.stdout.readline()
            except (OSError, ValueError):
                reply = ""
            if not reply:
                future.set_result(f"compile worker exited (code {worker.poll()})")
                self._died(worker)
                return
            future.set_result(json.loads(reply)["error"])
        worker.stdin.close()

    def _died(self, worker) -> None:
        """A worker died: its jobs compile in the launching process. The last one alive drains
        the queue, answering each job so, so that no launch waits forever."""
        with self._lock:
            self._alive -= 1
            last = self._alive == 0
            first, self._warned = not self._warned, True
        if first:
            warnings.warn(f"tidal: a GPU compile worker exited (code {worker.poll()}); its kernels compile in this "
                          "process instead (slower first calls). TIDAL_COMPILE_WORKERS=0 turns the workers off.",
                          RuntimeWarning, stacklevel=2)
        if last:
            while (item := self._jobs.get()) is not None:
                item[1].set_result("no compile worker left")

    def close(self) -> None:
        """Stop the workers once the jobs queued before are done."""
        for _ in self._workers:
            self._jobs.put(None)


_pool: CompilePool | None = None
_pool_lock = threading.Lock()
_could_not_start = False


def worker_count() -> int:
    """`TIDAL_COMPILE_WORKERS`, else one a CPU up to MOST_WORKERS; 0 or 1: no workers."""
    setting = os.environ.get("TIDAL_COMPILE_WORKERS", "").strip()
    if not setting:
        return min(MOST_WORKERS, os.cpu_count() or 1)
    if not setting.isdigit():
        raise ValueError(f"TIDAL_COMPILE_WORKERS={setting!r}: expected a number of worker processes (0: none)")
    return int(setting)


def shared_pool() -> CompilePool | None:
    """The process's pool, started at its first use; None where workers are off."""
    global _pool, _could_not_start
    with _pool_lock:
        if _pool is None and not _could_not_start and worker_count() > 1:
            try:
                _pool = CompilePool(worker_count())
            except OSError as exc:  # no interpreter to start (an embedded Python): compile here
                warnings.warn(f"tidal: GPU compile workers could not start ({exc}); kernels compile in this process",
                              RuntimeWarning, stacklevel=2)
                _could_not_start = True
                return None
            import atexit

            atexit.register(_pool.close)
        return _pool
