"""`cond`: the adjoint is a cond on the same predicate whose branches are the branches' VJPs.

The operands are the residuals; the taken branch is recomputed inside its adjoint branch, with
the VJP from PyTorch's formulas. Both adjoint branches return gradients with standard strides: a
cond's branches must agree on strides, and a gradient may come out expanded in one branch only
(d(x * w.sum())/dw) or transposed with a size-1 dim (a scan over dim 1), which PyTorch's own rule
trips over.
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.cond import cond_op
from torch._higher_order_ops.utils import save_values_for_backward, saved_values

from tidal.autodiff import AUTODIFF
from tidal.diagnostics import TidalUnsupported
from tidal.autodiff.common import (
    Meta,
    cotangents,
    differentiable,
    differentiate_wrt,
    dispatch_keys,
    flat,
    standard_strides,
    trace_body,
    vjp_fn,
)


class CondVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pred, true_fn, false_fn, *operands):
        with torch._C._AutoDispatchBelowAutograd():
            outs = flat(cond_op(pred, true_fn, false_fn, list(operands)))
        _refuse_unequal_branches(outs, operands)
        ctx.branches, ctx.n = (true_fn, false_fn), len(operands)
        ctx.metas = [Meta(o) for o in outs]
        ctx.keys = dispatch_keys()
        # a shape test (x.shape[0] < 10, a SymBool) is no tensor to save: it stays on ctx, as the
        # sizes among the operands stay in the saved values (save_values_for_backward takes SymInts)
        ctx.pred = None if isinstance(pred, torch.Tensor) else pred
        save_values_for_backward(ctx, (pred, *operands) if ctx.pred is None else operands)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        saved = saved_values(ctx)
        pred, operands = (saved[0], saved[1:]) if ctx.pred is None else (ctx.pred, saved)
        grads = cotangents(grads, ctx.metas)
        dtypes = [m.dtype for m in ctx.metas]
        # the adjoint cond returns the float operands' cotangents only: a size Dynamo lifted into
        # the branches (a SymInt operand) has none, and a cond's results are tensors
        wanted = [differentiable(o) for o in operands]

        def adjoint(branch):
            branch_vjp = vjp_fn(branch, ctx.n, dtypes)

            def adjoint_branch(*args):
                primals = args[: ctx.n]
                differentiate_wrt(*primals)
                return tuple(standard_strides(g) for g, w in zip(branch_vjp(*args), wanted) if w)

            return trace_body(adjoint_branch, [*operands, *grads], [False] * (ctx.n + len(grads)), ctx.keys)

        true_adjoint, false_adjoint = (adjoint(b) for b in ctx.branches)
        g_operands = iter(flat(cond_op(pred, true_adjoint, false_adjoint, [*operands, *grads])))
        return None, None, None, *[next(g_operands) if w else None for w in wanted]


@AUTODIFF.rule("tidal.cond")
def cond_vjp(pred, true_fn, false_fn, operands):
    """Operands as residuals; the adjoint cond recomputes the taken branch's VJP."""
    return CondVJP.apply(pred, true_fn, false_fn, *operands)


def _refuse_unequal_branches(outs, operands) -> None:
    """Branches of unequal sizes give a result of unbacked size ([u0, 4]); the adjoint branches
    would be traced on cotangents of that size, which neither branch's VJP takes."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    known = set().union(*(free_unbacked_symbols(o) for o in operands if isinstance(o, torch.Tensor)))
    for o in outs:
        if isinstance(o, torch.Tensor) and free_unbacked_symbols(o) - known:
            raise TidalUnsupported(
                "the gradient of a torch.cond whose branches return tensors of different sizes "
                f"(here a result of size {tuple(o.shape)}) is not supported yet: make both branches "
                "return equal sizes (pad, or slice after the cond)"
            )
