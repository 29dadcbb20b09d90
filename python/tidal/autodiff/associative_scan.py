"""`associative_scan`: O(T) memory. The prefix results are the only residuals.

With y_0 = x_0 and y_t = f(y_{t-1}, x_t), the cotangent reaching y_t is
G_t = ȳ_t + J_lhs(y_t, x_{t+1})ᵀ G_{t+1}, and x̄_t = J_rhs(y_{t-1}, x_t)ᵀ G_t (x̄_0 = G_0); the
consts' cotangents add up over the steps. The adjoint is that recurrence as a reverse sequential
scan over t = T-1 … 1 of the combine's VJP at (y_{t-1}, x_t), from PyTorch's formulas: T
residual slices (the results, which the forward returns anyway), never PyTorch's T×T matrix.
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.associative_scan import associative_scan_op
from torch._higher_order_ops.scan import scan_op
from torch._higher_order_ops.utils import save_values_for_backward, saved_values, split_into_chunks

from tidal.autodiff import AUTODIFF
from tidal.autodiff.common import (
    Meta,
    cotangents,
    differentiable,
    differentiate_wrt,
    dispatch_keys,
    reversed_steps,
    trace_body,
    vjp_fn,
)


class AssociativeScanVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, combine, num_xs, *operands):
        xs, consts = operands[:num_xs], operands[num_xs:]
        with torch._C._AutoDispatchBelowAutograd():
            ys = associative_scan_op(combine, list(xs), list(consts))
        ctx.combine, ctx.counts = combine, (num_xs, len(consts))
        ctx.metas = [Meta(y) for y in ys]
        ctx.keys = dispatch_keys()
        save_values_for_backward(ctx, (*ys, *xs, *consts))
        return tuple(ys)

    @staticmethod
    def backward(ctx, *grads):
        k, n_w = ctx.counts
        ys, xs, consts = split_into_chunks(saved_values(ctx), [k, k, n_w])
        g_ys = cotangents(grads, ctx.metas)
        combine_vjp = vjp_fn(ctx.combine, 2 * k + n_w, [m.dtype for m in ctx.metas])

        def adjoint_step(*args):
            from_later, g_w, y_prev, x_t, g_y, w = split_into_chunks(args, [k, n_w, k, k, k, n_w])
            differentiate_wrt(*y_prev, *x_t, *w)
            total = [a + b for a, b in zip(g_y, from_later)]
            g_lhs, g_rhs, g_w_t = split_into_chunks(list(combine_vjp(*y_prev, *x_t, *w, *total)), [k, k, n_w])
            return (*g_lhs, *[a + b for a, b in zip(g_w, g_w_t)], *g_rhs)

        init = [*[torch.zeros_like(y[0]) for y in ys], *[torch.zeros_like(w) for w in consts]]
        stacked = [*reversed_steps([y[:-1] for y in ys]), *reversed_steps([x[1:] for x in xs]), *reversed_steps([g[1:] for g in g_ys])]
        adjoint = trace_body(
            adjoint_step,
            [*init, *stacked, *consts],
            [False] * len(init) + [True] * len(stacked) + [False] * n_w,
            ctx.keys,
        )
        outs = scan_op(adjoint, init, stacked, list(consts))
        from_later, g_w, g_rest = split_into_chunks(list(outs), [k, n_w, k])
        g_xs = [
            torch.cat([(g[0] + c).unsqueeze(0), torch.flip(r, (0,))], 0)
            for g, c, r in zip(g_ys, from_later, g_rest)
        ]
        operands = [*xs, *consts]
        return None, None, *[g if differentiable(o) else None for g, o in zip([*g_xs, *g_w], operands)]


@AUTODIFF.rule("tidal.associative_scan")
def associative_scan_vjp(combine_fn, xs, additional_inputs):
    """Results as the only residuals; the adjoint is a reverse sequential scan of the combine's VJP."""
    return AssociativeScanVJP.apply(combine_fn, len(xs), *xs, *additional_inputs)
