"""Conversions between levels (torch → linalg; later tidal → scf and tidal → Triton kernels)."""

from tidal.conversion import torch_to_linalg  # noqa: F401  (registers passes and pipelines)
