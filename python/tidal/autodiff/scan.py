"""`scan`: the carries entering each step are the residuals; the adjoint is a reverse scan.

Forward: the scan also stacks the carry entering each step (T × carry, the only residuals besides
the xs and consts it already has). Backward: a scan over the steps in reverse whose carry is the
carry's cotangent plus one accumulator per const (captured weights: their cotangents add up over
the steps), and whose body is the step's VJP recomputed from (carry_t, x_t, consts) with
PyTorch's derivative formulas. Memory: T carries, not every intermediate of every step.
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.scan import scan_op
from torch._higher_order_ops.utils import save_values_for_backward, saved_values, split_into_chunks

from tidal.autodiff import AUTODIFF
from tidal.autodiff.common import Meta, cotangents, differentiable, dispatch_keys, flat, trace_body, vjp_fn


def _reversed(ts):
    return [torch.flip(t, (0,)) for t in ts]


class ScanVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, body, num_carries, num_xs, *operands):
        init, xs, consts = split_into_chunks(operands, [num_carries, num_xs, len(operands) - num_carries - num_xs])

        def step_keeping_the_carry(*args):
            return (*flat(body(*args)), *[c.clone() for c in args[:num_carries]])

        with torch._C._AutoDispatchBelowAutograd():
            outs = scan_op(step_keeping_the_carry, list(init), list(xs), list(consts))
        results, carries_in = outs[: len(outs) - num_carries], outs[len(outs) - num_carries :]
        ctx.body, ctx.counts = body, (num_carries, num_xs, len(consts))
        ctx.metas = [Meta(r) for r in results]
        ctx.keys = dispatch_keys()
        save_values_for_backward(ctx, (*carries_in, *xs, *consts))
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        n_c, n_x, n_w = ctx.counts
        carries_in, xs, consts = split_into_chunks(saved_values(ctx), [n_c, n_x, n_w])
        grads = cotangents(grads, ctx.metas)
        g_final, g_ys = grads[:n_c], grads[n_c:]
        n_y = len(g_ys)
        step_vjp = vjp_fn(ctx.body, (*[c[0] for c in carries_in], *[x[0] for x in xs], *consts), [m.dtype for m in ctx.metas])

        def adjoint_step(*args):
            g_c, g_w, c_t, x_t, g_y, w = split_into_chunks(args, [n_c, n_w, n_c, n_x, n_y, n_w])
            # every float primal is differentiated: the carry's cotangent chains through all steps
            # even where the caller's init or xs need no gradient
            for t in (*c_t, *x_t, *w):
                if differentiable(t):
                    t.requires_grad_(True)
            g_c_prev, g_x, g_w_t = split_into_chunks(list(step_vjp(*c_t, *x_t, *w, *g_c, *g_y)), [n_c, n_x, n_w])
            return (*g_c_prev, *[a + b for a, b in zip(g_w, g_w_t)], *g_x)

        init = [*g_final, *[torch.zeros_like(w) for w in consts]]
        stacked = [*_reversed(carries_in), *_reversed(xs), *_reversed(g_ys)]
        adjoint = trace_body(
            adjoint_step,
            [*init, *stacked, *consts],
            [False] * len(init) + [True] * len(stacked) + [False] * n_w,
            ctx.keys,
        )
        outs = scan_op(adjoint, init, stacked, list(consts))
        g_init, g_w, g_xs = split_into_chunks(list(outs), [n_c, n_w, n_x])
        grads_in = [*g_init, *_reversed(g_xs), *g_w]
        operands = [*carries_in, *xs, *consts]  # dtypes of the operands, in order
        return None, None, None, *[g if differentiable(o) else None for g, o in zip(grads_in, operands)]


@AUTODIFF.rule("tidal.scan")
def scan_vjp(combine_fn, init, xs, additional_inputs):
    """Stacked entering carries as residuals; the adjoint is a reverse scan of the step's VJP."""
    return ScanVJP.apply(combine_fn, len(init), len(xs), *init, *xs, *additional_inputs)
