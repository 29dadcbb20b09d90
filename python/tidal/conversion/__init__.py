"""Conversions between levels (torch → linalg; later tidal → scf and tidal → Triton kernels)."""

from tidal.conversion import tidal_to_scf, torch_to_linalg  # noqa: F401  (registers passes)
