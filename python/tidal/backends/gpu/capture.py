"""CUDA graphs of a plan: one capture over a set of input buffers (`capture_plan`), its replays
handing out the graph's own outputs without overwriting ones the caller still holds (`_Capture`),
what a graph depends on (`_input_key`), and the error of a host read inside the caller's capture.
When a program captures and replays is `GpuProgram._run`.
"""

from __future__ import annotations

import sys

import torch

from tidal.backends.gpu.launch import _NeedsTheHost
from tidal.diagnostics import TidalError


class _Capture:
    """A CUDA graph of the plan and its results, which every replay rewrites in place. Results
    whose memory nothing else holds (not an input, a constant, nor a tensor of the plan other
    than these results) are handed out as aliases, not copies (a copy of a 64 MiB result costs as
    much as the kernel making it): a lone result, a view of a plan buffer (a reshape of a kernel's
    output, which then owns that memory itself), or several views of one buffer (a scan's
    results [T, B, D] and their transpose [B, T, D], both returned for autograd). The graph
    replays only when no alias handed out is alive (the memory held by the results alone
    again). Other results are handed out as copies. `replays` counts the replays (a capture
    that never replays cost its capture for nothing: `GpuProgram` stops making them)."""

    def __init__(self, graph, outs: list, inputs: list, made_at: int = 0):
        outs[:] = [_unviewed(o) for o in outs]  # in place: the views go with the only list holding them
        self.graph, self.outs = graph, outs
        self.inputs = inputs  # the GPU tensors made of host values are read by every replay
        self.owned = _held_by_results_alone(outs)
        sharing = _sharing_counts(outs)
        # per aliased result: the tensors holding its buffer when no alias handed out is alive
        self.alone = [(o, sharing[_storage_key(o)]) for o, owned in zip(outs, self.owned) if owned]
        self.replays, self.made_at = 0, made_at

    def replayable(self) -> bool:
        return all(_storage_users(o) == users for o, users in self.alone)

    def replay(self) -> list:
        self.graph.replay()
        self.replays += 1
        return [o.detach() if owned else o.clone() if isinstance(o, torch.Tensor) else o
                for o, owned in zip(self.outs, self.owned)]


def _unviewed(value):
    """A view as a tensor of its own over the same memory, no longer keeping its base alive (the
    base then goes unless something else holds it)."""
    if not isinstance(value, torch.Tensor) or value._base is None:
        return value
    alone = torch.empty(0, dtype=value.dtype, device=value.device)
    return alone.set_(value.untyped_storage(), value.storage_offset(), value.shape, value.stride())


def _storage_users(t: torch.Tensor) -> int:
    """Tensors (views included) holding `t`'s memory."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata) - 1  # less the probe's own reference


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _sharing_counts(outs: list) -> dict:
    """Per buffer, how many of the results are tensors over it."""
    counts: dict = {}
    for o in outs:
        if isinstance(o, torch.Tensor):
            counts[_storage_key(o)] = counts.get(_storage_key(o), 0) + 1
    return counts


def _held_by_results_alone(outs: list) -> list[bool]:
    """Per result: a tensor that only `outs` refers to (on the Python side: the list and this
    call's argument), no view of another tensor, whose memory no tensor but these results holds
    (a buffer several results view, each held by the list alone, is theirs together)."""
    sharing = _sharing_counts(outs)
    owned = []
    for i in range(len(outs)):  # no name bound to a result: the reference count is the list's and the call's
        owned.append(isinstance(outs[i], torch.Tensor) and sys.getrefcount(outs[i]) == 2 and outs[i]._base is None
                     and _storage_users(outs[i]) == sharing[_storage_key(outs[i])])
    # a buffer is handed out by alias only if every result over it is (else a copy of one
    # would be made from memory the next replay rewrites while an alias of another is alive)
    for key in sharing:
        group = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and _storage_key(o) == key]
        if not all(owned[i] for i in group):
            for i in group:
                owned[i] = False
    return owned


def _input_key(t) -> tuple:
    """What a CUDA graph captured for this argument depends on: a GPU tensor's buffer and layout,
    a host value itself (a 0-d CPU tensor: a dynamic size the plan reads on the host)."""
    if isinstance(t, torch.Tensor):
        if t.device.type == "cpu":
            return ("host", t.dtype, t.item() if t.dim() == 0 else tuple(t.flatten().tolist()))
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
    return ("value", t)


def capture_plan(run_plan, args, made_at: int = 0, keep: list | None = None):
    """The whole plan as one CUDA graph over these input buffers (replayed when the same
    buffers come again: no Python per step, one launch), or False when a step needs the host
    (a predicate read, a scalar copied in) — then the program never tries again. `keep`: the
    arguments the graph holds alive (all of them when None)."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            run_plan(args)  # warm up on the capturing stream
        torch.cuda.current_stream().wait_stream(side)
        # on a stream of this device: torch.cuda.graph's default capture stream is made once,
        # on the device current at the first capture in the process, and a capture on it
        # switched later programs on another GPU to that one
        with torch.cuda.graph(graph, stream=side):
            static_outs = run_plan(args)
    except _NeedsTheHost:
        return False
    return _Capture(graph, static_outs, args if keep is None else keep, made_at)


def _host_read_refused(op) -> TidalError:
    """The error for a call inside the caller's CUDA graph capture that must read on the host."""
    name = op.operation.name if op is not None else "a step"
    what = {"tidal.cond": "this cond reads its predicate on the host (its branches are not cheap "
                          "enough to run both on the device and select)",
            "tidal.while": "this while_loop reads its condition on the host at every iteration"}.get(
        name, f"'{name}' reads a GPU value on the host")
    return TidalError(f"{what}, which a CUDA graph being captured cannot contain: call the compiled "
                      "function outside the capture", op.location if op is not None else None)
