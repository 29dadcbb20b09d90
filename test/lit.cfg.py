# lit configuration for tidal's IR tests (`.mlir`) and Python FileCheck tests (`.py`).
import os
import sys

import lit.formats

config.name = "tidal"
config.test_format = lit.formats.ShTest()
config.suffixes = [".mlir", ".py"]
config.test_source_root = os.path.dirname(__file__)
# pytest suites live under python/ and run through pytest, not lit.
config.excludes = ["python", "lit.cfg.py", "corpus", "conftest.py", "__pycache__", "Output"]

# Tools come from the environment that runs lit (the project's venv): tidal-opt, filecheck.
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%python", sys.executable))
for var in ("HOME", "TMPDIR", "TIDAL_CACHE_DIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
