"""Staged compilation: a program is imported once and lowered stage by stage.

Stages, in order (each names the IR a user can print with `tidal-compile --emit STAGE`):
  torch   the importer's output: torch dialect aten ops + tidal region ops on !torch.vtensor
  tidal   after torch-level simplification (op variants, decompositions): what tidal's own
          passes see before aten ops are lowered
  linalg  linalg/tensor/arith/math + tidal ops on builtin tensors (tidal-backend-contract holds)
"""

from __future__ import annotations

import os

from torch_mlir import ir

import tidal.passes  # noqa: F401  (registers passes and pipelines)
from tidal.passes import run_pipeline

STAGES: list[tuple[str, str | None]] = [
    ("torch", None),
    ("tidal", "tidal-torch-simplify"),
    ("linalg", "tidal-torch-to-linalg-from-simplified"),
]


def stage_names() -> list[str]:
    return [name for name, _ in STAGES]


def lower(module: ir.Module, context: ir.Context, to: str, start: str = "torch", dump_dir: str | None = None) -> ir.Module:
    """Run the pipelines that take `module` (at stage `start`) to stage `to`, in place."""
    names = stage_names()
    if to not in names:
        raise ValueError(f"unknown stage '{to}' (stages: {', '.join(names)})")
    begin, end = names.index(start), names.index(to)
    if end < begin:
        raise ValueError(f"cannot lower from stage '{start}' back to '{to}'")
    if dump_dir:
        _dump(dump_dir, begin, start, module)
    for i in range(begin + 1, end + 1):
        name, pipeline = STAGES[i]
        with context:
            run_pipeline(module.operation, f"builtin.module({pipeline})", context)
        if dump_dir:
            _dump(dump_dir, i, name, module)
    return module


def _dump(dump_dir: str, index: int, stage: str, module: ir.Module) -> None:
    os.makedirs(dump_dir, exist_ok=True)
    with open(os.path.join(dump_dir, f"{index:02d}-{stage}.mlir"), "w") as f:
        f.write(str(module))
