"""FX → torch dialect + tidal region ops, by subclassing torch-mlir's FxImporter.

aten ops go through torch-mlir unchanged. Each control-flow HOP is dispatched to
`_import_hop_{name}`, which builds the tidal op with the op's registered builder and imports the
HOP's subgraphs into its regions with a nested importer of the same class (so nesting of any depth
works). Subgraph placeholders become block arguments: tidal regions are isolated from above,
exactly like PyTorch's HOP subgraphs.
"""

from __future__ import annotations

import os
import re

import torch
from torch_mlir import ir
from torch_mlir.extras import fx_importer as tm

from tidal.diagnostics import TidalUnsupported
from tidal.dialects import build_yield
from tidal.dialects.associative_scan import build_associative_scan
from tidal.dialects.cond import build_cond
from tidal.dialects.map import build_map
from tidal.dialects.scan import build_scan
from tidal.dialects.types import tensor_spec
from tidal.dialects.while_loop import build_while

_TORCH_DIR = os.path.dirname(torch.__file__)
_TIDAL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FRAME = re.compile(r'File "([^"]+)", line ([0-9]+), in (\S+)')


def user_frame(stack_trace: str | None) -> tuple[str, int] | None:
    """The innermost frame of a node's stack trace that is the user's code (not torch, not FX)."""
    if not stack_trace:
        return None
    frames = [
        (f, int(line))
        for f, line, _ in _FRAME.findall(stack_trace)
        if not f.startswith((_TORCH_DIR, _TIDAL_DIR, "<eval_with_key>"))
    ]
    return frames[-1] if frames else None


class TidalContextCache(tm.ContextCache):
    """Locations name the user's source line (`name("file":line:0)`), so diagnostics point there."""

    def get_node_location(self, node: torch.fx.Node):
        frame = user_frame(node.meta.get("stack_trace"))
        if frame is None:
            return None
        file_loc = ir.Location.file(frame[0], frame[1], 0, context=self._c)
        return ir.Location.name(_op_label(node), childLoc=file_loc, context=self._c)


_VTENSOR = re.compile(r"!torch\.vtensor<\[(?P<sizes>[^\]]*)\],(?P<dtype>[^>]+)>")


def _rank(vtensor: re.Match) -> int:
    return vtensor["sizes"].count(",") + 1 if vtensor["sizes"] else 0


def _cast_to(value: ir.Value, ty: ir.Type, loc) -> ir.Value:
    """`value` as type `ty` where only static sizes differ (the verifier reports anything else)."""
    have, want = _VTENSOR.fullmatch(str(value.type)), _VTENSOR.fullmatch(str(ty))
    if value.type == ty or not have or not want or have["dtype"] != want["dtype"] or _rank(have) != _rank(want):
        return value
    return ir.Operation.create("torch.tensor_static_info_cast", results=[ty], operands=[value], loc=loc).result


def _op_label(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target._opname}" if target.namespace == "aten" else str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name()
    return getattr(target, "__name__", str(target))


def _node_location_text(node: torch.fx.Node) -> str:
    frame = user_frame(node.meta.get("stack_trace"))
    return f"{frame[0]}:{frame[1]}" if frame else "<unknown location>"


