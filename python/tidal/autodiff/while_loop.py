"""`while_loop`: a data-dependent trip count, differentiated without a maximum.

Forward: the loop runs as `while_loop_stack_output` over (step counter, carries, entering
carries), so every iteration pushes the carries it started from onto growing buffers (tidal
lowers them with doubling: `tidal.while {stack_outputs}`); the last row holds the final carries.
Those rows and the counters are the only residuals. Backward: a loop over the rows from the last
to the first whose body is the loop body's VJP (PyTorch's formulas), passing the cotangent through
unchanged on the single placeholder row a loop that never ran leaves; the consts' cotangents add
up. (A loop indexing the rows, not a scan over them: their count is an unbacked size.)

Under symbolic sizes a loop carries and reads sizes: Python-int and SymInt carries (a counter, a
size counted down) are recorded as 0-d tensors, and the sizes Dynamo lifts into cond and body as
consts (SymInts) get no cotangent.
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
    residual_sizes_unbound,
    standard_strides,
    trace_body,
    vjp_fn,
)


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
    return torch.index_select(stacked, 0, k.reshape(1).to(stacked.device)).squeeze(0)  # a CPU counter's rows stay there


class WhileVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cond_fn, body_fn, num_carries, *operands):
        carries, consts = operands[:num_carries], operands[num_carries:]

        def counted_cond(step, *args):
            return cond_fn(*args[:num_carries], *args[2 * num_carries :])

        def counted_body(step, *args):
            current, consts_ = args[:num_carries], args[2 * num_carries :]
            return (step + 1, *flat(body_fn(*current, *consts_)), *[c.clone() for c in current])

        start = torch.zeros((), dtype=torch.int64, device=_data_device(operands))
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
        # only float consts accumulate a cotangent: the others include sizes Dynamo lifted out of
        # the body (SymInts, which have no zeros to start from and get None from the VJP)
        accumulates = [differentiable(w) for w in consts]
        n_acc = sum(accumulates)

        def more_rows(k, *args):
            return k >= 0

        def adjoint_step(k, *args):
            g_c, g_w, (steps_, *rows), w = split_into_chunks(list(args), [n_c, n_acc, 1 + n_c, n_w])
            c_k = [_row(r, k) for r in rows]
            differentiate_wrt(*c_k, *w)
            g_c_prev, g_w_k = split_into_chunks(list(body_vjp(*c_k, *w, *g_c)), [n_c, n_w])
            g_w_k = [d for d, a in zip(g_w_k, accumulates) if a]
            ran = _row(steps_, k) > 0  # False only on the placeholder row of a loop that never ran
            # the body's VJP may hand back a cotangent transposed (a scan over dim 1 inside), and
            # the adjoint loop's carries must keep the strides they entered with (standard ones)
            return (
                k - 1,
                *[standard_strides(torch.where(ran.to(old.device), new, old)) for new, old in zip(g_c_prev, g_c)],
                *[standard_strides(torch.where(ran.to(acc.device), acc + d, acc)) for acc, d in zip(g_w, g_w_k)],
            )

        carries = [_last_row(steps), *g_final, *[Meta(w).zeros() for w, a in zip(consts, accumulates) if a]]
        residuals = [steps, *entering, *consts]
        args = [*carries, *residuals]
        cond = trace_body(more_rows, args, [False] * len(args), ctx.keys)
        body = trace_body(adjoint_step, args, [False] * len(args), ctx.keys)
        _, *outs = while_loop_op(cond, body, tuple(carries), tuple(residuals))
        g_init, g_w = split_into_chunks(outs, [n_c, n_acc])
        g_w = iter(g_w)
        return None, None, None, *[g if differentiable(o) else None for g, o in zip(g_init, entering)], *[
            next(g_w) if a else None for a in accumulates
        ]


def _scalar_dtype(c):
    return torch.bool if isinstance(c, (bool, torch.SymBool)) else torch.int64


def _as_tensor(value, dtype, device=None):
    return value if isinstance(value, torch.Tensor) else torch.scalar_tensor(value, dtype=dtype, device=device)


def _data_device(values) -> torch.device:
    """Where the loop's data lives: the first tensor not on the CPU (a 0-d CPU counter may ride
    along CUDA data, as in eager), else the CPU. The step counter and the Python-number carries
    go there, so that indexing the stacked rows never mixes devices."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    return next((t.device for t in tensors if t.device.type != "cpu"), torch.device("cpu"))


def _with_tensor_carries(cond_fn, body_fn, carried_inputs, device):
    """cond and body taking (and the body returning) 0-d tensors where the carries are Python
    ints or SymInts (a counter, a size), as tidal's importer carries them: the loop records
    every carry in a tensor buffer. The functions still see Python scalars (`item`)."""
    scalar = [not isinstance(c, torch.Tensor) for c in carried_inputs]
    if not any(scalar):
        return cond_fn, body_fn, list(carried_inputs), scalar
    dtypes = [_scalar_dtype(c) for c in carried_inputs]
    n = len(carried_inputs)

    def as_given(args):
        return [a.item() if s else a for a, s in zip(args[:n], scalar)] + list(args[n:])

    def cond(*args):
        return _as_tensor(cond_fn(*as_given(args)), torch.bool, device)

    def body(*args):
        return tuple(_as_tensor(v, d, device) if s else v for v, s, d in zip(flat(body_fn(*as_given(args))), scalar, dtypes))

    return cond, body, [_as_tensor(c, d, device) if s else c for c, s, d in zip(carried_inputs, scalar, dtypes)], scalar


@AUTODIFF.rule("tidal.while")
def while_vjp(cond_fn, body_fn, carried_inputs, additional_inputs):
    """Entering carries pushed onto growing buffers; the adjoint is a reverse scan of the body's VJP."""
    device = _data_device([*carried_inputs, *additional_inputs])
    cond_fn, body_fn, carries, scalar = _with_tensor_carries(cond_fn, body_fn, carried_inputs, device)
    with residual_sizes_unbound([*carries, *additional_inputs]):  # the stacked entering carries' count
        finals = WhileVJP.apply(cond_fn, body_fn, len(carries), *carries, *additional_inputs)
    return tuple(f.item() if s else f for f, s in zip(finals, scalar))
