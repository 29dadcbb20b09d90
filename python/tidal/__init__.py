"""tidal: an MLIR compiler for PyTorch programs with structured control flow."""

from tidal.aot import export
from tidal.diagnostics import TidalError, TidalUnsupported
from tidal.tracing import checkpoint

__all__ = ["TidalError", "TidalUnsupported", "checkpoint", "export"]
__version__ = "0.1.0"
