"""The command-line drivers (`tidal-opt`, `tidal-compile`)."""

from __future__ import annotations

import sys


def write_output(text: str, path: str) -> None:
    """mlir-opt's `-o`: `-` is standard output."""
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)
