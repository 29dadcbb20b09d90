"""Scalars at program and control-flow boundaries become 0-d tensors (an FX pass before import).

tidal's ops and its native calling convention carry tensors only. PyTorch programs also pass
Python ints, SymInts (sizes Dynamo made symbolic) and SymBools (shape predicates) into and out of
`cond`/`while_loop`/`scan`/`map`, and return them to the caller. This pass rewrites such values
where they cross a boundary: `aten.scalar_tensor` (int64, or bool for predicates) on the way in,
`aten.item` on the way out, so a while_loop counter is a 0-d i64 tensor carry inside the program
and a Python int at the caller, exactly as eager returns it.

At the graph's own boundary, a SymInt input that is a size of a tensor input is recomputed from
that tensor (`aten.sym_size`), so one program serves every size; any other scalar input is passed
as a 0-d tensor. `BoundaryPlan` tells the caller how to convert arguments and results.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch

from tidal.importer.fx_rewrite import rewrite_nodes

aten = torch.ops.aten
_CONTROL_FLOW = ("cond", "while_loop", "while_loop_stack_output", "scan", "map_impl", "associative_scan")


def _is_scalar(v) -> bool:
    return isinstance(v, (bool, int, torch.SymInt, torch.SymBool)) and not isinstance(v, torch.Tensor)


def _val(a):
    return a.meta.get("val") if isinstance(a, torch.fx.Node) else a


def _dtype(v) -> torch.dtype:
    return torch.bool if isinstance(v, (bool, torch.SymBool)) else torch.int64


def _zero_d(fake_mode, dtype):
    with fake_mode:
        return torch.empty((), dtype=dtype)


def _to_tensor(graph: torch.fx.Graph, a, fake_mode) -> torch.fx.Node:
    dtype = _dtype(_val(a))
    node = graph.call_function(aten.scalar_tensor.default, (a,), {"dtype": dtype})
    node.meta["val"] = _zero_d(fake_mode, dtype)
    return node


def _item_after(graph: torch.fx.Graph, node: torch.fx.Node, value) -> None:
    """Users of `node` (now a 0-d tensor) get `item(node)`, of the scalar `value` it held."""
    with graph.inserting_after(node):
        item = graph.call_function(aten.item.default, (node,))
    item.meta["val"] = value
    node.replace_all_uses_with(item, delete_user_cb=lambda user: user is not item)


def _drop_round_trips(graph: torch.fx.Graph) -> None:
    """`scalar_tensor(item(t))` of a 0-d `t` is `t`. A shape predicate that aot_autograd saves for
    the backward (a cond's SymBool) enters that program as a 0-d bool tensor and goes straight to
    the adjoint cond: without this the program would hold `item` of a bool tensor, which
    torch-mlir does not import (its `aten.item` yields numbers only)."""
    for node in list(graph.nodes):
        if node.target is not aten.scalar_tensor.default:
            continue
        item = node.args[0]
        if not (isinstance(item, torch.fx.Node) and item.target is aten.item.default):
            continue
        source, made = item.args[0].meta.get("val"), node.meta.get("val")
        if not (isinstance(source, torch.Tensor) and source.dim() == 0 and isinstance(made, torch.Tensor)
                and (source.dtype, source.device) == (made.dtype, made.device)):
            continue
        node.replace_all_uses_with(item.args[0])
        graph.erase_node(node)
        if not item.users and _dtype(item.meta.get("val")) is torch.bool:
            graph.erase_node(item)


def _tensorize_body(gm: torch.fx.GraphModule, fake_mode) -> None:
    graph = gm.graph
    for ph in [n for n in graph.nodes if n.op == "placeholder"]:
        v = ph.meta.get("val")
        if _is_scalar(v):
            _item_after(graph, ph, v)
            ph.meta["val"] = _zero_d(fake_mode, _dtype(v))
    _tensorize(gm, fake_mode)
    out = next(n for n in graph.nodes if n.op == "output")
    results = out.args[0]
    with graph.inserting_before(out):
        if isinstance(results, (list, tuple)):
            out.args = (type(results)(_to_tensor(graph, r, fake_mode) if _is_scalar(_val(r)) else r for r in results),)
        elif _is_scalar(_val(results)):  # a while_loop cond returning a SymBool
            out.args = (_to_tensor(graph, results, fake_mode),)
    _drop_round_trips(graph)
    gm.recompile()


def _tensorize(gm: torch.fx.GraphModule, fake_mode) -> None:
    graph = gm.graph
    for node in list(graph.nodes):
        if not (node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator)):
            continue
        if node.target.name() not in _CONTROL_FLOW:
            continue
        with graph.inserting_before(node):
            args = []
            for i, a in enumerate(node.args):
                if isinstance(a, (list, tuple)):
                    a = type(a)(_to_tensor(graph, x, fake_mode) if _is_scalar(_val(x)) else x for x in a)
                elif i == 0 and node.target.name() == "cond" and _is_scalar(_val(a)):
                    a = _to_tensor(graph, a, fake_mode)  # a shape predicate
                args.append(a)
            node.args = tuple(args)
        for a in node.args:
            if isinstance(a, torch.fx.Node) and a.op == "get_attr":
                sub = getattr(gm, a.target)
                if isinstance(sub, torch.fx.GraphModule):
                    _tensorize_body(sub, fake_mode)
        vals = node.meta.get("val")
        if isinstance(vals, (list, tuple)) and any(_is_scalar(v) for v in vals):
            for user in list(node.users):
                if user.target is operator.getitem and _is_scalar(user.meta.get("val")):
                    v = user.meta["val"]
                    _item_after(graph, user, v)
                    user.meta["val"] = _zero_d(fake_mode, _dtype(v))
            node.meta["val"] = type(vals)(_zero_d(fake_mode, _dtype(v)) if _is_scalar(v) else v for v in vals)


@dataclass
class BoundaryPlan:
    """How a caller talks to the rewritten graph.

    inputs[i] is what placeholder i of the rewritten graph receives: ("tensor", k) the caller's
    argument k, ("scalar", k) argument k as a 0-d tensor; arguments not named are recomputed
    inside the program (sizes). outputs[j] is how the caller's result j is made: "tensor" (the
    program's next result), "scalar" (the next result as a Python scalar) or "none" (None, which
    the program does not return: aot_autograd's backward gives None for inputs needing no grad).
    """

    inputs: list[tuple[str, int]]
    outputs: list[str]

    def arguments(self, args) -> list[torch.Tensor]:
        return [args[k] if kind == "tensor" else torch.tensor(args[k]) for kind, k in self.inputs]

    def results(self, outs) -> list:
        it = iter(outs)
        return [None if kind == "none" else next(it).item() if kind == "scalar" else next(it) for kind in self.outputs]


def _scalar_overload(node: torch.fx.Node):
    """The overload of `node`'s operator that takes a Scalar where `node` passes a number or a
    SymInt to a Tensor parameter (PyTorch's decompositions do: floor_divide by a size becomes
    `div.Tensor_mode(x, s0)`, which eager wraps and torch-mlir refuses), or None."""
    op = node.target
    if not isinstance(op, torch._ops.OpOverload):
        return None
    params = op._schema.arguments
    given = list(node.args) + [node.kwargs.get(p.name) for p in params[len(node.args):]]
    scalar_at = {i for i, (p, a) in enumerate(zip(params, given))
                 if isinstance(p.type, torch.TensorType) and a is not None and _is_scalar(_val(a))}
    if not scalar_at:
        return None
    packet = getattr(torch.ops.aten, op._schema.name.split("::", 1)[1], None) if op.namespace == "aten" else None
    for name in packet.overloads() if packet is not None else ():
        other = getattr(packet, name)
        candidate = other._schema.arguments
        if len(candidate) == len(params) and all(
            c.name == p.name and (isinstance(c.type, torch.NumberType) if i in scalar_at else c.type == p.type)
            for i, (c, p) in enumerate(zip(candidate, params))
        ) and [r.type for r in other._schema.returns] == [r.type for r in op._schema.returns]:
            return other
    return None


def _to_scalar_overload(graph: torch.fx.Graph, node: torch.fx.Node) -> bool:
    other = _scalar_overload(node)
    if other is not None:
        node.target = other
    return other is not None


def tensorize_scalars(gm: torch.fx.GraphModule, fake_mode) -> BoundaryPlan:
    """Rewrite `gm` in place (see the module docstring); returns the caller's plan."""
    rewrite_nodes(gm, _to_scalar_overload)
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    out = next(n for n in graph.nodes if n.op == "output")
    results = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    outputs = ["none" if r is None else "scalar" if _is_scalar(_val(r)) else "tensor" for r in results]

    _tensorize(gm, fake_mode)

    tensors = [n for n in placeholders if isinstance(n.meta.get("val"), torch.Tensor)]
    inputs: list[tuple[str, int]] = []
    for k, ph in enumerate(placeholders):
        v = ph.meta.get("val")
        if isinstance(v, torch.Tensor):
            inputs.append(("tensor", k))
            continue
        size_of = None
        if isinstance(v, torch.SymInt):
            size_of = next(
                ((t, d) for t in tensors for d, s in enumerate(t.meta["val"].shape)
                 if isinstance(s, torch.SymInt) and s.node.expr == v.node.expr),
                None,
            )
        if size_of is not None:
            with graph.inserting_after(placeholders[-1]):
                size = graph.call_function(aten.sym_size.int, size_of)
            size.meta["val"] = v
            ph.replace_all_uses_with(size)
            graph.erase_node(ph)
        elif _is_scalar(v):
            _item_after(graph, ph, v)
            ph.meta["val"] = _zero_d(fake_mode, _dtype(v))
            inputs.append(("scalar", k))
        else:
            inputs.append(("tensor", k))
    results = out.args[0]
    with graph.inserting_before(out):
        if isinstance(results, (list, tuple)):
            out.args = (
                type(results)(_to_tensor(graph, r, fake_mode) if _is_scalar(_val(r)) else r for r in results if r is not None),
            )
    _drop_round_trips(graph)
    graph.lint()
    gm.recompile()
    return BoundaryPlan(inputs, outputs)
