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


# -- test_gpu_suites.py: a fallback to eager is a failure of its own kind, counted at the end ------

GPU_SUITES = "test_gpu_suites.py"


def _in_gpu_suites(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0].endswith(GPU_SUITES)


def _fallback_reason(exc: BaseException | None) -> str | None:
    """The reason of the TidalCompileError (strict mode's fallback) behind `exc`, if any: a
    wrapper (the fuzzer's FuzzFailure) keeps it as its cause or context."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(exc, "tidal_fallback", None):
            return exc.tidal_fallback
        if type(exc).__name__ == "TidalCompileError":
            return getattr(exc, "reason", None) or str(exc)
        exc = exc.__cause__ or exc.__context__
    return None


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """In test_gpu_suites.py a test that fell back fails with a message that starts with the
    fallback's reason (the TidalCompileError stays chained below it)."""
    try:
        return (yield)
    except Exception as exc:
        reason = _fallback_reason(exc) if _in_gpu_suites(pyfuncitem.nodeid) else None
        if reason is None:
            raise
        failure = pytest.fail.Exception(f"{reason}\n\n(fell back to eager: strict mode's TidalCompileError)", pytrace=True)
        failure.tidal_fallback = reason
        raise failure from exc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.excinfo is not None and _in_gpu_suites(report.nodeid):
        reason = _fallback_reason(call.excinfo.value)
        if reason is not None:
            report.user_properties.append(("tidal_fallback", reason))
    return report


def _first_line(text: str) -> str:
    """The first line of `text`, files named without their folders."""
    import re

    line = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    return re.sub(r"[^\s:\"']*/([^/\s:\"']+\.py:\d+)", r"\1", line)


def pytest_terminal_summary(terminalreporter):
    """test_gpu_suites.py's counts: passed, fell back (TidalCompileError), wrong or crashed; then
    the first line of each fallback's reason and of each other failure."""
    stats = terminalreporter.stats

    def ours(key):
        return [r for r in stats.get(key, []) if _in_gpu_suites(getattr(r, "nodeid", ""))]

    passed, failed, skipped = ours("passed"), ours("failed") + ours("error"), ours("skipped")
    if not (passed or failed or skipped):
        return
    def properties(r):  # a collection error's report has none
        return getattr(r, "user_properties", ())

    fell_back = [(r, dict(properties(r))["tidal_fallback"]) for r in failed if "tidal_fallback" in dict(properties(r))]
    wrong = [r for r in failed if "tidal_fallback" not in dict(properties(r))]
    write = terminalreporter.write_line
    terminalreporter.section("GPU suites")
    write(f"GPU suites: {len(passed)} passed, {len(fell_back)} fell back (TidalCompileError), {len(wrong)} wrong/crashed"
          + (f" ({len(skipped)} skipped)" if skipped else ""))
    if fell_back:
        write("fell back:")
        for r, reason in fell_back:
            write(f"  {r.nodeid.split('::', 1)[-1]}: {_first_line(reason)}")
        import collections
        import re

        kinds = collections.Counter(re.sub(r"^\S+\.py:\d+(:\d+)?: (error: )?", "", _first_line(reason)) for _, reason in fell_back)
        write("fallback reasons, without their lines, by count:")
        for kind, count in kinds.most_common():
            write(f"  {count:4d}  {kind}")
    if wrong:
        write("wrong/crashed:")
        for r in wrong:
            crash = getattr(getattr(r, "longrepr", None), "reprcrash", None)
            where = "" if r.when == "call" else f" (in {r.when})"
            write(f"  {r.nodeid.split('::', 1)[-1]}{where}: {_first_line(crash.message if crash else r.longreprtext)}")
    # the fuzzed programs torch itself rejected on the device (eager; in forward mode Dynamo also for
    # backend="eager"), each replaced by the next draw
    redrawn = [line for r in passed + failed for key, lines in properties(r) if key == "fuzz_redrawn" for line in lines]
    if redrawn:
        write(f"fuzz programs torch itself rejected on the device, each replaced by the next draw: {len(redrawn)}")
        for line in redrawn:
            write(f"  {_first_line(line)[:300]}")
