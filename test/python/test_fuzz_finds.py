"""Bugs the gradient fuzzer (test_fuzz.py, fuzz_campaign.py) found, as minimal programs. A bug tidal
has not fixed yet is marked xfail(strict=True): a fix turns its test into an XPASS failure, and
then the test becomes a plain regression test ("Fixed: was ...") and the generator's matching
exclusion (fuzz_programs.py, "Left out on purpose") is dropped."""

import torch
from torch._higher_order_ops import associative_scan, map, scan, while_loop

from loop_reference import python_scan, python_while_loop


def _train(fn, *args):
    """(output, gradients) of `(fn(*args) * w).sum()` for a fixed w, through strict tidal."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tidal", options={"fallback": "error"})
    leaves = [a.clone().requires_grad_() for a in args]
    out = compiled(*leaves)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    (out * w).sum().backward()
    return out.detach(), [x.grad for x in leaves]


def _reference(fn, *args):
    leaves = [a.clone().requires_grad_() for a in args]
    out = fn(*leaves)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    (out * w).sum().backward()
    return out.detach(), [x.grad for x in leaves]


def test_associative_scan_of_length_1_gradient():
    """IndexError: select(): index 0 out of range for tensor of size [0] at dimension 0, raised
    while aot_autograd traces tidal's adjoint (autodiff/associative_scan.py) of a scan over a dim
    of size 1; size 2 works. The forward alone compiles.
    Fixed: was both adjoints working on steps 1.. of zero; a scan of length 1 now has x̄ = ȳ.
    """

    def program(v):
        return associative_scan(lambda a, b: a + b, v, dim=0, combine_mode="generic")

    v = torch.tensor([0.5])
    out, (grad,) = _train(program, v)
    torch.testing.assert_close(out, v)
    torch.testing.assert_close(grad, torch.tensor([-1.0]))


def test_scan_over_dim_1_inside_while_loop_gradient():
    """UncapturedHigherOrderOpError: Expected carried_inputs and body_output to have same metadata
    but found: pair[2] differ in 'stride: (2, 1) vs (1, 4)', raised while aot_autograd traces
    tidal's while_loop adjoint (autodiff/while_loop.py, backward): the scan adjoint's cotangent of
    xs is stacked on dim 0 and moved to `dim`, so it is strided, and the adjoint loop carries it
    as it is. Any size fails, and a scan over dim 0 in the same loop works; tidal's message keeps
    only the first line of torch's, which drops the 'pair[2] differ in stride' part.
    Fixed: was the adjoint loop carrying cotangents with the layout autograd gave them; its carries
    now have standard strides (autodiff/common.py, standard_strides).
    """

    def step(c, x):
        return c + x, (c + x).clone()

    def body(i, v):
        _, ys = scan(step, torch.zeros(v.shape[:-1]), v, dim=1)
        return i + 1, ys.clone(memory_format=torch.contiguous_format)

    def program(v):
        return while_loop(lambda i, v: i < 2, body, (torch.zeros((), dtype=torch.int64), v))[1]

    def reference(v):
        return python_while_loop(lambda i, v: i < 2, body_in_python, (torch.zeros((), dtype=torch.int64), v))[1]

    def body_in_python(i, v):
        _, ys = python_scan(step, torch.zeros(v.shape[:-1]), v, dim=1)
        return i + 1, ys

    v = torch.rand(4, 2)
    out, grads = _train(program, v)
    expected, expected_grads = _reference(reference, v)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, expected_grads)


def test_associative_scan_over_dim_1_after_while_loop_gradient():
    """The same error as above, the other way round: 'pair[2] differ in stride: (1, 3) vs (2, 1)'.
    The loop's output cotangent comes from associative_scan's adjoint over dim 1 (strided) and
    enters tidal's adjoint loop as its carry as it is, while the body's map stacks a contiguous
    one. A body of elementwise ops (`v * 2`), which keeps its cotangent's strides, works; scan in
    place of associative_scan fails the same way.
    Fixed: was the strided output cotangent entering the adjoint loop as it is (common.cotangents
    now gives every cotangent standard strides).
    """

    def body(i, v):
        return i + 1, map(lambda x: x * 2, v)

    def program(v):
        _, v = while_loop(lambda i, v: i < 1, body, (torch.zeros((), dtype=torch.int64), v))
        return associative_scan(lambda a, b: a + b, v, dim=1, combine_mode="generic")

    v = torch.rand(3, 2)
    out, (grad,) = _train(program, v)
    torch.testing.assert_close(out, (2 * v).cumsum(1))
    torch.testing.assert_close(grad, 2 * torch.linspace(-1, 1, 6).reshape(3, 2).flip(1).cumsum(1).flip(1))


def test_scan_over_dim_1_inside_scan_gradient():
    """UncapturedHigherOrderOpError: Expected init and carry to have same metadata but found:
    pair[0] differ in 'stride: (2, 1) vs (1, 3)', raised while aot_autograd traces tidal's scan
    adjoint: the outer carry feeds an inner scan over dim 1, whose adjoint's cotangent of xs is
    strided, so the outer adjoint's carry is strided where its init (zeros) is not.
    Fixed: was the reverse scan carrying the step VJP's strided carry cotangent; its carries now
    have standard strides.
    """

    def inner(c, x):
        return c + x, (c + x).clone()

    def outer(c, x):
        _, ys = scan(inner, torch.zeros(x.shape[0]), c + x, dim=1)
        y = ys.clone(memory_format=torch.contiguous_format)
        return y, y.clone()

    def outer_in_python(c, x):
        _, ys = python_scan(inner, torch.zeros(x.shape[0]), c + x, dim=1)
        return ys, ys.clone()

    def program(v):
        return scan(outer, torch.zeros(v.shape[1:]), v, dim=0)[1]

    def reference(v):
        return python_scan(outer_in_python, torch.zeros(v.shape[1:]), v, dim=0)[1]

    v = torch.rand(2, 3, 2)
    out, grads = _train(program, v)
    expected, expected_grads = _reference(reference, v)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, expected_grads)


def test_scan_over_dim_1_inside_cond_gradient():
    """AssertionError: a_stride_expr:{1: 1, 3: 3}, b_stride_expr:{1: 1, 3: 3}, raised while
    aot_autograd traces tidal's cond adjoint: one branch's cotangent comes from a scan adjoint over
    dim 1 (strided), the other's is contiguous. Fails for shapes (1, 3) and (1, 1, 3); (2, 3) and
    (1, 2, 3) work.
    Fixed: was `contiguous()` on the adjoint branches' results, which keeps a size-1 dim's stride;
    they now get standard strides.
    """

    def step(c, x):
        return c + x, (c + x).clone()

    def then(v):
        _, ys = scan(step, torch.zeros(v.shape[:-1]), v, dim=1)
        return ys.clone(memory_format=torch.contiguous_format)

    def program(v):
        return torch.cond(v.sum() > 0, then, lambda v: v * 2, (v,))

    def reference(v):
        return python_scan(step, torch.zeros(v.shape[:-1]), v, dim=1)[1]

    v = torch.rand(1, 3)
    out, grads = _train(program, v)
    expected, expected_grads = _reference(reference, v)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(grads, expected_grads)
