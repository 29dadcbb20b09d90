"""tidal: an MLIR compiler for PyTorch programs with structured control flow."""

from tidal.diagnostics import TidalError, TidalUnsupported

__all__ = ["TidalError", "TidalUnsupported"]
__version__ = "0.1.0"
