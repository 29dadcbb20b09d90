import os
import warnings

import pytest

# Tests get a private on-disk artifact cache, so a stale user cache can neither hide nor cause a
# failure; test_cache.py makes its own.
os.environ.setdefault("TIDAL_CACHE_DIR", "off")
# Strict by default: a graph that falls back to eager still matches eager, so an end-to-end test
# would pass without tidal compiling anything. Tests OF the fallback ask for it explicitly
# (options={"fallback": "warn"}).
os.environ.setdefault("TIDAL_FALLBACK", "error")
warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    import torch

    torch._dynamo.reset()
    yield


@pytest.fixture
def compiled_programs(monkeypatch):
    """The programs tidal compiles for torch.compile in this test, in order (one per Dynamo graph)."""
    import tidal.compiler

    programs = []
    original = tidal.compiler.compile_graph_module

    def recording(*args, **kwargs):
        programs.append(original(*args, **kwargs))
        return programs[-1]

    monkeypatch.setattr(tidal.compiler, "compile_graph_module", recording)
    return programs


@pytest.fixture
def compiled_graphs(monkeypatch):
    """The aten-level graphs tidal compiles for torch.compile in this test, in order (training:
    aot_autograd's forward, then its backward), as they were before tidal's own FX passes."""
    import copy

    import tidal.compiler

    graphs = []
    original = tidal.compiler.compile_graph_module

    def recording(gm, *args, **kwargs):
        graphs.append(copy.deepcopy(gm))
        return original(gm, *args, **kwargs)

    monkeypatch.setattr(tidal.compiler, "compile_graph_module", recording)
    return graphs


@pytest.fixture(scope="module")
def fork_server(tmp_path_factory):
    """One fork server per test module (tool_runner.py): a crash fails its test, not the run."""
    from tool_runner import ForkServer

    with ForkServer(tmp_path_factory.mktemp("fork-server")) as server:
        yield server
