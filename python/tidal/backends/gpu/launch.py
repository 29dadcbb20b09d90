"""Launching a plan's kernels on the GPU of the current call: the call's arguments on that GPU
(`Launcher.device_args`), each kernel compiled and loaded once per GPU (`Launcher.compiled`; the
program's kernels handed to the compile workers before, `Launcher.prefetch`),
device values read on the host (`Launcher.on_host`, refused while a CUDA graph captures:
`_NeedsTheHost`), and one launch with its arguments (`_operand_args`, `_launch`).
"""

from __future__ import annotations

import time

import torch

from tidal.backends.gpu import compile_pool
from tidal.backends.gpu.triton_compile import compile_kernel, kernel_text
from tidal.diagnostics import TidalError, TidalUnsupported


_UNKNOWN = object()  # not among `_host_values` (any Python value may be one)


class _NeedsTheHost(Exception):
    """A step reads a device value on the host (a predicate, an extracted scalar): the program
    cannot be captured as a CUDA graph. `op` is the op whose step reads."""

    op = None


class Launcher:
    """What a plan's steps need of the call running them: the GPU it runs on (set by
    `GpuProgram.__call__`) and the host values its GPU arguments were made of; and, across
    calls, each kernel loaded on each GPU. One per program: its `PlanBuilder` holds `compiled`
    and `on_host` for the steps it makes."""

    def __init__(self):
        self._loaded: dict = {}  # (kernel, device) -> its CompiledKernel (a CUDA module is per device)
        self.device = None  # the GPU the current call runs on
        self._host_values: dict = {}  # id of a GPU argument made of a host value -> that value
        self.compile_s = 0.0  # host seconds spent compiling kernels, over all calls
        self.kernels: list = []  # the program's kernels (its PlanBuilder's list, growing)
        self._compiling: dict = {}  # (kernel, device) -> a compile worker's future for it
        self._prefetched: set = set()  # the GPUs the kernels went to the workers for

    def compiled(self, kernel):
        """`kernel` compiled and loaded for the GPU this call runs on."""
        key = (id(kernel), self.device)
        compiled = self._loaded.get(key)
        if compiled is None:
            if self.device not in self._prefetched:
                self.prefetch(self.device)
            start = time.perf_counter()
            future = self._compiling.pop(key, None)
            if future is not None:
                future.result()  # Triton's disk cache holds it now (or the compile below says why not)
            compiled = self._loaded[key] = compile_kernel(kernel, device=self.device)
            self.compile_s += time.perf_counter() - start
        return compiled

    def prefetch(self, device: int) -> None:
        """The program's kernels not yet loaded on `device` go to the compile workers (when there
        are two or more: one compiles here sooner than a worker starts)."""
        self._prefetched.add(device)
        pending = [k for k in self.kernels if (id(k), device) not in self._loaded and (id(k), device) not in self._compiling]
        if len(pending) < 2 or (pool := compile_pool.shared_pool()) is None:
            return
        from triton.backends.compiler import GPUTarget

        major, minor = torch.cuda.get_device_capability(device)
        target = GPUTarget("cuda", 10 * major + minor, 32)
        for kernel in pending:
            self._compiling[(id(kernel), device)] = pool.submit(kernel, (target.backend, target.arch), kernel_text(kernel, target), launcher=True)

    def device_args(self, tensors) -> list:
        """The call's arguments on the GPU. A 0-d CPU tensor (a size or Python number the boundary
        made a tensor: Dynamo's dynamic sizes) becomes a GPU tensor made by a fill, its value kept
        on the host too (`on_host` reads it there: no copy back, no synchronization, and legal
        in a capture, whose key holds the value). Copying it in and reading it back took a GPU
        call with a dynamic dim from 23 to 184 us (cond_clamp, H100): two synchronizations per
        size, and never a CUDA graph."""
        args, host = [], {}
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                if t.dim() == 0:
                    value = t.item()
                    t = torch.full((), value, dtype=t.dtype, device=self.device)
                    host[id(t)] = value
                elif torch.cuda.is_current_stream_capturing():
                    raise TidalError("a CPU tensor argument would be copied to the GPU inside a CUDA graph being "
                                     "captured, which a capture cannot contain: pass it on the GPU")
                else:
                    t = t.cuda(self.device)
            args.append(t)
        self._host_values = host
        return args

    def on_host(self, value):
        """A value on the host: a GPU tensor is read back (one synchronization; refused while a
        CUDA graph captures) unless `device_args` made it from a host value."""
        if isinstance(value, torch.Tensor):
            known = self._host_values.get(id(value), _UNKNOWN)
            if known is not _UNKNOWN:
                return known
            if torch.cuda.is_current_stream_capturing():
                raise _NeedsTheHost
            return value.item()
        return value


def _launch(compiled, grid, args: list, op) -> None:
    """`compiled` on `grid`. Every kernel indexes its tensors with 32-bit offsets: a tensor whose
    last element lies 2^31 or more elements past its first is refused, with the op's source
    line, rather than indexed wrapped around (there are no 64-bit offset variants yet)."""
    for a in args:
        if isinstance(a, torch.Tensor) and _span(a) > _INT32_MAX:
            raise TidalUnsupported(
                f"GPU backend: a tensor of shape {list(a.shape)} and strides {list(a.stride())} spans 2^31 elements or "
                "more; tidal's GPU kernels index with 32-bit offsets (split the work, or run this graph on the CPU)",
                op.location)
    compiled[grid](*args)


_INT32_MAX = 2**31 - 1


def _span(t: torch.Tensor) -> int:
    """Elements from a tensor's first to its last, both counted (0 when empty)."""
    n = t.numel()
    if n == 0 or (n <= _INT32_MAX and t.is_contiguous()):
        return n
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))


def _operand_args(inputs, captured, captured_scalar, env, on_host) -> list:
    """Kernel arguments of a generic's inputs and of the values its body reads from above: each
    tensor as its pointer and strides, each scalar as a Python number."""
    args = []
    for t in inputs:
        args += [t, *t.stride()]
    for v, scalar in zip(captured, captured_scalar):
        t = env[v]
        args += [on_host(t)] if scalar else [t, *t.stride()]
    return args
