"""Reverse mode: tidal's own rules for the control-flow ops, PyTorch's formulas for everything else.

Under `torch.compile(backend="tidal")`, aot_autograd traces the joint forward+backward graph of a
Dynamo graph: every aten op's vector-Jacobian product comes from PyTorch's derivative formulas
(the same numerics as eager autograd), and aot_autograd's partitioner splits the joint graph into
a forward graph (outputs + residuals) and a backward graph (residuals + output cotangents → input
cotangents), which tidal compiles like any other program (loops native).

What aot_autograd cannot do well is the control-flow HOPs: PyTorch's own rules fail on `scan`
("scan might be aliasing the input or the output"), need `while_loop_stack_output` for
`while_loop`, and build a T×T matrix for `associative_scan`. Each HOP's Autograd kernel
dispatches to tidal's rule while tidal traces (`install_autodiff_rules()`): an autograd.Function whose
forward emits the forward HOP with the residuals the adjoint needs, and whose backward emits the
adjoint as HOPs again (a reverse scan, an adjoint cond, ...), with the body's VJPs traced from
PyTorch's formulas. The rules are attached to the ops' registration entries under "autodiff"
(`tidal-opt --describe-op tidal.scan` shows where each is defined); one module per op.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from tidal.dialects import declare_transformation
from tidal.diagnostics import TidalUnsupported
from tidal.tracing import before_tidal_traces, tidal_backend_is_tracing, tidal_is_tracing

AUTODIFF = declare_transformation(
    "autodiff",
    "reverse-mode rule: forward HOP with residuals + adjoint HOPs, traced by aot_autograd",
)

# (tidal op, the module and attribute of PyTorch's HOP object)
_HOPS = (
    ("tidal.scan", "torch._higher_order_ops.scan", "scan_op"),
    ("tidal.cond", "torch._higher_order_ops.cond", "cond_op"),
    ("tidal.map", "torch._higher_order_ops.map", "map_impl"),
    ("tidal.associative_scan", "torch._higher_order_ops.associative_scan", "associative_scan_op"),
    ("tidal.while", "torch._higher_order_ops.while_loop", "while_loop_op"),
)


def _hop(module: str, attr: str):
    import importlib

    return getattr(importlib.import_module(module), attr)


def _needs_grad(args, kwargs) -> bool:
    return torch.is_grad_enabled() and pytree.tree_any_only(torch.Tensor, lambda t: t.requires_grad, (args, kwargs))


def _autograd_kernel(rule, pytorch_kernel):
    def kernel(*args, **kwargs):
        if not (_needs_grad(args, kwargs) and tidal_is_tracing()):
            return pytorch_kernel(*args, **kwargs)
        try:
            return rule(*args, **kwargs)
        except (torch._dynamo.exc.RestartAnalysis, torch._dynamo.exc.SkipFrame):
            raise  # Dynamo's own control flow
        except Exception as refusal:  # noqa: BLE001 - a refusal, or a rule's own failure
            if tidal_backend_is_tracing():
                raise  # the backend turns it into one fallback warning (strict: an error)
            # Dynamo's fake-tensor run, before the backend sees the graph: PyTorch's rule may
            # still give the shapes (the backend then falls back); if it fails too, say why
            try:
                return pytorch_kernel(*args, **kwargs)
            except Exception:  # noqa: BLE001
                if isinstance(refusal, TidalUnsupported):
                    raise refusal from None
                raise

    return kernel


_installed = False


def install_autodiff_rules() -> None:
    """Give each control-flow HOP an Autograd kernel that differentiates with tidal's rule while
    tidal traces (Dynamo's fake-tensor runs for the tidal backend, aot_autograd inside it) and
    with PyTorch's own kernel otherwise (eager, other backends). Once per process."""
    global _installed
    if _installed:
        return
    from torch._C import DispatchKey

    from tidal.dialects.registry import op_entry

    for op_name, module, attr in _HOPS:
        rule = op_entry(op_name).rule(AUTODIFF.name)
        if rule is None:
            continue
        hop = _hop(module, attr)
        hop.py_kernels[DispatchKey.Autograd] = _autograd_kernel(rule.fn, hop.py_kernels[DispatchKey.Autograd])
        hop._dispatch_cache.clear()
    _installed = True


# Whoever loads autodiff (the drivers, through tidal.init_all) has the rules in every trace for
# tidal: the importer's export (Dynamo's fake-tensor runs of HOPs whose inputs require grad) knows
# no autodiff. Dynamo's own runs for the tidal backend come first: tidal.dynamo installs them too.
before_tidal_traces(install_autodiff_rules)

# The per-op modules attach their rules to AUTODIFF, so they load after it exists.
from tidal.autodiff import associative_scan, cond, map, scan, while_loop  # noqa: E402,F401

