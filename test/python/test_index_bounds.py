"""An index out of range in a gathering op raises eager's error from compiled code; it neither
reads memory outside the tensor (index, index_select: silent garbage before) nor kills the
process (gather, embedding: a failed cf.assert aborted it before). `tidal-index-bounds`.

Every case runs in a fork-server child (tool_runner.py), so a crash fails its test instead of
taking pytest down. In range, values match eager; out of range (past the end, or below -n for
the ops that wrap negatives, below 0 for those that do not), the compiled call raises the same
exception type with eager's message, at top level and inside scan and while_loop bodies; after an
error, the same program serves the next indices.
"""

from __future__ import annotations

import textwrap

import pytest


OPS = {
    "index": "x[i]",
    "index_select": "torch.index_select(x, 0, i)",
    "embedding": "torch.nn.functional.embedding(i, x)",
    "gather": "torch.gather(x, 0, i.unsqueeze(1).expand(-1, x.shape[1]))",
    "index_2d": "x[i, i.flip(0) % 3]",
}

# where the op runs: the indices `i` of one step index the rows of `x` (4 rows)
PLACES = {
    "top_level": "model = lambda x, i: {op} * 2.0",
    "scan": textwrap.dedent("""
        def model(x, idx):
            def step(acc, i):
                y = {op}
                return acc + y.sum(), y * 2.0
            return scan(step, torch.zeros(()), idx)
    """),
    "while_loop": textwrap.dedent("""
        def model(x, idx):
            def body(k, acc):
                i = torch.index_select(idx, 0, k.reshape(1)).squeeze(0)
                return k + 1, acc + {op}
            return while_loop(lambda k, acc: k < idx.shape[0], body, (torch.zeros((), dtype=torch.int64), torch.zeros(3, x.shape[1])))[1]
    """),
}

# index values for one step (3 indices into 4 rows), and whether eager accepts them
INDICES = {
    "in_range": "[0, 3, 1]",
    "past_the_end": "[0, 4, 1]",
    "far_past_the_end": "[0, 1 << 40, 1]",
    "negative": "[0, -1, 2]",
    "below_minus_n": "[0, -5, 2]",
}

_CHILD = """
import warnings, torch
from torch._higher_order_ops import scan, while_loop
warnings.simplefilter("ignore")
{model}
torch.manual_seed(0)
x = torch.randn(4, 3)
compiled = torch.compile(model, backend="tidal", options={{"fallback": "error"}})
for name, step in {indices}.items():  # one program: only index values change
    step = torch.tensor(step)
    i = step if "{place}" == "top_level" else torch.stack([torch.tensor([2, 1, 0]), step, torch.tensor([1, 1, 3])])
    try:
        expected = model(x, i)
    except Exception as e:
        expected = e
    with torch.no_grad():
        try:
            got = compiled(x, i)
        except Exception as e:
            got = e
    if isinstance(expected, Exception):
        assert type(got) is type(expected), (name, type(got), got, type(expected), expected)
        assert str(expected).splitlines()[0] in str(got), (name, got, expected)
    else:
        torch.testing.assert_close(got, expected, msg=name)
print("OK")
"""


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("op", list(OPS))
def test_gathering_op_with_indices_like_eager(fork_server, op, place):
    model = PLACES[place].format(op=OPS[op])
    indices = "{" + ", ".join(f"{name!r}: {value}" for name, value in INDICES.items()) + "}"
    fork_server.exec_ok(_CHILD.format(model=model, indices=indices, place=place))
