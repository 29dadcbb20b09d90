"""`scan`: the carries entering each step are the residuals; the adjoint is a reverse scan.

Forward: the scan also stacks the carry entering each step (T × carry, the only residuals besides
the xs and consts it already has). Backward: a scan over the steps in reverse whose carry is the
carry's cotangent plus one accumulator per const (captured weights: their cotangents add up over
the steps), and whose body is the step's VJP recomputed from (carry_t, x_t, consts) with
PyTorch's derivative formulas. Memory: T carries, not every intermediate of every step.

Checkpointing (`options={"scan_checkpoint": k}`): the T steps run as T/s segments of s steps (s
the largest divisor of T not above k; a scan of symbolic length keeps every step). The forward
keeps only the carry entering each segment (T/s carries); the backward walks the segments in
reverse, recomputes a segment's s entering carries from its checkpoint, and runs the reverse scan
above over them: memory ≈ T/s + s carries for one more forward pass.
"""

from __future__ import annotations

import torch
from torch._higher_order_ops.scan import scan_op
from torch._higher_order_ops.utils import save_values_for_backward, saved_values, split_into_chunks

from tidal.autodiff import AUTODIFF
from tidal.autodiff.common import (
    Meta,
    cotangents,
    differentiable,
    differentiate_wrt,
    dispatch_keys,
    flat,
    reversed_steps,
    trace_body,
    vjp_fn,
)
from tidal.tracing import scan_checkpoint


def _segments(ts, s):
    """[T, ...] → [T/s, s, ...]"""
    return [t.reshape(t.shape[0] // s, s, *t.shape[1:]) for t in ts]


def _joined(ts):
    """[T/s, s, ...] → [T, ...]"""
    return [t.reshape(t.shape[0] * t.shape[1], *t.shape[2:]) for t in ts]


def _segment_length(length, k: int) -> int:
    if k <= 1 or not isinstance(length, int):
        return 1
    return next(s for s in range(min(k, length), 0, -1) if length % s == 0)


def _keeping_the_carry(body, num_carries):
    """The step, also returning (a copy of) the carry it started from."""

    def step(*args):
        return (*flat(body(*args)), *[c.clone() for c in args[:num_carries]])

    return step


class ScanVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, body, num_carries, num_xs, segment, *operands):
        init, xs, consts = split_into_chunks(operands, [num_carries, num_xs, len(operands) - num_carries - num_xs])
        step = _keeping_the_carry(body, num_carries)
        with torch._C._AutoDispatchBelowAutograd():
            if segment == 1:
                outs = scan_op(step, list(init), list(xs), list(consts))
            else:

                def run_segment(*args):  # (carry..., xs of s steps..., consts...)
                    c, x, w = split_into_chunks(args, [num_carries, num_xs, len(consts)])
                    inner = scan_op(body, list(c), list(x), list(w))
                    return (*inner, *[ci.clone() for ci in c])

                outs = scan_op(run_segment, list(init), _segments(xs, segment), list(consts))
                outs = [*outs[:num_carries], *_joined(outs[num_carries : len(outs) - num_carries]), *outs[len(outs) - num_carries :]]
        results, carries_in = outs[: len(outs) - num_carries], outs[len(outs) - num_carries :]
        ctx.body, ctx.counts, ctx.segment = body, (num_carries, num_xs, len(consts)), segment
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
        s = ctx.segment
        step_vjp = vjp_fn(ctx.body, n_c + n_x + n_w, [m.dtype for m in ctx.metas])

        def adjoint_step(*args):
            g_c, g_w, c_t, x_t, g_y, w = split_into_chunks(args, [n_c, n_w, n_c, n_x, n_y, n_w])
            # every float primal is differentiated: the carry's cotangent chains through all steps
            # even where the caller's init or xs need no gradient
            differentiate_wrt(*c_t, *x_t, *w)
            g_c_prev, g_x, g_w_t = split_into_chunks(list(step_vjp(*c_t, *x_t, *w, *g_c, *g_y)), [n_c, n_x, n_w])
            return (*g_c_prev, *[a + b for a, b in zip(g_w, g_w_t)], *g_x)

        init = [*g_final, *[torch.zeros_like(w) for w in consts]]
        steps = [*carries_in, *xs, *g_ys]
        adjoint = trace_body(
            adjoint_step, [*init, *steps, *consts], [False] * len(init) + [True] * len(steps) + [False] * n_w, ctx.keys
        )

        def reverse_scan(checkpoints, xs_, g_ys_, g_init, w):
            """The adjoint of the steps over xs_: carries entering them in `checkpoints`."""
            stacked = [*reversed_steps(checkpoints), *reversed_steps(xs_), *reversed_steps(g_ys_)]
            g_out, g_w, g_xs_rev = split_into_chunks(list(scan_op(adjoint, g_init, stacked, list(w))), [n_c, n_w, n_x])
            return g_out, g_w, reversed_steps(g_xs_rev)

        if s == 1:
            g_init, g_w, g_xs = reverse_scan(carries_in, xs, g_ys, init, consts)
        else:
            step = _keeping_the_carry(ctx.body, n_c)

            def adjoint_segment(*args):
                g_c, g_w, c_seg, x_seg, g_y_seg, w = split_into_chunks(args, [n_c, n_w, n_c, n_x, n_y, n_w])
                recomputed = scan_op(step, list(c_seg), list(x_seg), list(w))
                g_c_prev, g_w_new, g_x_seg = reverse_scan(recomputed[len(recomputed) - n_c :], x_seg, g_y_seg, [*g_c, *g_w], w)
                return (*g_c_prev, *g_w_new, *g_x_seg)

            stacked = [*carries_in, *_segments(xs, s), *_segments(g_ys, s)]
            adjoint_seg = trace_body(
                adjoint_segment, [*init, *stacked, *consts], [False] * len(init) + [True] * len(stacked) + [False] * n_w, ctx.keys
            )
            outs = scan_op(adjoint_seg, init, reversed_steps(stacked), list(consts))
            g_init, g_w, g_xs_seg = split_into_chunks(list(outs), [n_c, n_w, n_x])
            g_xs = _joined(reversed_steps(g_xs_seg))
        grads_in = [*g_init, *g_xs, *g_w]
        operands = [*carries_in, *xs, *consts]  # dtypes of the operands, in order
        return None, None, None, None, *[g if differentiable(o) else None for g, o in zip(grads_in, operands)]


@AUTODIFF.rule("tidal.scan")
def scan_vjp(combine_fn, init, xs, additional_inputs):
    """Stacked entering carries as residuals (every step's, or every checkpoint segment's); the
    adjoint is a reverse scan of the step's VJP."""
    segment = _segment_length(xs[0].shape[0], scan_checkpoint()) if xs else 1
    return ScanVJP.apply(combine_fn, len(init), len(xs), segment, *init, *xs, *additional_inputs)
