"""The walk that tidal's FX passes before import share."""

from __future__ import annotations

import torch


def rewrite_nodes(gm: torch.fx.GraphModule, rewrite) -> None:
    """`rewrite(graph, node)` on every call_function node of `gm` and of the control-flow HOP
    bodies inside it (graph modules of their own), returning whether it changed the node; what
    changed is recompiled."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and rewrite(gm.graph, node):
            changed = True
    for child in gm.children():
        if isinstance(child, torch.fx.GraphModule):
            rewrite_nodes(child, rewrite)
    if changed:
        gm.recompile()
