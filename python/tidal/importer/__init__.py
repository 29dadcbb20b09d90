"""Import PyTorch programs (ExportedProgram, or a GraphModule + example inputs) into tidal IR."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch_mlir import ir

from tidal.context import make_context
from tidal.diagnostics import TidalUnsupported
from tidal.dialects import check_module
from tidal.importer.associative_scan_capture import keep_associative_scan
from tidal.importer.capture import export_program
from tidal.importer.fx_importer import TidalFxImporter, user_frame

__all__ = [
    "ImportedProgram",
    "export_program",
    "import_exported",
    "import_graph_module",
    "import_program",
    "keep_associative_scan",
]


@dataclass
class ImportedProgram:
    """A module holding `func.func @<func_name>` over flattened tensor inputs/outputs."""

    module: ir.Module
    context: ir.Context
    func_name: str
    exported: torch.export.ExportedProgram | None

    def __str__(self) -> str:
        return str(self.module)


def import_exported(ep: torch.export.ExportedProgram, func_name: str = "main", context=None) -> ImportedProgram:
    """torch dialect + tidal ops for an ExportedProgram (parameters and buffers frozen in)."""
    ctx = context or make_context()
    importer = TidalFxImporter(ctx)
    try:
        with ctx:
            importer.import_frozen_program(ep, func_name=func_name)
    except NotImplementedError as e:
        raise TidalUnsupported(_describe_unimportable(ep, e)) from None
    module = importer.module
    check_module(module.operation)
    return ImportedProgram(module, ctx, func_name, ep)


def import_graph_module(gm: torch.fx.GraphModule, func_name: str = "main", context=None) -> ImportedProgram:
    """torch dialect + tidal ops for an aten-level graph whose inputs are all tensors (aot_autograd's
    forward graph after `tensorize_scalars`: parameters are inputs, nothing is frozen)."""
    ctx = context or make_context()
    importer = TidalFxImporter(ctx)
    try:
        with ctx:
            importer.import_stateless_graph(gm.graph, func_name=func_name)
    except NotImplementedError as e:
        raise TidalUnsupported(_describe_unimportable_graph(gm.graph, e)) from None
    module = importer.module
    check_module(module.operation)
    return ImportedProgram(module, ctx, func_name, None)


def import_program(model, example_inputs: tuple, func_name: str = "main", dynamic_shapes=None) -> ImportedProgram:
    """Export `model` (module, callable or FX GraphModule) on `example_inputs` and import it."""
    ep = export_program(model, example_inputs, dynamic_shapes=dynamic_shapes)
    return import_exported(ep, func_name)


def _describe_unimportable(ep, err: Exception) -> str:
    return _describe_unimportable_graph(ep.graph, err)


def _describe_unimportable_graph(graph, err: Exception) -> str:
    text = str(err)
    for node in graph.nodes:
        if node.op == "call_function" and str(node.target) in text:
            frame = user_frame(node.meta.get("stack_trace"))
            where = f" at {frame[0]}:{frame[1]}" if frame else ""
            return f"cannot import {node.target}{where}: {text}"
    return f"cannot import the program: {text}"
