"""ATen calls from native code: errors surface like eager's, dynamic sizes, the disk cache."""

import json
import os
import subprocess
import sys

import pytest
import torch
from torch._higher_order_ops import while_loop

from tidal.compiler import compile_program
from tidal.importer import import_program
from tidal.compiler import lower


class Writer(torch.nn.Module):
    """Writes rows[i] of `values` into a buffer at data-dependent rows, in a loop (decoder-style)."""

    def forward(self, buf, rows, values):
        def body(i, b):
            r = torch.index_select(rows, 0, i.reshape(1))
            v = torch.index_select(values, 0, i.reshape(1))
            return i + 1, torch.index_put(b, (r,), v, accumulate=True)

        return while_loop(lambda i, b: i < rows.shape[0], body, (torch.zeros((), dtype=torch.int64), buf))


def writer_args(rows):
    return torch.zeros(5, 3), torch.tensor(rows), torch.arange(9.0).reshape(3, 3)


def test_failing_call_in_a_loop_raises_after_the_call_and_the_program_stays_usable():
    model = Writer()
    with torch.no_grad():
        program = compile_program(model, writer_args([1, 3, 1]))
        with pytest.raises(IndexError, match="out of bounds"):
            model(*writer_args([1, 9, 1]))  # eager
        with pytest.raises(RuntimeError, match=r"aten::index_put failed in compiled code: .*index 9 is out of bounds"):
            program(*writer_args([1, 9, 1]))
        torch.testing.assert_close(program(*writer_args([4, 0, 4])), model(*writer_args([4, 0, 4])))


def test_library_kernels_become_aten_calls_and_elementwise_ops_do_not():
    conv = torch.nn.Conv2d(3, 4, 3).eval()
    prog = import_program(lambda x: torch.relu(conv(x)) + 1, (torch.randn(1, 3, 6, 6),))
    lower(prog.module, prog.context, "linalg")
    text = str(prog.module)
    assert text.count('"tidal.aten_call"') == 1 and 'callee = "aten::convolution"' in text
    assert "linalg.generic" in text  # relu and the add stay lowered (and fusible)


def test_dynamic_batch_result_sizes_come_from_aten():
    from torch.export import Dim

    conv = torch.nn.Conv2d(3, 4, 3, stride=2).eval()
    with torch.no_grad():
        program = compile_program(conv, (torch.randn(2, 3, 9, 9),), dynamic_shapes=({0: Dim.DYNAMIC},))
        for n in (2, 5, 1):
            x = torch.randn(n, 3, 9, 9)
            torch.testing.assert_close(program(x), conv(x))


SCRIPT = """
import json, warnings, torch
warnings.filterwarnings("ignore")
sys_path = {root!r}
import sys; sys.path.insert(0, sys_path)
from test_aten_calls import Writer, writer_args
from tidal.compiler import compile_program
from tidal.runtime import cache
model = Writer()
with torch.no_grad():
    program = compile_program(model, writer_args([1, 3, 1]))
    torch.testing.assert_close(program(*writer_args([2, 2, 0])), model(*writer_args([2, 2, 0])))
    try:
        program(*writer_args([7, 0, 0]))
        raised = ""
    except RuntimeError as e:
        raised = str(e)
print(json.dumps({{"stats": cache.stats.__dict__, "raised": raised}}))
"""


def test_cached_library_calls_aten_and_reports_errors(tmp_path):
    def run():
        env = dict(os.environ, TIDAL_CACHE_DIR=str(tmp_path))
        code = SCRIPT.format(root=os.path.dirname(__file__))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["stats"]["compiles"] == 1 and first["stats"]["disk_writes"] == 1
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_hits"] == 1
    for result in (first, second):
        assert "aten::index_put failed in compiled code" in result["raised"] and "index 7" in result["raised"]
