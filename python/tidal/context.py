"""The one MLIR context factory: every tidal entry point builds IR in a context made here."""

import os
import shutil
import tempfile

from torch_mlir import ir
from torch_mlir.dialects import torch as torch_dialect

from tidal.diagnostics import alias_path


def make_context() -> ir.Context:
    """A context that knows the torch dialects and accepts tidal's unregistered ops.

    tidal ops are unregistered on purpose (see FOUNDATION.md: IRDL cannot express their variadic
    operand types nor declare a terminator), so the context must allow unregistered dialects;
    tidal's own verifier (`tidal.dialects.verify_module`) takes the place of ODS verification.
    """
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    torch_dialect.register_dialect(ctx)
    return ctx


def parse_module(text: str, source_name: str, ctx: ir.Context, first_line: int = 1) -> ir.Module:
    """Parse `text` (a module, or top-level ops to wrap in one) with locations naming `source_name`.

    MLIR's Python API names locations only when parsing from a file (`Module.parse` says `"-"`),
    so text is written to a private temporary file and the diagnostics layer maps that path back to
    `source_name`. `first_line` keeps line numbers of a `--split-input-file` chunk equal to those in
    the original file. Raises `ir.MLIRError` with located diagnostics on bad input.
    """
    tmpdir = tempfile.mkdtemp(prefix="tidal-src-")
    path = os.path.join(tmpdir, os.path.basename(source_name) or "input.mlir")
    try:
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n" * (first_line - 1) + text)
        alias_path(path, source_name)
        return ir.Module.parseFile(path, ctx)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
