"""tidal's target-free passes, the pass registry and the pipeline builder.

Importing this package registers the passes defined here. Conversions and backends register
theirs from their own packages (`tidal.init_all` loads everything, as MLIR's InitAllPasses does).
"""

from tidal.passes import adjacent_slices, body_sizes, error_checks, fold_reversals, integer_division, nan_semantics, reciprocal_of_zero, scan_contractions, verify  # noqa: F401  (register their passes)
from tidal.passes.pipeline import PipelineError, build_pass_manager, parse_pipeline, run_pipeline
from tidal.passes.registry import all_passes, all_pipelines, tidal_pass, tidal_pipeline

__all__ = [
    "PipelineError",
    "all_passes",
    "all_pipelines",
    "build_pass_manager",
    "parse_pipeline",
    "run_pipeline",
    "tidal_pass",
    "tidal_pipeline",
]
