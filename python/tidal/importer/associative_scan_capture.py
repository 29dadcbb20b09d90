"""Keep generic-mode `associative_scan` as ONE `associative_scan` HOP, under export and Dynamo.

PyTorch runs `associative_scan(..., combine_mode="generic")` as its recursive odd/even algorithm
over a `torch.vmap` of the combine, so every tracer (torch.export, Dynamo) records that expansion:
hundreds of aten nodes for T=256, seconds of compile time, and no `tidal.associative_scan` for
tidal's own lowerings. Only the "pointwise" mode reaches the HOP, and only for CUDA tensors.

Two capture paths, both emitting `associative_scan_op(per_slice_combine, leaves, ())` (the HOP's
contract: the combine is traced on single slices):

* torch.export (non-strict, top level runs as Python): `keep_associative_scan()` swaps the
  module's `generic_associative_scan` for one that unwraps the vmap and calls the HOP.
* Dynamo (torch.compile, and Dynamo tracing a HOP body during export): a polyfill registered with
  `torch._dynamo.substitute_in_graph` replaces the user-level `associative_scan` while Dynamo
  inlines it. It keeps the HOP only when tidal is the one tracing (the backend being compiled
  for is tidal's, or `keep_associative_scan()` is active), decided at trace time by a function
  Dynamo evaluates as a constant; every other backend (Inductor cannot compile the HOP on the
  CPU) traces PyTorch's own code unchanged. Dynamo's handler of the HOP checks that the combine
  is pointwise (it expects only the pointwise mode); for tidal's traces that check is lifted.

The HOP's eager kernel calls the combine on whole batches of slices, which is only right for an
elementwise combine; `eager_associative_scan()` vmaps it, for graphs tidal hands back to eager.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import types

import torch
import torch.utils._pytree as pytree

_ASSOC = "torch._higher_order_ops.associative_scan"
_state = threading.local()


def _assoc_module():
    import torch._higher_order_ops.associative_scan  # noqa: F401  (load the module)

    return sys.modules[_ASSOC]


# -- torch.export --------------------------------------------------------------------------------


def _flat_combine(combine_fn, spec, num_leaves, *args):
    """Combine on flat leaves (the HOP's calling convention), calling the user's pytree function."""
    return _assoc_module().wrap_combine_fn_flat(*args, combine_fn=combine_fn, spec=spec, num_leaves=num_leaves)


def _vmapped_function(fn):
    """The function a `torch.vmap` wrapper maps (its `__wrapped__` is not always set)."""
    if hasattr(fn, "__wrapped__"):
        return fn.__wrapped__
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_filename.endswith("apis.py") and "func" in code.co_freevars:
        return fn.__closure__[code.co_freevars.index("func")].cell_contents
    return None


def _unvmapped(combine_fn):
    """The user's per-slice combine function inside torch's generic-mode wrapper, if it is one."""
    mod = _assoc_module()
    if isinstance(combine_fn, functools.partial) and combine_fn.func is mod.wrap_combine_fn_flat:
        kw = combine_fn.keywords
        user_fn = _vmapped_function(kw.get("combine_fn"))
        if user_fn is not None:
            return functools.partial(_flat_combine, user_fn, kw["spec"], kw["num_leaves"])
    return None


@contextlib.contextmanager
def keep_associative_scan():
    """Within this context, generic-mode `associative_scan` is captured as one HOP (by export's
    Python-level tracing, and by Dynamo when it traces a HOP body that calls it)."""
    install_dynamo_polyfill()
    mod = _assoc_module()
    original = mod.generic_associative_scan

    def generic_or_hop(combine_fn, leaves, dim=0, additional_inputs=()):
        if torch.compiler.is_dynamo_compiling():
            # Dynamo cannot trace the unwrapping below; its calls go through the polyfill.
            return original(combine_fn, leaves, dim=dim, additional_inputs=additional_inputs)
        per_slice = _unvmapped(combine_fn)
        if per_slice is None or getattr(_state, "in_hop", False):
            # Not the user-level generic call, or the HOP's own dense/fake implementation
            # evaluating itself: run torch's algorithm as usual, on the batched combine.
            batched = getattr(combine_fn, "batched", combine_fn)
            return original(batched, leaves, dim=dim, additional_inputs=additional_inputs)
        per_slice.batched = combine_fn
        _state.in_hop = True
        try:
            return mod.associative_scan_op(per_slice, leaves, additional_inputs=tuple(additional_inputs))
        finally:
            _state.in_hop = False

    from tidal.tracing import tracing_for_tidal

    mod.generic_associative_scan = generic_or_hop
    try:
        with tracing_for_tidal():
            yield
    finally:
        mod.generic_associative_scan = original


# -- Dynamo --------------------------------------------------------------------------------------


@torch._dynamo.assume_constant_result
def _tidal_is_tracing() -> bool:
    """True when the graph being built goes to tidal (evaluated by Dynamo at trace time)."""
    from tidal.tracing import tidal_is_tracing

    return tidal_is_tracing()


def _as_one_hop(combine_fn, xs, dim, reverse):
    """The generic scan as the HOP, the way torch's own pointwise path calls it."""
    mod = _assoc_module()
    leaves, spec = pytree.tree_flatten(xs)
    dim = torch._prims_common.canonicalize_dim(leaves[0].ndim, dim)
    leaves = [torch.movedim(x, dim, 0) for x in leaves]
    if reverse:
        leaves = [torch.flip(x, [0]) for x in leaves]
    combine = functools.partial(mod.wrap_combine_fn_flat, combine_fn=combine_fn, spec=spec, num_leaves=len(leaves))
    # Dynamo's handler of the HOP returns the combine's output pytree (as for the pointwise mode).
    out = mod.associative_scan_op(combine, leaves, additional_inputs=())
    if reverse:
        out = pytree.tree_map(lambda o: o.flip([0]), out)
    return pytree.tree_map(lambda o: torch.movedim(o, 0, dim), out)


_torch_associative_scan = None


def _associative_scan_in_dynamo(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    if combine_mode == "generic" and _tidal_is_tracing():
        return _as_one_hop(combine_fn, xs, dim, reverse)
    return _torch_associative_scan(combine_fn, xs, dim, reverse, combine_mode)


def install_dynamo_polyfill() -> None:
    """Register `_associative_scan_in_dynamo` as what Dynamo traces for `associative_scan` (once
    per process; eager calls of `associative_scan` are untouched)."""
    global _torch_associative_scan
    if _torch_associative_scan is not None:
        return
    original = _assoc_module().associative_scan
    # A copy of torch's function: Dynamo inlines it as ordinary code (the original itself now
    # stands for the polyfill).
    copy = types.FunctionType(original.__code__, original.__globals__, original.__name__,
                              original.__defaults__, original.__closure__)
    copy.__kwdefaults__ = original.__kwdefaults__
    _torch_associative_scan = copy
    torch._dynamo.substitute_in_graph(original)(_associative_scan_in_dynamo)
    _admit_generic_combines()


def _admit_generic_combines() -> None:
    """Dynamo's handler of the HOP refuses a combine that is not pointwise (the HOP was reached
    only from the pointwise mode); for tidal, any combine of a generic-mode scan is legal."""
    from torch._dynamo.variables import higher_order_ops as hops

    import torch._inductor.utils as inductor_utils

    handler = hops.AssociativeScanHigherOrderVariable
    original = handler._call_function

    def call_function(self, tx, args, kwargs):
        if not _tidal_is_tracing():
            return original(self, tx, args, kwargs)
        is_pointwise_use = inductor_utils.is_pointwise_use
        inductor_utils.is_pointwise_use = lambda *a, **k: True
        try:
            return original(self, tx, args, kwargs)
        finally:
            inductor_utils.is_pointwise_use = is_pointwise_use

    handler._call_function = call_function


# -- eager -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def eager_associative_scan():
    """Within this context, the HOP's eager kernel vmaps its per-slice combine over the scanned
    dimension (torch's kernel calls it on batches of slices, right only for elementwise combines)."""
    from torch._C import DispatchKey

    mod = _assoc_module()
    op = mod.associative_scan_op
    original = op.py_kernels[DispatchKey.CompositeExplicitAutograd]

    def dense(combine_fn, xs, additional_inputs):
        in_dims = (0,) * (2 * len(xs)) + (None,) * len(additional_inputs)
        batched = torch.vmap(combine_fn, in_dims=in_dims, out_dims=0)
        return mod.generic_associative_scan(batched, list(xs), additional_inputs=tuple(additional_inputs))

    op.py_kernels[DispatchKey.CompositeExplicitAutograd] = dense
    op._dispatch_cache.clear()
    try:
        yield
    finally:
        op.py_kernels[DispatchKey.CompositeExplicitAutograd] = original
        op._dispatch_cache.clear()
