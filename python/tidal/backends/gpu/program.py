"""A linalg-level tidal program run on a CUDA device: the public entry of the GPU backend.

`GpuProgram` puts the parts together: the plan of steps built once from the lowered function
(`plan.py`, its kernel variants `variants.py`), the launcher holding each call's device state
(`launch.py`), and the CUDA graphs of the plan (`capture.py`). A call takes the path chosen here.

A program that never reads a device value on the host is captured as a CUDA graph the second
time a set of input buffers and shapes comes, and replayed whenever it comes again (buffers new at
every call, as a training step's activations, never pay for a capture) (one launch, no Python per
step). A replay hands out the graph's own outputs (as aliases), never overwriting ones still held:
while the caller holds a replay's results, a second capture serves (`capture._Capture`).
A program called with new buffers at every call (a training step's forward, whose activations
autograd holds, and its backward, whose inputs are those activations) is captured too where its
plan costs the host more than copying its inputs would (`_worth_staging`: a host loop of kernels,
a recurrence's T steps): over private copies of the inputs, into which each later call of the same
shapes copies its own before the replay (`_Staged`), until its buffers come back: then they get a
capture of their own (a training step's backward, reading the replayed forward's outputs). Buffers that come back only because the
caching allocator reuses a freed address stop the captures on buffers met twice once two of them
never replayed (`_keyed_captures_pay`). `TIDAL_CUDA_GRAPHS=0` turns both off.
"""

from __future__ import annotations

import os
import time

import torch
from torch_mlir import ir

from tidal.backends.gpu.capture import _host_read_refused, _input_key, capture_plan
from tidal.backends.gpu.launch import Launcher, _NeedsTheHost
from tidal.backends.gpu.plan import PlanBuilder, _Plan
from tidal.backends.gpu.variants import _dense

GRAPHS_PER_PROGRAM = 8  # sets of input buffers and shapes with CUDA graphs kept per program
WASTED_CAPTURES = 2  # captures never replayed after which a program stops capturing on buffers met twice
CAPTURES_PER_GRAPH = 2  # graphs per set: while `y = f(x)` holds one's results, the other replays
# A call with new buffers replays a staged capture when copying its inputs in costs less than
# this share of the host time the plan took (the copies: a launch each and the bytes at 1 TB/s)
STAGING_SHARE = 0.25
COPY_LAUNCH_S, COPY_BYTES_PER_S = 10e-6, 1e12


