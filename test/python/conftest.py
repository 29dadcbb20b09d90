import os
import warnings

import pytest

# Tests get a private on-disk artifact cache, so a stale user cache can neither hide nor cause a
# failure; test_cache.py makes its own.
os.environ.setdefault("TIDAL_CACHE_DIR", "off")
warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch

    torch._dynamo.reset()
    yield
