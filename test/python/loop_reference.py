"""Eager references with `scan` and `while_loop` run as Python loops: eager autograd of the same
computation, independent of PyTorch's autograd rules for those HOPs (which fail on an integer
carry, "outs_to_grad length (2) != tangents length (4)", and give wrong gradients for a
while_loop whose carry is an `amax`: test/corpus/while_deq_fixed_point.py against an unrolled
loop)."""

from __future__ import annotations

import contextlib
import functools

import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops import scan as hop_scan
from torch._higher_order_ops import while_loop as hop_while_loop


def python_while_loop(cond_fn, body_fn, carried_inputs):
    carries = tuple(carried_inputs)
    while bool(cond_fn(*carries)):
        carries = tuple(body_fn(*carries))
    return carries


def python_scan(combine_fn, init, xs, dim=0, reverse=False):
    leaves, spec = pytree.tree_flatten(xs)
    steps = range(leaves[0].shape[dim])
    carry, ys = init, []
    for t in reversed(steps) if reverse else steps:
        carry, y = combine_fn(carry, pytree.tree_unflatten([x.select(dim, t) for x in leaves], spec))
        ys.append(y)
    if reverse:
        ys.reverse()
    y_leaves = [pytree.tree_leaves(y) for y in ys]
    stacked = [torch.stack(column, dim if _scan_stacks_on_its_dim() else 0) for column in zip(*y_leaves)]
    return carry, pytree.tree_unflatten(stacked, pytree.tree_structure(ys[0]))


@functools.cache
def _scan_stacks_on_its_dim() -> bool:
    """Whether the installed torch's scan stacks its per-step outputs on `dim` (torch 2.13) or on
    dim 0 whatever `dim` is (torch 2.11, the GPU machine's; tidal follows the installed torch):
    asked of eager's scan itself, once."""
    xs = torch.zeros(2, 3, device="cpu")
    with torch.no_grad():
        _, ys = hop_scan(lambda c, x: (c + x, x * 2), torch.zeros(2, device="cpu"), xs, dim=1)
    return tuple(ys.shape) == (2, 3)


_LOOPS = {hop_scan: python_scan, hop_while_loop: python_while_loop}


@contextlib.contextmanager
def python_loops(model):
    """While active, the module that defines `model` calls the Python loops instead of the HOPs."""
    fn = model.forward if isinstance(model, torch.nn.Module) else model
    globs = fn.__globals__
    swapped = {name: value for name, value in globs.items() if any(value is hop for hop in _LOOPS)}
    for name, hop in swapped.items():
        globs[name] = next(loop for h, loop in _LOOPS.items() if h is hop)
    try:
        yield
    finally:
        globs.update(swapped)
