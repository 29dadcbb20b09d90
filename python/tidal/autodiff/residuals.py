"""A loop step's joint forward+VJP graph cut in two: what the forward keeps per step, what the
adjoint recomputes.

The adjoint of a loop body needs some of the body's intermediates. Recomputing all of them from
the entering carry repeats every contraction of the forward in the backward: for an RNN cell, two
of the backward's six matmuls per step. Here the step's joint graph (PyTorch's derivative
formulas, traced once) is cut instead. A value the adjoint needs is kept per step when recomputing
it would repeat a contraction (mm, bmm, convolution, ...) on a per-step input; everything else
(elementwise chains, views, functions of the weights alone) is recomputed in the adjoint, where it
fuses with the VJP's own elementwise work and costs no memory. A kept value that is (a copy of)
one of the step's own results is not stacked a second time: a new carry is the carry entering the
next step, a per-step output is stacked by the loop already.

The adjoint returns only the cotangents the caller wants: a per-step input that needs no gradient
costs no per-step contraction (an RNN's `dx_t = dpre_t Wᵀ`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx as fx

from tidal.autodiff.common import differentiable_dtype, differentiate_wrt, trace_body

aten = torch.ops.aten

# Ops whose recomputation costs a contraction: worth a per-step buffer to avoid.
CONTRACTIONS = {
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.baddbmm.default,
    aten.addbmm.default,
    aten.convolution.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
}

# Ops that return their operand's value unchanged (so a kept value may be a result under another name).
_SAME_VALUE = {aten.alias.default, aten.clone.default, aten.detach.default}


@dataclass(frozen=True)
class Kept:
    """Where the adjoint finds one kept value of each step: `stacked` (the forward stacks it),
    `carry` (a new carry: the carry entering the next step, which the loop's adjoint hands on) or
    `output` (a per-step output, stacked by the loop)."""

    kind: str
    index: int


@dataclass
class SplitStep:
    forward: fx.GraphModule | None  # (carries, xs, consts) -> (new carries, ys, stacked kept values)
    # (carries, xs, consts, kept, cotangents of the float outputs; those in `reads`)
    #   -> (g carries, wanted g xs, wanted g consts)
    adjoint: fx.GraphModule
    kept: list[Kept]
    num_stacked: int
    output_dtypes: list
    # over (carries, xs, consts, kept, cotangents): the inputs the adjoint takes (it reads only these)
    reads: list[bool]
    # carry i -> per-step output k that is the new carry itself: the carry entering step t > 0 is
    # then output k of step t - 1, stacked by the loop already
    carry_outputs: dict[int, int]

    def adjoint_inputs(self, *groups) -> list:
        """The adjoint's arguments out of all its potential inputs, given in `reads`' order."""
        return [v for v, r in zip([v for g in groups for v in g], self.reads) if r]


def _joint(body, num_primals: int):
    """(primals..., cotangents of the float outputs...) -> (outputs..., cotangents of primals).
    (The joint takes cotangents of float outputs only.)"""
    from torch._higher_order_ops.utils import create_bw_fn

    joint = create_bw_fn(body, (None,) * num_primals, return_fw_outputs=True)
    n = num_primals

    def fn(*args):
        # every float primal is differentiated: a carry's cotangent chains through all steps even
        # where the caller's init needs no gradient
        differentiate_wrt(*args[:n])
        return joint(*args)

    return fn


def _outputs(gm: fx.GraphModule) -> list:
    (out,) = [n for n in gm.graph.nodes if n.op == "output"]
    return list(out.args[0])


def _value_root(node):
    while isinstance(node, fx.Node) and node.op == "call_function" and node.target in _SAME_VALUE:
        node = node.args[0]
    return node


def _downstream(sources) -> set:
    seen = set(sources)
    for node in list(sources[0].graph.nodes) if sources else []:
        if node not in seen and any(a in seen for a in node.all_input_nodes):
            seen.add(node)
    return seen


def _cone_has_contraction(node, stop) -> bool:
    """Whether computing `node` from the step's inputs (`stop`) runs a contraction."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n in seen or n in stop:
            continue
        seen.add(n)
        if n.op == "call_function" and n.target in CONTRACTIONS:
            return True
        todo.extend(n.all_input_nodes)
    return False


def split_step(body, counts, operands, wanted, keys, keep=True, carries_stacked=False) -> SplitStep:
    """Cut the step `body` ((carries, xs, consts) -> (new carries, ys)) around the values its
    adjoint keeps. `counts` = (carries, xs, consts); `operands` as the loop gets them (xs stacked,
    and the carries too with `carries_stacked`); `wanted[i]`: whether operand i's cotangent is
    returned (every carry's is: it chains). With `keep=False` nothing is kept (the adjoint
    recomputes the step from its inputs) and there is no forward part."""
    n_c, n_x, n_w = counts
    n = n_c + n_x + n_w
    stacked = [carries_stacked] * n_c + [True] * n_x + [False] * n_w
    fwd = trace_body(body, list(operands), stacked, keys)
    out_vals = [o.meta["val"] for o in _outputs(fwd)]
    output_dtypes = [v.dtype for v in out_vals]
    cot_examples = [v for v, d in zip(out_vals, output_dtypes) if differentiable_dtype(d)]
    joint = trace_body(_joint(body, n), [*operands, *cot_examples], stacked + [False] * len(cot_examples), keys)

    graph = joint.graph
    placeholders = [p for p in graph.nodes if p.op == "placeholder"]
    primals, cots = placeholders[:n], placeholders[n:]
    outs = _outputs(joint)
    fw_outs, grads = outs[: len(out_vals)], outs[len(out_vals) :]
    wanted_grads = [g for g, w in zip(grads, wanted) if w]

    # Values the adjoint gets for free: the step's inputs, and its results (a new carry is the
    # next step's entering carry; a per-step output is stacked by the loop).
    where = {}
    for i, o in enumerate(fw_outs):
        for node in (o, _value_root(o)):
            if isinstance(node, fx.Node) and node.meta["val"].shape == out_vals[i].shape:
                where.setdefault(node, Kept("carry", i) if i < n_c else Kept("output", i - n_c))
    free = set(primals) | set(where)
    needs_cotangent = _downstream(cots)

    # Walk the adjoint back from the cotangents it returns: a forward value it reads is an input
    # when free or when recomputing it repeats a contraction (kept per step), else recomputed.
    kept_nodes, seen, todo = [], set(), [g for g in wanted_grads if isinstance(g, fx.Node)]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.op == "placeholder":
            continue
        forward_value = keep and node not in needs_cotangent and isinstance(node.meta.get("val"), torch.Tensor)
        if forward_value and (node in where or _cone_has_contraction(node, free)):
            kept_nodes.append(node)
            continue
        todo.extend(node.all_input_nodes)
    kept_nodes.sort(key=_position(graph))
    kept, stacked_nodes = [], []
    for node in kept_nodes:
        if node in where:
            kept.append(where[node])
        else:
            kept.append(Kept("stacked", len(stacked_nodes)))
            stacked_nodes.append(node)

    # the loop stacks the kept values the forward returns: copies, so they alias no other output
    forward = _subgraph(joint, primals, [*fw_outs, *stacked_nodes], cloned=len(stacked_nodes)) if keep else None
    adjoint_inputs = [*primals, *kept_nodes, *cots]
    adjoint = _subgraph(joint, adjoint_inputs, wanted_grads)
    reads = _drop_unread_inputs(adjoint)
    return SplitStep(forward, adjoint, kept, len(stacked_nodes), output_dtypes, reads, _carry_outputs(fw_outs, n_c))


def _carry_outputs(fw_outs, n_c: int) -> dict[int, int]:
    roots = [_value_root(o) for o in fw_outs]
    found = {}
    for i in range(n_c):
        k = next((k for k, r in enumerate(roots[n_c:]) if isinstance(r, fx.Node) and r is roots[i]), None)
        if k is not None:
            found[i] = k
    return found


def _drop_unread_inputs(gm: fx.GraphModule) -> list[bool]:
    """Which inputs `gm` reads; the others are removed (the loop then need not pass them)."""
    reads = []
    for p in [n for n in gm.graph.nodes if n.op == "placeholder"]:
        reads.append(bool(p.users))
        if not p.users:
            gm.graph.erase_node(p)
    gm.recompile()
    return reads


def _position(graph):
    order = {node: i for i, node in enumerate(graph.nodes)}
    return order.__getitem__


def _subgraph(gm: fx.GraphModule, inputs, outputs, cloned: int = 0) -> fx.GraphModule:
    """The part of `gm` computing `outputs` from `inputs` (nodes of gm; inputs become
    placeholders); the last `cloned` outputs are returned as copies."""
    g = fx.Graph()
    env = {}
    for i, node in enumerate(inputs):
        p = g.placeholder(f"in{i}")
        p.meta = dict(node.meta)
        env[node] = p
    needed, todo = set(), list(outputs)
    while todo:
        node = todo.pop()
        if not isinstance(node, fx.Node) or node in needed or node in env:
            continue
        if node.op == "placeholder":
            raise AssertionError(f"{node} is needed but is not an input of the part")
        needed.add(node)
        todo.extend(node.all_input_nodes)
    for node in gm.graph.nodes:
        if node in needed:
            env[node] = g.node_copy(node, lambda a: env[a])
    results = [env[o] if isinstance(o, fx.Node) else o for o in outputs]
    for i in range(len(results) - cloned, len(results)):
        results[i] = g.call_function(aten.clone.default, (results[i],))
    g.output(tuple(results))
    return fx.GraphModule(gm, g)


def kept_values(split: SplitStep, stacked, ys) -> list:
    """Each kept value for every step, stacked along dim 0 (None for a kept new carry: the loop's
    own carries supply those)."""
    return [stacked[k.index] if k.kind == "stacked" else ys[k.index] if k.kind == "output" else None for k in split.kept]


__all__ = ["CONTRACTIONS", "Kept", "SplitStep", "kept_values", "split_step"]