class TidalGraphNodeImporter(tm.GraphNodeImporter):
    """Imports control-flow HOPs as tidal ops; everything else as torch-mlir does."""

    # -- helpers ------------------------------------------------------------------------------
    def _unsupported(self, node, message: str, loc=None):
        raise TidalUnsupported(f"{message} (FX node '{node.name}' at {_node_location_text(node)})", loc)

    def _submodule(self, node: torch.fx.Node, arg) -> torch.fx.GraphModule:
        if not (isinstance(arg, torch.fx.Node) and arg.op == "get_attr"):
            self._unsupported(node, f"{node.target.name()}: expected a subgraph argument, got {arg!r}")
        return getattr(node.graph.owning_module, arg.target)

    def _tensor_operands(self, loc, node, args, what: str) -> list[ir.Value]:
        values = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):  # a frozen parameter/buffer: imported as a literal
                values.append(self._import_argument(loc, a))
                continue
            if not isinstance(a, torch.fx.Node) or not isinstance(a.meta.get("val"), torch.Tensor):
                kind = type(a.meta.get("val")).__name__ if isinstance(a, torch.fx.Node) else type(a).__name__
                self._unsupported(
                    node,
                    f"{node.target.name()}: {what}[{i}] is a {kind}; tidal supports tensor "
                    f"operands only (wrap Python numbers in torch.tensor)",
                    loc,
                )
            values.append(self._import_argument(loc, a))
        return values

    def _result_types(self, node) -> list[ir.Type]:
        vals = node.meta.get("val")
        vals = list(vals) if isinstance(vals, (list, tuple)) else [vals]
        for v in vals:
            if not isinstance(v, torch.Tensor):
                self._unsupported(node, f"{node.target.name()} returns a {type(v).__name__}; only tensors are supported")
        return [self._cc.value_info_to_type(v) for v in vals]

    def _import_body(self, block: ir.Block, gm: torch.fx.GraphModule, hop_node, yield_types=None) -> None:
        """Import `gm` into `block`: placeholders are the block's arguments, output is the yield.
        With `yield_types`, a yielded tensor more static than its type there (a cond branch of
        shape [6, 4] where the branches disagree and the cond's result is [?, 4]) is cast to it."""
        nested = type(self)(self.fx_importer, self._c, self._cc, block)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(block.arguments):
            self._unsupported(
                hop_node,
                f"{hop_node.target.name()}: subgraph '{gm.__class__.__name__}' takes "
                f"{len(placeholders)} inputs but the op passes {len(block.arguments)}",
            )
        for ph, arg in zip(placeholders, block.arguments):
            nested.bind_node_value(ph, arg)
        body = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
        for n in body:
            if n.op == "get_attr" and not isinstance(getattr(gm, n.target, None), torch.fx.GraphModule):
                self._unsupported(hop_node, f"a captured constant '{n.target}' inside a control-flow body")
        nested.import_nodes(body)
        (out,) = [n for n in gm.graph.nodes if n.op == "output"]
        results = out.args[0]
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        loc = self._cc.get_node_location(hop_node) or ir.Location.unknown(self._c)
        with ir.InsertionPoint(block), loc:
            values = [nested._import_argument(loc, r) for r in results]
            if yield_types is not None:
                values = [_cast_to(v, ty, loc) for v, ty in zip(values, yield_types)]
            build_yield(values, loc)

    def _bind_results(self, node, op: ir.Operation):
        self._multi_result_nodes.add(node)
        for i, r in enumerate(op.results):
            self.bind_node_value(node, r, i)

    # -- the five control-flow operators --------------------------------------------------------
    def _import_hop_cond(self, loc, node, hop):
        pred, true_arg, false_arg, operands = node.args[:4]
        if len(node.args) > 4 and node.args[4]:
            self._unsupported(node, "cond with extra arguments")
        true_gm, false_gm = self._submodule(node, true_arg), self._submodule(node, false_arg)
        pred_value = self._predicate(loc, node, pred)
        values = self._tensor_operands(loc, node, operands, "operands")
        result_types = self._result_types(node)
        op = build_cond(pred_value, values, result_types, loc=loc)
        self._import_body(op.regions[0].blocks[0], true_gm, node, yield_types=result_types)
        self._import_body(op.regions[1].blocks[0], false_gm, node, yield_types=result_types)
        self._bind_results(node, op)

    def _predicate(self, loc, node, pred) -> ir.Value:
        if isinstance(pred, torch.fx.Node) and isinstance(pred.meta.get("val"), torch.Tensor):
            # eager takes any one-element tensor (shape (1,), (1, 1); a number is true when
            # nonzero); tidal.cond takes a 0-d i1
            v = pred.meta["val"]
            if v.is_complex() or not all(isinstance(d, int) and d == 1 for d in v.shape):
                self._unsupported(node, f"cond predicate must be a one-element tensor, got {v.dtype} of shape {tuple(v.shape)}", loc)
            value = self._import_argument(loc, pred)
            if v.dim() != 0:
                zero_d = ir.Type.parse(re.sub(r"<\[[^\]]*\]", "<[]", str(value.type)), self._c)
                value = ir.Operation.create("torch.aten.squeeze", results=[zero_d], operands=[value], loc=loc).result
            if v.dtype != torch.bool:
                zero = ir.Operation.create(
                    "torch.constant.int", results=[ir.Type.parse("!torch.int", self._c)],
                    attributes={"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64, self._c), 0)}, loc=loc,
                ).result
                i1 = ir.Type.parse("!torch.vtensor<[],i1>", self._c)
                value = ir.Operation.create("torch.aten.ne.Scalar", results=[i1], operands=[value, zero], loc=loc).result
            return value
        if isinstance(pred, (bool, torch.fx.Node)):
            # A Python/symbolic bool: materialize it as a 0-d bool tensor.
            scalar = self._import_argument(loc, pred)
            i1 = ir.Type.parse("!torch.vtensor<[],i1>", self._c)
            return ir.Operation.create("torch.prim.NumToTensor.Scalar", results=[i1], operands=[scalar], loc=loc).result
        self._unsupported(node, f"cond predicate of type {type(pred).__name__}", loc)

    def _import_hop_while_loop(self, loc, node, hop, stack_outputs=False):
        cond_arg, body_arg, carries, consts = node.args[:4]
        cond_gm, body_gm = self._submodule(node, cond_arg), self._submodule(node, body_arg)
        carry_values = self._tensor_operands(loc, node, carries, "carried_inputs")
        const_values = self._tensor_operands(loc, node, consts, "additional_inputs")
        op = build_while(carry_values, const_values, loc=loc, stack_outputs=stack_outputs)
        if stack_outputs:
            self._check_types(node, op, self._result_types(node))
        self._import_body(op.regions[0].blocks[0], cond_gm, node)
        self._import_body(op.regions[1].blocks[0], body_gm, node)
        self._bind_results(node, op)

    def _import_hop_while_loop_stack_output(self, loc, node, hop):
        """Every iteration's carries, stacked (what tidal's while_loop autodiff rule records)."""
        self._import_hop_while_loop(loc, node, hop, stack_outputs=True)

    def _import_hop_scan(self, loc, node, hop):
        combine_arg, init, xs, consts = node.args[:4]
        gm = self._submodule(node, combine_arg)
        init_values = self._tensor_operands(loc, node, init, "init")
        xs_values = self._tensor_operands(loc, node, xs, "xs")
        const_values = self._tensor_operands(loc, node, consts, "additional_inputs")
        result_types = self._result_types(node)
        y_types = [tensor_spec(t).without_dim(0).to_type(self._c) for t in result_types[len(init) :]]
        op = build_scan(init_values, xs_values, const_values, y_types, dim=0, reverse=False, loc=loc)
        self._check_types(node, op, result_types)
        self._import_body(op.regions[0].blocks[0], gm, node)
        self._bind_results(node, op)

    def _import_hop_associative_scan(self, loc, node, hop):
        combine_arg, xs, consts = node.args[:3]
        gm = self._submodule(node, combine_arg)
        xs_values = self._tensor_operands(loc, node, xs, "xs")
        const_values = self._tensor_operands(loc, node, consts, "additional_inputs")
        op = build_associative_scan(xs_values, const_values, dim=0, reverse=False, loc=loc)
        self._check_types(node, op, self._result_types(node))
        self._import_body(op.regions[0].blocks[0], gm, node)
        self._bind_results(node, op)

    def _import_hop_map_impl(self, loc, node, hop):
        body_arg, xs, consts = node.args[:3]
        gm = self._submodule(node, body_arg)
        xs_values = self._tensor_operands(loc, node, xs, "xs")
        const_values = self._tensor_operands(loc, node, consts, "args")
        result_types = self._result_types(node)
        y_types = [tensor_spec(t).without_dim(0).to_type(self._c) for t in result_types]
        op = build_map(xs_values, const_values, y_types, loc=loc)
        self._check_types(node, op, result_types)
        self._import_body(op.regions[0].blocks[0], gm, node)
        self._bind_results(node, op)

    def _check_types(self, node, op, expected: list[ir.Type]):
        got = [r.type for r in op.results]
        if got != expected:
            self._unsupported(
                node,
                f"{node.target.name()}: result types {[str(t) for t in expected]} from PyTorch differ "
                f"from the tidal op's {[str(t) for t in got]}",
            )

    def _import_hop(self, loc, node, hop):
        handler = getattr(self, f"_import_hop_{hop.name()}", None)
        if handler is None:
            self._unsupported(
                node,
                f"higher-order operator '{hop.name()}' is not supported by tidal "
                f"(supported: cond, while_loop, while_loop_stack_output, scan, associative_scan, map)",
                loc,
            )
        handler(loc, node, hop)


class TidalFxImporter(tm.FxImporter):
    """FxImporter that imports HOP subgraphs into regions instead of private functions."""

    def __init__(self, context: ir.Context):
        super().__init__(context=context, graph_node_importer_cls=TidalGraphNodeImporter)
        self._cc = TidalContextCache(self._c, py_attr_tracker=self._py_attr_tracker)

    def _import_all_child_modules(self, module, parent_name, import_symbolic_shape_expressions=False):
        # Subgraphs are imported into tidal regions by the HOP handlers, not as functions.
        return

