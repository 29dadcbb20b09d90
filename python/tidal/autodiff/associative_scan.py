"""`associative_scan`: O(T) memory. The prefix results are the only residuals.

With y_0 = x_0 and y_t = f(y_{t-1}, x_t), the cotangent reaching y_t is
G_t = ȳ_t + J_lhs(y_t, x_{t+1})ᵀ G_{t+1}, and x̄_t = J_rhs(y_{t-1}, x_t)ᵀ G_t (x̄_0 = G_0); the
consts' cotangents add up over the steps. Both VJPs come from PyTorch's formulas; the residuals are
T slices (the results, which the forward returns anyway), never PyTorch's T×T matrix.

Two forms of the adjoint, chosen per combine:
- elementwise combine (pointwise aten ops only, operands and results of one shape: a linear
  recurrence, logaddexp, max): each element's Jacobian J_lhs is a small k×k matrix (k operands),
  computed for all steps at once by k VJPs of the combine applied to whole [T-1, ...] tensors. The
  recurrence G_t = ȳ_t + J_tᵀ G_{t+1} is then itself a reverse associative scan over affine maps
  (Aₜ, bₜ) = (J_tᵀ, ȳ_t), composed as (A_r A_l, b_r + A_r b_l): parallel over T (`tt.scan` on a
  GPU; on the CPU the vectorized loop, as for any memory-bound elementwise scan) instead of T
  dependent VJP calls. x̄ and the consts' cotangents are
  one more whole-tensor VJP at the G_t.
- any other combine (a matrix product, a reduction inside): a reverse sequential scan over
  t = T-1 … 1 of the combine's VJP at (y_{t-1}, x_t).
"""

from __future__ import annotations

import functools
import operator

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
    standard_strides,
    trace_body,
    vjp_fn,
)


