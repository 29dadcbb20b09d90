"""Conversions between levels: torch → linalg (library-kernel aten ops → tidal.aten_call), tidal → scf."""

from tidal.conversion import aten_calls, index_bounds, negative_pads, tidal_to_scf, torch_to_linalg, zero_size  # noqa: F401  (registers passes)
