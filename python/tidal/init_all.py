"""Load every package that registers passes, pipelines or op rules (MLIR's InitAllPasses).

The dialect and the target-free passes know no target; the drivers (`tidal-opt`, the compiler)
import this module to see everything: conversions (torch → linalg, tidal → scf) and backends.
"""

import tidal.autodiff  # noqa: F401
import tidal.backends.cpu  # noqa: F401
import tidal.backends.gpu  # noqa: F401
import tidal.conversion  # noqa: F401
import tidal.dialects  # noqa: F401
import tidal.passes  # noqa: F401
