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
        with pytest.raises(IndexError, match=r"aten::index_put failed in compiled code: .*index 9 is out of bounds"):  # as eager
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
    except IndexError as e:  # as eager raises it
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


# -- index_put's operands in loops: each call reads its own operands' buffers ---------------------
# Was: the `to_buffer` of a loop-invariant operand (a `torch.arange` index) was hoisted out of the
# while loop, and One-Shot bufferization then let a later op of the body (`tok + 1`) write into the
# same buffer: the call read `tok + 1` as its row index ("index 4 is out of bounds for dimension 0
# with size 4"). tidal-anchor-aten-buffers gives each call its to_buffers right before it.

B, L = 4, 6


def _while_writes(write):
    """A while_loop over i < L whose body computes tok + 1 and writes it with `write(out, i, tok)`."""
    def model(tok0, out0):
        def body(i, tok, out):
            tok = tok + 1
            return i + 1, tok, write(out, i, tok)

        return while_loop(lambda i, tok, out: i < L, body, (torch.zeros((), dtype=torch.int64), tok0, out0))[2]

    return model


def _scan_writes(write):
    from torch._higher_order_ops import scan

    def model(tok0, out0):
        def step(carry, x):
            i, tok, out = carry
            tok = tok + x
            return (i + 1, tok, write(out, i, tok)), tok.clone()

        return scan(step, (torch.zeros((), dtype=torch.int64), tok0, out0), torch.ones(L, B, dtype=torch.int64))[0][2]

    return model


INDEX_WRITES = {
    # out[:, i] = tok, as a greedy decoder writes each step's token
    "expand-0d": lambda out, i, tok: out.index_put((torch.arange(B), i.expand(B)), tok),
    "accumulate": lambda out, i, tok: out.index_put((torch.arange(B), i.expand(B)), tok, accumulate=True),
    # index tensors broadcast against each other: rows [B, 1] with columns [1]
    "broadcast": lambda out, i, tok: out.index_put((torch.arange(B)[:, None], i.reshape(1)), tok[:, None]),
    # a column of a transposed [2, B] index: a strided index tensor
    "non-contiguous": lambda out, i, tok: out.index_put(
        (torch.stack([torch.arange(B), torch.arange(B)]).t()[:, 1], i.expand(B)), tok),
    "reversed-rows": lambda out, i, tok: out.index_put((torch.arange(B - 1, -1, -1), i.expand(B)), tok),
}


@pytest.mark.parametrize("loop", [_while_writes, _scan_writes], ids=["while_loop", "scan"])
@pytest.mark.parametrize("write", INDEX_WRITES.values(), ids=INDEX_WRITES.keys())
def test_index_put_in_a_loop_reads_its_own_index_buffers(loop, write):
    model = loop(write)
    args = (torch.arange(B), torch.zeros(B, L, dtype=torch.int64))
    with torch.no_grad():
        torch.testing.assert_close(compile_program(model, args)(*args), model(*args))


@pytest.mark.parametrize("write", INDEX_WRITES.values(), ids=INDEX_WRITES.keys())
def test_index_put_outside_loops(write):
    def model(tok, out, i):
        return write(out, i, tok + 1), write(out * 2, i, tok)

    args = (torch.arange(B), torch.zeros(B, L, dtype=torch.int64), torch.tensor(3))
    with torch.no_grad():
        torch.testing.assert_close(compile_program(model, args)(*args), model(*args))


class GreedyDecoder(torch.nn.Module):
    """Embedding + GRUCell + argmax, each step's token written into out[:, i] (index_put)."""

    def __init__(self, vocab=10, hidden=8):
        super().__init__()
        self.emb, self.cell, self.proj = torch.nn.Embedding(vocab, hidden), torch.nn.GRUCell(hidden, hidden), torch.nn.Linear(hidden, vocab)

    def forward(self, tok0, h0):
        def body(i, tok, h, out):
            h = self.cell(self.emb(tok), h)
            tok = self.proj(h).argmax(-1)
            return i + 1, tok, h, out.index_put((torch.arange(B), i.expand(B)), tok)

        out = torch.zeros(B, L, dtype=torch.int64)
        return while_loop(lambda i, tok, h, out: i < L, body, (torch.zeros((), dtype=torch.int64), tok0, h0, out))[3]


def test_greedy_decoding_writes_each_token_into_its_column():
    torch.manual_seed(0)
    model = GreedyDecoder().eval()
    args = (torch.randint(0, 10, (B,)), torch.randn(B, 8))
    with torch.no_grad():
        expected = model(*args)
        torch.testing.assert_close(compile_program(model, args)(*args), expected)
        torch.testing.assert_close(torch.compile(model, backend="tidal")(*args), expected)