class GpuProgram:
    """Call with CUDA tensors (the program's inputs, in order); returns its results."""

    def __init__(self, module: ir.Module, func_name: str = "main", keep_alive=None):
        self.module = module
        self.keep_alive = keep_alive  # the imported program: its context owns every op the plan holds
        func = next(op for op in module.body.operations if op.operation.name == "func.func"
                    and ir.StringAttr(op.attributes["sym_name"]).value == func_name)
        self.block = func.regions[0].blocks[0]
        self.launcher = Launcher()
        self.builder = PlanBuilder(module, self.launcher.compiled, self.launcher.on_host)
        self.launcher.kernels = self.builder.kernels
        self.plan = _Plan(self.builder, self.block)
        self._graphs: dict = {}
        self._seen: dict = {}  # input keys met once, in order (capture on the second meeting)
        self._staged: dict = {}  # shapes of the inputs -> [_Staged, ...], or False: not capturable
        self._seen_shapes: dict = {}
        self._host_s: dict = {}  # shapes of the inputs -> the least host time a run of the plan took
        self._graphs_enabled = os.environ.get("TIDAL_CUDA_GRAPHS", "1") != "0"
        self.host_results: list[int] = []  # results eager leaves on the CPU (set by the driver)
        self._calls = 0
        self._keyed: list = []  # the captures made for buffers that came back, latest last

    def __call__(self, *tensors):
        device = next((t.get_device() for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda), -1)
        if device < 0:
            device = torch.cuda.current_device()
        # the inputs' GPU, whichever is current: every allocation, constant, launch and capture
        # below goes to the current device and its current stream
        with torch.cuda._DeviceGuard(device):
            self.launcher.device = device
            results = self._run(tensors)
        if self.host_results:
            results = list(results)
            for i in self.host_results:
                results[i] = results[i].cpu()
        return results

    def _run(self, tensors):
        self._calls += 1
        if torch.cuda.is_current_stream_capturing():
            return self._run_in_callers_capture(tensors)
        if not self._graphs_enabled:
            return self._run_plan(self.launcher.device_args(tensors))
        key = tuple(_input_key(t) for t in tensors)
        captures = self._graphs.get(key)
        if captures is None:
            shapes = tuple(_shape_key(t) for t in tensors)
            staged = self._staged.get(shapes)
            # buffers that came back get a capture of their own (no copies) even where a staged one
            # serves their shapes: a backward whose inputs are its replayed forward's outputs
            came_back = key in self._seen and self._keyed_captures_pay()
            ready = next((s for s in staged if s.replayable()), None) if staged and not came_back else None
            if ready is not None:
                self._remember(key)
                return ready.replay(tensors)
            args = self.launcher.device_args(tensors)
            start, compiling = time.perf_counter(), self.launcher.compile_s
            outs = self._run_plan(args)  # compiles the kernels; its results are this call's
            # the plan's own host time, at its least over calls of these shapes: a call that
            # compiled a kernel variant, or met a busy host, would make copies look cheap
            host_s = time.perf_counter() - start - (self.launcher.compile_s - compiling)
            host_s = self._host_s[shapes] = min(host_s, self._host_s.get(shapes, host_s))
            if came_back:  # buffers that come back: worth a capture
                capture = self._capture(args, tensors)
                self._graphs[key] = [capture] if capture else False
                while len(self._graphs) > GRAPHS_PER_PROGRAM:
                    self._graphs.pop(next(iter(self._graphs)))
            else:
                self._remember(key)
                if shapes in self._seen_shapes and staged is not False and len(staged or ()) < CAPTURES_PER_GRAPH \
                        and self._graphs_enabled and _worth_staging(tensors, host_s):
                    new = self._stage(tensors)
                    self._staged[shapes] = [*(staged or ()), new] if new else False
                    while len(self._staged) > GRAPHS_PER_PROGRAM:
                        self._staged.pop(next(iter(self._staged)))
                self._seen_shapes[shapes] = None
                while len(self._seen_shapes) > 4 * GRAPHS_PER_PROGRAM:
                    oldest = next(iter(self._seen_shapes))
                    del self._seen_shapes[oldest]
                    self._host_s.pop(oldest, None)
            return outs
        if captures is False:  # not capturable at these inputs
            return self._run_plan(self.launcher.device_args(tensors))
        ready = next((c for c in captures if c.replayable()), None)
        if ready is not None:
            return ready.replay()
        # every capture's results are still held by the caller: a replay would overwrite them
        args = self.launcher.device_args(tensors)
        outs = self._run_plan(args)
        if len(captures) < CAPTURES_PER_GRAPH:
            captures.append(self._capture(args, tensors))  # the plan captured once already: it needs no host read
        return outs

    def _remember(self, key) -> None:
        """Input buffers met (a capture is made for them when they come again)."""
        self._seen[key] = None
        while len(self._seen) > 4 * GRAPHS_PER_PROGRAM:
            self._seen.pop(next(iter(self._seen)))

    def _run_plan(self, args: list) -> list:
        return self.plan.run({}, args, self.block)

    def _capture(self, args, tensors):
        """`capture_plan` of this program's plan, or False: a plan with a step that needs the host
        is never tried again (`_graphs_enabled` off). The graph keeps the GPU tensors made of
        host values alive, never the caller's buffers: those may be another graph's results (a
        backward reading the forward's activations), which holding would keep from replaying."""
        made = [a for a in args if isinstance(a, torch.Tensor) and not any(a is t for t in tensors)]
        captured = capture_plan(self._run_plan, args, self._calls, made)
        if captured is False:
            self._graphs_enabled = False
        else:
            self._keyed = [*self._keyed[-(2 * GRAPHS_PER_PROGRAM - 1):], captured]
        return captured

    def _keyed_captures_pay(self) -> bool:
        """Buffers met twice came back by chance, not by design, once WASTED_CAPTURES captures made
        for such buffers never replayed within GRAPHS_PER_PROGRAM calls of the program: the
        caching allocator hands a freed activation's address to the next call's (a training
        step's backward, whose inputs the forward makes anew). Each capture costs milliseconds of
        host time and holds its memory, so this program makes no more of them (those made still
        replay; staging stays open)."""
        wasted = sum(1 for c in self._keyed if c.replays == 0 and self._calls - c.made_at > GRAPHS_PER_PROGRAM)
        return wasted < WASTED_CAPTURES

    def _stage(self, tensors):
        """A `_Staged` capture over private copies of `tensors`' GPU buffers, or None where one
        cannot be copied into (overlapping memory: an expanded view) or the plan needs the host."""
        private = []
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device.type != "cpu":
                if not _dense(t):
                    return None
                private.append(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t))
            else:
                private.append(t)
        captured = self._capture(self.launcher.device_args(private), private)
        return _Staged(captured, private) if captured else None

    def _run_in_callers_capture(self, tensors):
        """A call inside a CUDA graph the caller captures (`torch.cuda.graph` around the compiled
        function): the plan's launches go into the caller's graph. A graph of tidal's own cannot
        be replayed there, and a step that reads on the host cannot run there: a clear error."""
        args = self.launcher.device_args(tensors)
        try:
            return self._run_plan(args)
        except _NeedsTheHost as exc:
            raise _host_read_refused(exc.op) from None

    def kernels_for_emit(self) -> list:
        """Every kernel the program makes, for printing without a GPU (those that depend on sizes:
        at the program's static shapes)."""
        return list(self.builder.kernels)


class _Staged:
    """A capture over private copies of the inputs: a call with other buffers of the same shapes
    copies its inputs into them, on the current stream, and replays."""

    def __init__(self, capture, private: list):
        self.capture, self.private = capture, private

    def replayable(self) -> bool:
        return self.capture.replayable()

    def replay(self, tensors) -> list:
        for mine, theirs in zip(self.private, tensors):
            if isinstance(mine, torch.Tensor) and mine.device.type != "cpu":
                mine.copy_(theirs)
        return self.capture.replay()


def _shape_key(t) -> tuple:
    """What a staged capture depends on: a GPU tensor's layout (its buffer is copied in), a host
    value itself."""
    if isinstance(t, torch.Tensor) and t.device.type != "cpu":
        return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
    return _input_key(t)


def _worth_staging(tensors, host_s: float) -> bool:
    """Copying the inputs in costs less than STAGING_SHARE of the host time the plan took."""
    gpu = [t for t in tensors if isinstance(t, torch.Tensor) and t.device.type != "cpu"]
    copy_s = len(gpu) * COPY_LAUNCH_S + sum(t.numel() * t.element_size() for t in gpu) / COPY_BYTES_PER_S
    return copy_s < STAGING_SHARE * host_s