def _is_elementwise(graph: torch.fx.GraphModule, k: int) -> bool:
    """Only pointwise aten ops, and the k lhs operands, k rhs operands and k results share one
    shape: then each result element depends on the same element of each operand alone (consts
    may broadcast in), and the combine applies unchanged to whole [T, ...] tensors."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    (output,) = [n for n in graph.graph.nodes if n.op == "output"]
    results = list(output.args[0])
    if len(results) != k:
        return False
    shapes = [n.meta["val"].shape for n in [*placeholders[: 2 * k], *results] if isinstance(n, torch.fx.Node)]
    if not all(_same_shape(shape, shapes[0]) for shape in shapes):
        return False
    for node in graph.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            if not (isinstance(node.target, torch._ops.OpOverload) and torch.Tag.pointwise in node.target.tags):
                return False
        elif node.op not in ("placeholder", "output", "get_attr", "call_function"):
            return False
    return True


def _same_shape(a, b) -> bool:
    """Equal shapes, symbolic sizes included (Dynamo's dynamic dims), without guarding on them:
    sizes not known to be equal count as different (the sequential adjoint holds for any)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return len(a) == len(b) and all(statically_known_true(x == y) for x, y in zip(a, b))


def _lhs_dependencies(graph: torch.fx.GraphModule, k: int) -> set[tuple[int, int]]:
    """(i, j) for each result j that depends on lhs operand i at all: where J_lhs can be nonzero."""
    nodes = list(graph.graph.nodes)
    lhs = [n for n in nodes if n.op == "placeholder"][:k]
    reaches: dict[torch.fx.Node, frozenset[int]] = {n: frozenset([i]) for i, n in enumerate(lhs)}
    for n in nodes:
        if n not in reaches:
            reaches[n] = frozenset().union(*(reaches.get(m, frozenset()) for m in n.all_input_nodes))
    (output,) = [n for n in nodes if n.op == "output"]
    return {(i, j) for j, r in enumerate(output.args[0]) if isinstance(r, torch.fx.Node) for i in reaches[r]}


def _adjoint_structure(deps, k, seeded):
    """The cotangent components that can be nonzero (a seeded ȳ, or fed by one through J_lhsᵀ),
    and the entries (i, j) of the affine maps' A kept for them: J's structural nonzeros among
    those components, closed under products (a composed map has no other entries)."""
    live = set(seeded)
    while any(j in live and i not in live for i, j in deps):
        live |= {i for i, j in deps if j in live}
    entries = {(i, j) for i, j in deps if i in live and j in live}
    while True:
        more = {(i, j) for i, m in entries for m2, j in entries if m == m2} - entries
        if not more:
            return sorted(live), sorted(entries)
        entries |= more


def _affine_compose(live, entries, *args):
    """(A_l, b_l) then (A_r, b_r), per element: the affine maps g ↦ b + A g composed,
    (A_r A_l, b_r + A_r b_l), with A's entries outside `entries` zero."""
    a_l, b_l, a_r, b_r = split_into_chunks(args, [len(entries), len(live), len(entries), len(live)])
    a_l, a_r = dict(zip(entries, a_l)), dict(zip(entries, a_r))
    b_l = dict(zip(live, b_l))

    def total(terms, zero_like):
        return functools.reduce(operator.add, terms) if terms else torch.zeros_like(zero_like)

    a = [total([a_r[i, m] * a_l[m, j] for m in live if (i, m) in a_r and (m, j) in a_l], b_r[0]) for i, j in entries]
    b = [total([b_r[n], *[a_r[i, m] * b_l[m] for m in live if (i, m) in a_r]], b_r[0]) for n, i in enumerate(live)]
    return (*a, *b)


def _elementwise_adjoint(combine, ys, xs, consts, g_ys, keys):
    """(x̄, w̄) through the reverse associative scan over affine maps, or None when `combine`
    is not elementwise. `g_ys` holds None where a result's cotangent is zero; w̄ holds the float
    consts' cotangents only."""
    k, n_w = len(ys), len(consts)
    w_grads = [differentiable(w) for w in consts]
    if not all(differentiable(t) for t in [*ys, *xs]):
        return None
    graph = trace_body(combine, [*ys, *xs, *consts], [True] * (2 * k) + [False] * n_w, keys)
    if not _is_elementwise(graph, k):
        return None
    live, entries = _adjoint_structure(_lhs_dependencies(graph, k), k, [i for i, g in enumerate(g_ys) if g is not None])
    if not live:
        return [torch.zeros_like(x) for x in xs], [torch.zeros_like(w) for w, g in zip(consts, w_grads) if g]

    def vjp_of(results):
        """The VJP of the combine's `results` alone: the others' cotangents are zero, and
        leaving them out leaves out their terms (and the residuals only they need)."""
        return vjp_fn(lambda *args: [graph(*args)[j] for j in results], 2 * k + n_w, [ys[j].dtype for j in results])

    def lhs_jacobian(*at):
        differentiate_wrt(*at)
        a = {}
        for j in sorted({j for _, j in entries}):  # ones as result j's cotangent: ∂f_j/∂lhs_i, i.e. A[i][j]
            a.update({(i, j): g_lhs for i, g_lhs in enumerate(list(vjp_of([j])(*at, torch.ones_like(at[j])))[:k])})
        return [a[e] for e in entries]

    def rhs_and_consts_vjp(*args):
        at, g = args[: 2 * k + n_w], args[2 * k + n_w :]
        differentiate_wrt(*at)
        g_rhs, g_w = split_into_chunks(list(vjp_of(live)(*at, *g))[k:], [k, n_w])
        return [*g_rhs, *[d for d, want in zip(g_w, w_grads) if want]]

    def whole(fn, args):
        """fn on whole tensors, traced with grad mode on (the VJPs become aten ops)."""
        return list(trace_body(fn, args, [False] * len(args), keys)(*args))

    # step t ≥ 1 combines (y_{t-1}, x_t); its lhs Jacobian is the one G_{t-1} needs
    at = [*[y[:-1] for y in ys], *[x[1:] for x in xs], *consts]
    # step T-1 has no later step: its A is never applied
    a = [torch.cat([entry, torch.zeros_like(entry[:1])], 0) for entry in whole(lhs_jacobian, at)] if entries else []
    leaves = reversed_steps([*a, *[g_ys[i] for i in live]])
    compose = trace_body(
        lambda *args: _affine_compose(live, entries, *args), [*leaves, *leaves], [True] * (2 * len(leaves)), keys
    )
    g = reversed_steps(list(associative_scan_op(compose, leaves, ()))[len(entries) :])
    g_rhs, g_w = split_into_chunks(whole(rhs_and_consts_vjp, [*at, *[gt[1:] for gt in g]]), [k, sum(w_grads)])
    # x̄_0 = G_0 (zero for a result whose cotangent is zero), x̄_t = J_rhsᵀ G_t
    g_first = dict(zip(live, (gt[:1] for gt in g)))
    g_xs = [torch.cat([g_first[i] if i in g_first else torch.zeros_like(r[:1]), r], 0) for i, r in enumerate(g_rhs)]
    return g_xs, g_w


def _sequential_adjoint(combine, ys, xs, consts, g_ys, keys):
    """(x̄, w̄) through a reverse sequential scan of the combine's VJP (w̄: float consts only)."""
    k, n_w = len(ys), len(consts)
    combine_vjp = vjp_fn(combine, 2 * k + n_w, [y.dtype for y in ys])
    w_grads = [differentiable(w) for w in consts]
    n_g = sum(w_grads)

    def adjoint_step(*args):
        from_later, g_w, y_prev, x_t, g_y, w = split_into_chunks(args, [k, n_g, k, k, k, n_w])
        differentiate_wrt(*y_prev, *x_t, *w)
        total = [a + b for a, b in zip(g_y, from_later)]
        g_lhs, g_rhs, g_w_t = split_into_chunks(list(combine_vjp(*y_prev, *x_t, *w, *total)), [k, k, n_w])
        g_w_t = [d for d, want in zip(g_w_t, w_grads) if want]
        # the reverse scan's carries keep the strides of its init (standard ones)
        carries = [*g_lhs, *[a + b for a, b in zip(g_w, g_w_t)]]
        return (*[standard_strides(c) for c in carries], *g_rhs)

    init = [*[Meta(y[0]).zeros() for y in ys], *[Meta(w).zeros() for w, want in zip(consts, w_grads) if want]]
    stacked = [*reversed_steps([y[:-1] for y in ys]), *reversed_steps([x[1:] for x in xs]), *reversed_steps([g[1:] for g in g_ys])]
    adjoint = trace_body(adjoint_step, [*init, *stacked, *consts], [False] * len(init) + [True] * len(stacked) + [False] * n_w, keys)
    outs = scan_op(adjoint, init, stacked, list(consts))
    from_later, g_w, g_rest = split_into_chunks(list(outs), [k, n_g, k])
    g_xs = [torch.cat([(g[0] + c).unsqueeze(0), torch.flip(r, (0,))], 0) for g, c, r in zip(g_ys, from_later, g_rest)]
    return g_xs, g_w


def _one_step(xs) -> bool:
    """A scan of length 1 (Dynamo specializes sizes 0 and 1, so it is static): both adjoints
    work on steps 1.. (T-1 of them), and with none left they would trace a body on the first of
    zero steps."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return statically_known_true(xs[0].shape[0] == 1)


def _one_step_adjoint(consts, g_ys):
    """y_0 = x_0: x̄ = ȳ, and the combine never runs, so the float consts' cotangents are zero."""
    return list(g_ys), [Meta(w).zeros() for w in consts if differentiable(w)]


class AssociativeScanVJP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, combine, num_xs, *operands):
        xs, consts = operands[:num_xs], operands[num_xs:]
        with torch._C._AutoDispatchBelowAutograd():
            ys = associative_scan_op(combine, list(xs), list(consts))
        ctx.combine, ctx.counts = combine, (num_xs, len(consts))
        ctx.metas = [Meta(y) for y in ys]
        ctx.set_materialize_grads(False)  # a result nothing uses keeps a structurally zero cotangent
        ctx.keys = dispatch_keys()
        save_values_for_backward(ctx, (*ys, *xs, *consts))
        return tuple(ys)

    @staticmethod
    def backward(ctx, *grads):
        k, n_w = ctx.counts
        ys, xs, consts = split_into_chunks(saved_values(ctx), [k, k, n_w])
        if _one_step(xs):
            g_xs, g_w = _one_step_adjoint(consts, cotangents(grads, ctx.metas))
        else:
            g_ys = [None if g is None else standard_strides(g) for g in grads]
            g_xs, g_w = _elementwise_adjoint(ctx.combine, ys, xs, consts, g_ys, ctx.keys) or _sequential_adjoint(
                ctx.combine, ys, xs, consts, cotangents(grads, ctx.metas), ctx.keys
            )
        g_w = iter(g_w)
        g_consts = [next(g_w) if differentiable(w) else None for w in consts]
        return None, None, *[g if differentiable(x) else None for g, x in zip(g_xs, xs)], *g_consts


@AUTODIFF.rule("tidal.associative_scan")
def associative_scan_vjp(combine_fn, xs, additional_inputs):
    """Results as the only residuals; the adjoint is a reverse associative scan over affine maps
    (elementwise combines) or a reverse sequential scan of the combine's VJP."""
    return AssociativeScanVJP.apply(combine_fn, len(xs), *xs, *additional_inputs)
