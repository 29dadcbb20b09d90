"""tidal's passes. Importing this package registers them (see `registry.py`)."""

from tidal.passes import verify  # noqa: F401  (registers tidal-verify)
from tidal import conversion  # noqa: F401,E402  (registers the conversion passes and pipelines)
from tidal.backends import cpu  # noqa: F401,E402  (registers the CPU backend passes and pipeline)
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
