"""Is tidal the one tracing? Some of PyTorch's behaviour changes only for graphs that go to tidal
(generic associative_scan kept as one HOP, tidal's autodiff rules for the control-flow HOPs);
every other backend, and eager PyTorch, keep PyTorch's own.

Frontend-neutral state below the importer and autodiff: it imports no other part of tidal. The
Dynamo driver names its backend callable (`register_backend`) so that `tidal_is_tracing` can
recognise a graph Dynamo builds for it."""

from __future__ import annotations

import contextlib
import threading

import torch

_state = threading.local()


# Done once, before the first trace for tidal (`before_tidal_traces`): tidal.autodiff installs its
# rules here, so an export for tidal (the importer's, which knows no autodiff) differentiates the
# control-flow HOPs with them in its fake-tensor runs.
_setups: list = []


def before_tidal_traces(setup) -> None:
    """Call `setup()` once, before the next trace for tidal begins (`tracing_for_tidal`)."""
    _setups.append(setup)


@contextlib.contextmanager
def tracing_for_tidal(scan_checkpoint: int = 1):
    """Marks the tracing done here (torch.export, aot_autograd in tidal's backend) as tidal's;
    `scan_checkpoint` is what tidal's scan rule reads (`scan_checkpoint()`)."""
    while _setups:
        _setups.pop(0)()
    depth, checkpoint = getattr(_state, "depth", 0), getattr(_state, "scan_checkpoint", 1)
    _state.depth, _state.scan_checkpoint = depth + 1, scan_checkpoint
    try:
        with _linalg_checks_without_effect_tokens():
            yield
    finally:
        _state.depth, _state.scan_checkpoint = depth, checkpoint


@contextlib.contextmanager
def _linalg_checks_without_effect_tokens():
    """torch 2.13 marks `aten::_linalg_check_errors` (the info check after solve, cholesky, inv,
    lu_factor, ...) as an ordered effect, so aot_autograd threads an effect token through the
    graph (a `with_effects` HOP). Inside a loop body the token is made while tracing the body
    under fake tensors (`new_token_tensor()`): it becomes a FakeTensor constant of the graph
    module, returned as the graph's token, and touching its data fails ('Cannot access data
    pointer of Tensor (e.g. FakeTensor'; Inductor fails the same way). While tidal traces, the
    check is a plain op without results that dead-code elimination must keep (as it keeps
    `_assert_async`): it becomes an ATen call, so a singular matrix raises eager's LinAlgError
    rather than giving inf/nan."""
    from torch.fx.node import _side_effectful_functions

    entry = torch._library.simple_registry.singleton.find("aten::_linalg_check_errors").effect
    effect = entry.effect  # torch 2.11 registers none: there, only the DCE must learn to keep it
    check = torch.ops.aten._linalg_check_errors.default
    added = check not in _side_effectful_functions
    if effect is not None:
        entry.register(None)
    _side_effectful_functions.add(check)
    try:
        yield
    finally:
        if added:
            _side_effectful_functions.discard(check)
        if effect is not None:
            entry.register(effect)


def tidal_backend_is_tracing() -> bool:
    """Inside `tracing_for_tidal()`: tidal's own tracing (not Dynamo's, whose graph tidal gets later)."""
    return getattr(_state, "depth", 0) > 0


# The node annotation `checkpoint()` sets (torch.fx.traceback.annotate survives Dynamo and reaches
# the rule through aot_autograd's node-meta replay).
_CHECKPOINT_ANNOTATION = "tidal_scan_checkpoint"


def checked_checkpoint(value) -> int:
    """`value` as steps per checkpoint segment, or a ValueError saying what is wanted."""
    try:
        k = int(value)
    except (TypeError, ValueError):
        k = 0
    if k < 1 or isinstance(value, bool) or (isinstance(value, float) and value != k):
        raise ValueError(f"tidal: scan_checkpoint must be a positive integer (steps per segment), got {value!r}")
    return k


def checkpoint(steps: int):
    """`with tidal.checkpoint(k): ... scan(...)`: the differentiated scans traced inside the block
    (nested ones included) keep their carry only every k steps and recompute the segments in the
    backward, whatever the global `scan_checkpoint` option says. Outside tidal it does nothing."""
    import torch.fx.traceback

    return torch.fx.traceback.annotate({_CHECKPOINT_ANNOTATION: checked_checkpoint(steps)})


def scan_checkpoint() -> int:
    """Steps per checkpoint segment of the differentiated scan being traced (1: every step's carry
    is kept): the op's own `checkpoint()` block, else the global option."""
    import torch.fx.traceback

    per_op = (torch.fx.traceback.get_current_meta().get("custom") or {}).get(_CHECKPOINT_ANNOTATION)
    return per_op if per_op is not None else getattr(_state, "scan_checkpoint", 1)


def _backend_chain(fn):
    """The backend callable and everything Dynamo and torch.compile wrapped around it. Under DDP,
    Dynamo compiles for `DDPOptimizer.compile_fn`, which hands each piece of the graph on to the
    backend it keeps as `backend_compile_fn`."""
    seen = []
    while fn is not None and all(fn is not s for s in seen):
        seen.append(fn)
        fn = (
            getattr(fn, "_torchdynamo_orig_backend", None)
            or getattr(fn, "compiler_fn", None)
            or getattr(getattr(fn, "__self__", None), "backend_compile_fn", None)
        )
    return seen


# The tidal backend callables Dynamo may be compiling for (`tidal.dynamo` registers its own).
_backends: list = []


def register_backend(fn) -> None:
    """`fn` is a tidal backend: a graph Dynamo builds for it (or for a wrapper of it) is tidal's."""
    if all(fn is not b for b in _backends):
        _backends.append(fn)


def tidal_is_tracing() -> bool:
    """Inside `tracing_for_tidal()`, or while Dynamo builds a graph for the tidal backend."""
    if tidal_backend_is_tracing():
        return True
    from torch._dynamo.symbolic_convert import InstructionTranslator

    try:
        tx = InstructionTranslator.current_tx()
    except (AttributeError, IndexError, RuntimeError):
        return False
    compiler_fn = getattr(getattr(tx, "output", None), "compiler_fn", None)
    return any(fn is b for fn in _backend_chain(compiler_fn) for b in _backends)
