"""`while_loop`: a data-dependent trip count, differentiated without a maximum.

Forward: the loop runs as `while_loop_stack_output` over (step counter, carries, entering
carries), so every iteration pushes the carries it started from onto growing buffers (tidal
lowers them with doubling: `tidal.while {stack_outputs}`); the last row holds the final carries.
Those rows and the counters are the only residuals. Backward: a loop over the rows from the last
to the first whose body is the loop body's VJP (PyTorch's formulas), passing the cotangent through
unchanged on the single placeholder row a loop that never ran leaves; the consts' cotangents add
up. (A loop indexing the rows, not a scan over them: their count is an unbacked size.)
"""

from __future__ import annotations

import contextlib

import torch
from torch._higher_order_ops.utils import save_values_for_backward, saved_values, split_into_chunks
from torch._higher_order_ops.while_loop import while_loop_op, while_loop_stack_output_op

from tidal.autodiff import AUTODIFF
from tidal.autodiff.common import (
    Meta,
    cotangents,
    differentiable,
    differentiate_wrt,
    dispatch_keys,
    flat,
    trace_body,
    vjp_fn,
)
from tidal.diagnostics import TidalUnsupported


def _row_count_stays_inside(operands):
    """The number of rows is a fresh unbacked size; it never reaches the op's outputs (the final
    carries), so the tracer must not expect to find it there."""
    from torch._guards import detect_fake_mode

    mode = detect_fake_mode(operands)
    if mode is None or mode.shape_env is None:
        return contextlib.nullcontext()
    return mode.shape_env.ignore_fresh_unbacked_symbols()


def _last_row(steps):
    """Index of the last row as a 0-d tensor: the step count minus one, or 0 for the placeholder
    row of a loop that never ran. A tensor index, not a size: the row count is an unbacked size,
    and slicing by it would make the tracer guard on it."""
    return (steps.max() - 1).clamp(min=0)


def _row(stacked, k):
    """Row `k` (a 0-d tensor) of `stacked`, without a bounds check on its unbacked row count."""
    return torch.index_select(stacked, 0, k.reshape(1)).squeeze(0)


class WhileVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cond_fn, body_fn, num_carries, *operands):
        carries, consts = operands[:num_carries], operands[num_carries:]

        def counted_cond(step, *args):
            return cond_fn(*args[:num_carries], *args[2 * num_carries :])

        def counted_body(step, *args):
            current, consts_ = args[:num_carries], args[2 * num_carries :]
            return (step + 1, *flat(body_fn(*current, *consts_)), *[c.clone() for c in current])

        start = torch.zeros((), dtype=torch.int64, device=carries[0].device)
        with torch._C._AutoDispatchBelowAutograd(), _row_count_stays_inside(operands):
            rows = while_loop_stack_output_op(
                counted_cond, counted_body, (start, *carries, *[c.clone() for c in carries]), tuple(consts)
            )
        steps, after, entering = split_into_chunks(list(rows), [1, num_carries, num_carries])
        last = _last_row(steps[0])
        finals = [_row(a, last) for a in after]
        ctx.body, ctx.counts = body_fn, (num_carries, len(consts))
        ctx.metas = [Meta(c) for c in carries]
        ctx.keys = dispatch_keys()
        save_values_for_backward(ctx, (*steps, *entering, *consts))
        return tuple(finals)

    @staticmethod
    def backward(ctx, *grads):
        n_c, n_w = ctx.counts
        (steps,), entering, consts = split_into_chunks(saved_values(ctx), [1, n_c, n_w])
        g_final = cotangents(grads, ctx.metas)
        body_vjp = vjp_fn(ctx.body, n_c + n_w, [m.dtype for m in ctx.metas])

        def more_rows(k, *args):
            return k >= 0

        def adjoint_step(k, *args):
            g_c, g_w, (steps_, *rows), w = split_into_chunks(list(args), [n_c, n_w, 1 + n_c, n_w])
            c_k = [_row(r, k) for r in rows]
            differentiate_wrt(*c_k, *w)
            g_c_prev, g_w_k = split_into_chunks(list(body_vjp(*c_k, *w, *g_c)), [n_c, n_w])
            ran = _row(steps_, k) > 0  # False only on the placeholder row of a loop that never ran
            return (
                k - 1,
                *[torch.where(ran, new, old) for new, old in zip(g_c_prev, g_c)],
                *[torch.where(ran, acc + d, acc) for acc, d in zip(g_w, g_w_k)],
            )

        carries = [_last_row(steps), *g_final, *[torch.zeros_like(w) for w in consts]]
        residuals = [steps, *entering, *consts]
        args = [*carries, *residuals]
        cond = trace_body(more_rows, args, [False] * len(args), ctx.keys)
        body = trace_body(adjoint_step, args, [False] * len(args), ctx.keys)
        _, *outs = while_loop_op(cond, body, tuple(carries), tuple(residuals))
        g_init, g_w = split_into_chunks(outs, [n_c, n_w])
        operands = [*entering, *consts]
        return None, None, None, *[g if differentiable(o) else None for g, o in zip([*g_init, *g_w], operands)]


@AUTODIFF.rule("tidal.while")
def while_vjp(cond_fn, body_fn, carried_inputs, additional_inputs):
    """Entering carries pushed onto growing buffers; the adjoint is a reverse scan of the body's VJP."""
    if not all(isinstance(c, torch.Tensor) for c in carried_inputs):
        kinds = ", ".join(type(c).__name__ for c in carried_inputs)
        raise TidalUnsupported(
            f"differentiating a while_loop whose carries are not all tensors ({kinds}): tidal's "
            f"reverse mode records every carry; pass Python numbers as torch.tensor(...)"
        )
    return WhileVJP.apply(cond_fn, body_fn, len(carried_inputs), *carried_inputs, *additional_inputs)
