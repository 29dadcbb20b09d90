"""`scan`: the step's joint graph cut around what its adjoint keeps; the adjoint is a reverse scan.

Forward: the scan runs the forward part of the step's joint graph (`residuals.split_step`): the
step's results, the values its adjoint keeps (those whose recomputation would repeat a matmul or a
convolution; a kept new carry or per-step output costs nothing more), and a copy of the carry
entering each step. Backward: a scan over the steps in reverse whose carry is the carry's
cotangent, one accumulator per const that needs a gradient (captured weights: their cotangents add
up over the steps), and each kept new carry (handed on: it is the next step's entering one), and
whose body is the adjoint part of the joint graph (PyTorch's derivative formulas), reading only
what it needs. Cotangents nobody wants (xs or consts without requires_grad) are not computed.

Checkpointing (`options={"scan_checkpoint": k}`): the T steps run as T/s segments of s steps (s the
largest divisor of T not above k; a scan of symbolic length keeps every step). The forward keeps
only the carry entering each segment (T/s carries); the backward walks the segments in reverse,
reruns a segment's forward part from its checkpoint, and runs the reverse scan above over it:
memory ≈ T/s + s steps for one more forward pass.

With symbolic shapes (torch.export's dynamic dims) the step is traced only in the backward, and
the adjoint recomputes the step from its entering carry.
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
    differentiable_dtype,
    dispatch_keys,
    flat,
    reversed_steps,
    standard_strides,
    residual_sizes_unbound,
    trace_body,
)
from tidal.autodiff.residuals import kept_values, split_step
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


def _static(tensors) -> bool:
    return all(not isinstance(d, torch.SymInt) for t in tensors if isinstance(t, torch.Tensor) for d in t.shape)


def _spread(values, reads) -> list:
    """`values` (those read) back at their places among all, None where not read."""
    it = iter(values)
    return [next(it) if r else None for r in reads]


def _keeping_the_carry(body, keep):
    """The step, also returning (a copy of) each carry it started from that `keep` names."""

    def step(*args):
        return (*flat(body(*args)), *[c.clone() for c, k in zip(args, keep) if k])

    return step


def _derived_carries(split, segment, xs) -> dict[int, int]:
    """Carries whose entering values the backward reads from a per-step output instead of a stacked
    copy (see `SplitStep.carry_outputs`): step 0's is the initial carry, so at least two steps."""
    if split is None or segment != 1 or not xs or not isinstance(xs[0].shape[0], int) or xs[0].shape[0] < 2:
        return {}
    return split.carry_outputs


def _tail(ts) -> list:
    """Steps 1.. of each stacked value (None stays None)."""
    return [None if t is None else t[1:] for t in ts]


def _head(ts) -> list:
    """Step 0 of each stacked value (None stays None)."""
    return [None if t is None else t[0] for t in ts]


class ScanVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, body, num_carries, num_xs, segment, *operands):
        with residual_sizes_unbound(operands):
            return ScanVJP._forward(ctx, body, num_carries, num_xs, segment, *operands)

    @staticmethod
    def _forward(ctx, body, num_carries, num_xs, segment, *operands):
        counts = (num_carries, num_xs, len(operands) - num_carries - num_xs)
        init, xs, consts = split_into_chunks(operands, list(counts))
        # every carry's cotangent chains through all steps, even where the caller's init needs none
        wanted = [i < num_carries or (ctx.needs_input_grad[4 + i] and differentiable(o)) for i, o in enumerate(operands)]
        # The step is cut in the forward, where it runs; with symbolic shapes (torch.export's
        # dynamic dims) the body is traced once more only in the backward, keeping nothing.
        split = split_step(body, counts, operands, wanted, dispatch_keys()) if _static(operands) else None
        derived = _derived_carries(split, segment, xs)
        keep = [i not in derived for i in range(num_carries)]
        with torch._C._AutoDispatchBelowAutograd():
            if segment == 1:
                step = split.forward if split is not None else body
                outs = scan_op(_keeping_the_carry(step, keep), list(init), list(xs), list(consts))
            else:

                def run_segment(*args):  # (carry..., xs of s steps..., consts...)
                    c, x, w = split_into_chunks(args, list(counts))
                    inner = scan_op(body, list(c), list(x), list(w))
                    return (*inner, *[ci.clone() for ci in c])

                outs = scan_op(run_segment, list(init), _segments(xs, segment), list(consts))
                outs = [*outs[:num_carries], *_joined(outs[num_carries : len(outs) - num_carries]), *outs[len(outs) - num_carries :]]
        n_entering, n_stacked = sum(keep), (split.num_stacked if split is not None and segment == 1 else 0)
        results, stacked, carries_in = split_into_chunks(list(outs), [len(outs) - n_stacked - n_entering, n_stacked, n_entering])
        ctx.body, ctx.split, ctx.counts, ctx.segment, ctx.wanted = body, split, counts, segment, wanted
        ctx.derived = derived
        ctx.metas = [Meta(r) for r in results]
        ctx.keys = dispatch_keys()
        derived_init = [init[i] for i in sorted(derived)]
        save_values_for_backward(ctx, (*carries_in, *derived_init, *xs, *consts, *stacked, *results))
        return tuple(results)

    @staticmethod
    def backward(ctx, *grads):
        n_c, n_x, n_w = ctx.counts
        split, s = ctx.split, ctx.segment
        n_out = len(ctx.metas)
        n_s = split.num_stacked if split is not None and s == 1 else 0
        derived = ctx.derived
        saved = split_into_chunks(saved_values(ctx), [n_c - len(derived), len(derived), n_x, n_w, n_s, n_out])
        carries_in, derived_init, xs, consts, stacked, results = saved
        # a derived carry enters step 0 as the initial carry and step t > 0 as output k of step t - 1
        stacked_in, initial = iter(carries_in), dict(zip(sorted(derived), derived_init))
        carries_in = [None if i in derived else next(stacked_in) for i in range(n_c)]
        if split is None:
            operands = [*carries_in, *xs, *consts]
            split = split_step(ctx.body, ctx.counts, operands, ctx.wanted, ctx.keys, keep=False, carries_stacked=True)
        grads = cotangents(grads, ctx.metas)
        g_final, g_ys = grads[:n_c], grads[n_c:]
        n_y, n_k = len(g_ys), len(split.kept)
        float_output = [differentiable_dtype(d) for d in split.output_dtypes]
        x_wanted, w_wanted = ctx.wanted[n_c : n_c + n_x], ctx.wanted[n_c + n_x :]
        n_gx, n_gw = sum(x_wanted), sum(w_wanted)
        wanted_consts = [w for w, keep in zip(consts, w_wanted) if keep]

        # The per-step values the adjoint reads: only those are stacked into its scan. A kept new
        # carry (kind "carry") is the carry entering the next step: it travels through the reverse
        # scan as one more carry, started from the final carry and handed each step's entering
        # one, instead of a shifted copy of the stacked carries.
        reads_x = split.reads[n_c : n_c + n_x]
        reads_k = split.reads[n_c + n_x + n_w : n_c + n_x + n_w + n_k]
        handed_on = [k.index for k, r in zip(split.kept, reads_k) if r and k.kind == "carry"]
        stacked_k = [r and k.kind != "carry" for k, r in zip(split.kept, reads_k)]
        entering_k = [r or j in handed_on for j, r in enumerate(split.reads[:n_c])]
        n_h, n_ce, n_rx, n_sk = len(handed_on), sum(entering_k), sum(reads_x), sum(stacked_k)

        def read(values, reads):
            return [v for v, r in zip(values, reads) if r]

        def adjoint_step(*args):
            counts = [n_c, n_gw, n_h, n_ce, n_rx, n_sk, n_y, n_w]
            g_c, g_w, leaving, c_t, x_t, kept_t, g_y, w = split_into_chunks(args, counts)
            c_every = _spread(c_t, entering_k)
            kept_every, leaving_it = _spread(kept_t, stacked_k), iter(leaving)
            kept_every = [next(leaving_it) if k.kind == "carry" and r else v for v, k, r in zip(kept_every, split.kept, reads_k)]
            g_out = [g for g, f in zip([*g_c, *g_y], float_output) if f]
            every = [*c_every, *_spread(x_t, reads_x), *w, *kept_every, *g_out]
            g_c_prev, g_x, g_w_t = split_into_chunks(list(split.adjoint(*split.adjoint_inputs(every))), [n_c, n_gx, n_gw])
            handed = [standard_strides(c_every[j].clone()) for j in handed_on]
            # the step's VJP may hand back a carry's cotangent transposed (a scan over dim 1
            # inside), and the reverse scan's carries must keep the strides of its init (standard)
            g_c_prev = [standard_strides(g) for g in g_c_prev]
            g_w_acc = [standard_strides(a + b) for a, b in zip(g_w, g_w_t)]
            return (*g_c_prev, *g_w_acc, *handed, *g_x)

        init = [*g_final, *[Meta(w).zeros() for w in wanted_consts]]  # zeros_like would keep a transposed w's strides

        def reverse_scan(entering, final, xs_, kept, g_ys_, g_init, w):
            """The adjoint of the steps over xs_, entered with the carries `entering` (leaving the
            last one: `final`)."""
            g_init = [*g_init, *[standard_strides(final[j]) for j in handed_on]]
            steps = reversed_steps([*read(entering, entering_k), *read(xs_, reads_x), *read(kept, stacked_k), *g_ys_])
            adjoint = trace_body(
                adjoint_step, [*g_init, *steps, *w], [False] * len(g_init) + [True] * len(steps) + [False] * n_w, ctx.keys
            )
            g_out, g_w, handed, g_xs_rev = split_into_chunks(list(scan_op(adjoint, g_init, steps, list(w))), [n_c, n_gw, n_h, n_gx])
            return g_out, g_w, handed, reversed_steps(g_xs_rev)

        def recomputed(entering, xs_, w):
            """The segment's forward again: every step's entering carries, the final ones, the kept values."""
            outs = scan_op(_keeping_the_carry(split.forward or ctx.body, [True] * n_c), list(entering), list(xs_), list(w))
            final, ys, stacked_, entering_each = split_into_chunks(list(outs), [n_c, n_y, split.num_stacked, n_c])
            return entering_each, final, kept_values(split, stacked_, ys)

        if s == 1 and not derived:
            kept = kept_values(split, stacked, results[n_c:])
            g_init, g_w, _, g_xs = reverse_scan(carries_in, results[:n_c], xs, kept, g_ys, init, consts)
        elif s == 1:
            # Steps T-1..1 as the reverse scan, reading a derived carry's entering values as a view
            # of the output it is, then step 0 (entered with the initial carry) once more after it.
            ys, kept = results[n_c:], kept_values(split, stacked, results[n_c:])
            entering_tail = [ys[derived[i]][:-1] if c is None else c[1:] for i, c in enumerate(carries_in)]
            g_c, g_w, handed, g_xs_tail = reverse_scan(entering_tail, results[:n_c], _tail(xs), _tail(kept), _tail(g_ys), init, consts)
            entering_0 = [initial[i] if c is None else c[0] for i, c in enumerate(carries_in)]
            step_0 = [*g_c, *g_w, *handed, *read(entering_0, entering_k), *read(_head(xs), reads_x),
                      *read(_head(kept), stacked_k), *_head(g_ys), *consts]
            g_init, g_w, _, g_x0 = split_into_chunks(list(adjoint_step(*step_0)), [n_c, n_gw, n_h, n_gx])
            g_xs = [torch.cat([a.unsqueeze(0), b]) for a, b in zip(g_x0, g_xs_tail)]
        else:

            def adjoint_segment(*args):
                g_c, g_w, c_seg, x_seg, g_y_seg, w = split_into_chunks(args, [n_c, n_gw, n_c, n_x, n_y, n_w])
                entering, final, kept = recomputed(c_seg, x_seg, w)
                g_c_prev, g_w_new, _, g_x_seg = reverse_scan(entering, final, x_seg, kept, g_y_seg, [*g_c, *g_w], w)
                return (*g_c_prev, *g_w_new, *g_x_seg)

            segments = [*carries_in, *_segments(xs, s), *_segments(g_ys, s)]
            adjoint_seg = trace_body(
                adjoint_segment, [*init, *segments, *consts], [False] * len(init) + [True] * len(segments) + [False] * n_w, ctx.keys
            )
            outs = scan_op(adjoint_seg, init, reversed_steps(segments), list(consts))
            g_init, g_w, g_xs_seg = split_into_chunks(list(outs), [n_c, n_gw, n_gx])
            g_xs = _joined(reversed_steps(g_xs_seg))
        g_xs, g_w = iter(g_xs), iter(g_w)
        grads_in = [*g_init, *[next(g_xs) if k else None for k in x_wanted], *[next(g_w) if k else None for k in w_wanted]]
        carries = [initial[i] if c is None else c for i, c in enumerate(carries_in)]
        operands = [*carries, *xs, *consts]  # dtypes of the operands, in order
        return None, None, None, None, *[g if g is not None and differentiable(o) else None for g, o in zip(grads_in, operands)]


@AUTODIFF.rule("tidal.scan")
def scan_vjp(combine_fn, init, xs, additional_inputs):
    """Stacked entering carries as residuals (every step's, or every checkpoint segment's); the
    adjoint is a reverse scan of the step's VJP."""
    segment = _segment_length(xs[0].shape[0], scan_checkpoint()) if xs else 1
    return ScanVJP.apply(combine_fn, len(init), len(xs), segment, *init, *xs, *additional_inputs)
