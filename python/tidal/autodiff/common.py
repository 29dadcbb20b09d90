"""Pieces the per-op rules share: tracing a body's VJP into a graph, zeros for absent cotangents."""

from __future__ import annotations

import contextlib

import torch
from torch._higher_order_ops.utils import create_bw_fn, first_slice_copy, materialize_as_graph
from torch._subclasses.functional_tensor import disable_functional_mode
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing


def differentiable_dtype(dtype) -> bool:
    """Integer and boolean values get no cotangent."""
    return dtype.is_floating_point or dtype.is_complex


def differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and differentiable_dtype(t.dtype)


def reversed_steps(ts) -> list:
    """Each tensor with its steps (dim 0) in reverse order."""
    return [torch.flip(t, (0,)) for t in ts]


def differentiate_wrt(*ts) -> None:
    """Inside an adjoint body: its float primals are differentiated (they are the body's own
    inputs, which need no grad outside it)."""
    for t in ts:
        if differentiable(t):
            t.requires_grad_(True)


@contextlib.contextmanager
def residual_sizes_unbound(values):
    """Under Dynamo's fake tensors, sizes that appear only in a rule's residuals (a nested
    while_loop's iteration count, unbacked) are not the HOP's outputs: Dynamo must not ask for
    them there (torch 2.11: "PendingUnbackedSymbolNotFound: Pending unbacked symbols {u3} not in
    returned outputs"), as PyTorch's own while_loop and cond ignore theirs."""
    from torch._guards import detect_fake_mode

    mode = detect_fake_mode([v for v in values if isinstance(v, torch.Tensor)])
    if mode is None or mode.shape_env is None:
        yield
        return
    with mode.shape_env.ignore_fresh_unbacked_symbols():
        yield


def flat(outs) -> list:
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


class Meta:
    """Shape, dtype and device of a value, to make its zero cotangent in the backward."""

    def __init__(self, t: torch.Tensor):
        self.shape, self.dtype, self.device = t.shape, t.dtype, t.device

    def zeros(self) -> torch.Tensor:
        return torch.zeros(self.shape, dtype=self.dtype, device=self.device)


def standard_strides(t):
    """`t` with row-major strides, size-1 dims included (copied only where they differ).

    A HOP compares strides exactly: a while_loop's or a scan's carry must leave the body with the
    strides it entered with, and a cond's branches must agree. Cotangents keep whatever layout
    autograd produced (a movedim's or an expand's backward: a transposed or expanded view), and
    `contiguous()` is not enough: it leaves the stride of a size-1 dim as it is."""
    from torch._prims_common import make_contiguous_strides_for
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
        return t
    wanted = make_contiguous_strides_for(t.shape)
    if all(statically_known_true(a == b) for a, b in zip(t.stride(), wanted)):
        return t
    return t.clone(memory_format=torch.contiguous_format)


def cotangents(grads, metas) -> list[torch.Tensor]:
    """autograd passes None for outputs nothing depends on: the rules want zeros. The others come
    with the layout of whatever produced them, and enter the adjoint HOPs as carries and operands:
    they get standard strides."""
    return [m.zeros() if g is None else standard_strides(g) for g, m in zip(grads, metas)]


def dispatch_keys():
    """The dispatch keys of the forward, to trace the adjoint bodies the same way."""
    return torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()


def vjp_fn(body, num_primals: int, output_dtypes):
    """(primals..., cotangents of body's outputs...) -> cotangents of primals (zeros where none),
    from PyTorch's derivative formulas (aot_autograd's joint tracing of `body`). Cotangents of
    integer and boolean outputs are dropped: the joint takes those of float outputs only."""
    joint = create_bw_fn(body, (None,) * num_primals)  # it only counts them
    keep = [differentiable_dtype(dtype) for dtype in output_dtypes]
    n = num_primals

    def vjp(*args):
        return joint(*args[:n], *[g for g, k in zip(args[n:], keep) if k])

    return vjp


def trace_body(fn, args, stacked, keys) -> torch.fx.GraphModule:
    """`fn` traced into a graph on one step's example of `args` (`stacked[i]`: args[i] is stacked
    along dim 0 and the body sees one slice), grad mode on, so the VJPs inside are aten ops."""
    from torch._higher_order_ops.utils import _from_fun
    from torch._dispatch.python import suspend_functionalization

    with suspend_functionalization(), disable_functional_mode():
        with disable_proxy_modes_tracing():
            examples = []
            for a, is_stacked in zip(args, stacked):
                a = _from_fun(a) if isinstance(a, torch.Tensor) else a
                examples.append(first_slice_copy(a) if is_stacked else a)
        return materialize_as_graph(fn, tuple(examples), keys[0], keys[1], force_enable_grad=True)


__all__ = ["Meta", "residual_sizes_unbound", "cotangents", "differentiable", "differentiable_dtype", "differentiate_wrt", "dispatch_keys", "flat", "reversed_steps", "standard_strides", "trace_body", "vjp_fn"]
