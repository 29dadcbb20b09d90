"""A fork server for running tidal's command-line tools (and crash-prone snippets) many times.

Starting Python + torch + MLIR costs seconds per process. `ForkServer` starts ONE subprocess that
imports tidal, then forks a fresh child per job: the child runs the tool's real `entry()` (what the
console script runs) with stdout/stderr redirected to files, and the server reports the child's
exit status, or minus the signal that killed it (segfault: -11, abort: -6, SIGFPE: -8, timeout:
-14). The parent imports but never runs torch ops before forking, so the children are clean.

Jobs: ("tidal-opt", argv...), ("tidal-compile", argv...), or ("exec", PYTHON_SOURCE) which runs
the source in the child (for programs that may crash the process).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_SERVER = r"""
import json, os, signal, sys, traceback, warnings
warnings.simplefilter("ignore")
import torch  # noqa: F401  (imported once, before any fork)
import tidal.compiler, tidal.passes  # noqa: F401
from tidal.tools import tidal_compile, tidal_opt

class _Exec:
    @staticmethod
    def entry():
        exec(compile(sys.argv[1], "<job>", "exec"), {"__name__": "__main__"})


TOOLS = {"tidal-opt": tidal_opt, "tidal-compile": tidal_compile, "exec": _Exec}
reply = sys.stdout
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
            sys.argv = [job["tool"]] + job["argv"]
            os.environ["TIDAL_CACHE_DIR"] = "off"
            signal.alarm(job["timeout"])
            try:
                TOOLS[job["tool"]].entry()
                code = 0
            except SystemExit as e:  # what the interpreter does with an escaping SystemExit
                if e.code is None:
                    code = 0
                elif isinstance(e.code, int):
                    code = e.code
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
            except BaseException:  # an escaping exception: the interpreter prints a traceback
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    reply.write(json.dumps({"returncode": rc}) + "\n")
    reply.flush()
"""


class ForkServer:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.n = 0

    def run(self, tool: str, *argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
        self.n += 1
        out, err = self.tmp / f"{self.n}.out", self.tmp / f"{self.n}.err"
        job = {"tool": tool, "argv": list(argv), "stdout": str(out), "stderr": str(err), "timeout": timeout}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the fork server died"
        rc = json.loads(line)["returncode"]
        return subprocess.CompletedProcess(
            [tool, *argv], rc, out.read_bytes(), err.read_bytes().decode(errors="replace")
        )

    def exec_ok(self, code: str, timeout: int = 300) -> subprocess.CompletedProcess:
        """Run a Python snippet in a child; it must end normally and print OK (a signal, such as a
        native crash, fails with the signal's number and the child's stderr)."""
        proc = self.run("exec", code, timeout=timeout)
        assert proc.returncode >= 0, f"the process was killed by signal {-proc.returncode}\n{proc.stderr[-2000:]}"
        assert proc.returncode == 0 and b"OK" in proc.stdout, proc.stderr[-3000:]
        return proc

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- generated hostile MLIR (too large to commit) ---------------------------------------------


def nested_conds(depth: int) -> str:
    """`depth` tidal.cond ops nested in each other's then-region (2 regions each)."""
    lines = ["func.func @deep(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {"]
    for d in range(depth):
        p, x = ("%p", "%x") if d == 0 else (f"%q{d - 1}", f"%a{d - 1}")
        lines.append(f'%r{d} = "tidal.cond"({p}, {p}, {x}) ({{')
        lines.append(f"^bb0(%q{d}: tensor<i1>, %a{d}: tensor<4xf32>):")
    for d in reversed(range(depth)):
        inner = f"%r{d + 1}" if d + 1 < depth else f"%a{d}"
        lines += [
            f'"tidal.yield"({inner}) : (tensor<4xf32>) -> ()',
            "}, {",
            f"^bb0(%e{d}: tensor<i1>, %b{d}: tensor<4xf32>):",
            f'"tidal.yield"(%b{d}) : (tensor<4xf32>) -> ()',
            "}) : (tensor<i1>, tensor<i1>, tensor<4xf32>) -> tensor<4xf32>",
        ]
    lines += ["return %r0 : tensor<4xf32>", "}"]
    return "\n".join(lines) + "\n"


def nested_maps(depth: int) -> str:
    """`depth` one-region tidal.map ops nested in each other."""
    lines = [f"func.func @deep(%x: tensor<{'2x' * depth}f32>) -> tensor<{'2x' * depth}f32> {{"]
    for d in range(depth):
        outer = f"tensor<{'2x' * (depth - d)}f32>"
        inner = f"tensor<{'2x' * (depth - d - 1)}f32>"
        arg = "%x" if d == 0 else f"%a{d - 1}"
        lines.append(f'%r{d} = "tidal.map"({arg}) ({{')
        lines.append(f"^bb0(%a{d}: {inner}):")
    for d in reversed(range(depth)):
        outer = f"tensor<{'2x' * (depth - d)}f32>"
        inner = f"tensor<{'2x' * (depth - d - 1)}f32>"
        val = f"%r{d + 1}" if d + 1 < depth else f"%a{d}"
        lines.append(f'"tidal.yield"({val}) : ({inner}) -> ()')
        lines.append(f"}}) {{num_xs = 1 : i64}} : ({outer}) -> {outer}")
    lines += [f"return %r0 : tensor<{'2x' * depth}f32>", "}"]
    return "\n".join(lines) + "\n"


def huge_module(funcs: int) -> str:
    body = (
        'func.func @f{i}(%xs: tensor<5x2xf32>) -> tensor<5x2xf32> {{\n'
        '  %r = "tidal.map"(%xs) ({{\n'
        '  ^bb0(%x: tensor<2xf32>):\n'
        '    "tidal.yield"(%x) : (tensor<2xf32>) -> ()\n'
        '  }}) {{num_xs = 1 : i64}} : (tensor<5x2xf32>) -> tensor<5x2xf32>\n'
        '  return %r : tensor<5x2xf32>\n'
        '}}\n'
    )
    return "".join(body.format(i=i) for i in range(funcs))
