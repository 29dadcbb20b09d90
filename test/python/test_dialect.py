"""The tidal dialect's Python API: builders make ops that verify; the verifier rejects broken ones."""

import pytest
from torch_mlir import ir
from torch_mlir.dialects import arith, func

from tidal.context import make_context, parse_module
from tidal.diagnostics import TidalUnsupported, TidalVerifyError
import tidal.init_all  # noqa: F401  (attaches every transformation's rules)
from tidal.conversion.tidal_to_scf import LOWER_TO_SCF
from tidal.dialects import all_ops, check_module, op_entry, verify_module
from tidal.dialects.associative_scan import build_associative_scan
from tidal.dialects.cond import build_cond
from tidal.dialects.map import build_map
from tidal.dialects.scan import build_scan
from tidal.dialects.while_loop import build_while


def T(text):
    return ir.Type.parse(text)


def build_func(arg_types, body):
    """A module with one func whose body is `body(*args) -> results`."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):

        @func.FuncOp.from_py_func(*arg_types)
        def f(*args):
            return body(*args)

    return module


@pytest.fixture
def ctx():
    c = make_context()
    with c, ir.Location.file("builder.py", 1, 1):
        yield c


def test_every_op_has_one_registration_entry_with_its_rules():
    names = {e.name for e in all_ops()}
    control_flow = {"tidal.cond", "tidal.while", "tidal.scan", "tidal.associative_scan", "tidal.map"}
    assert names == control_flow | {"tidal.aten_call", "tidal.parallelism"}
    for e in all_ops():
        assert callable(e.verify) and callable(e.build), e.name
        assert (e.operands or e.name == "tidal.parallelism") and e.results and e.doc, e.name
        assert bool(e.regions) == (e.name in control_flow), e.name
    for name in control_flow:
        rule = op_entry(name).rule("lower-to-scf")
        assert rule is not None and rule.fn.__module__.startswith("tidal.conversion.tidal_to_scf."), name
    assert op_entry("tidal.aten_call").rule("cpu-aten-call").fn.__module__ == "tidal.backends.cpu.aten_runtime"


def test_a_rule_is_attached_once():
    with pytest.raises(ValueError, match="registered twice"):
        LOWER_TO_SCF.rule("tidal.scan")(lambda op: None)
    with pytest.raises(ValueError, match="no op named tidal.nope"):
        LOWER_TO_SCF.rule("tidal.nope")(lambda op: None)


def test_builders_make_valid_ops(ctx):
    def body(p, x, xs, n):
        add = lambda a, b: arith.AddFOp(a, b).result  # noqa: E731
        c = build_cond(p, [x], [x.type], lambda a: [add(a, a)], lambda a: [a])
        w = build_while(
            [x],
            [p],
            cond_fn=lambda a, q: [q],
            body_fn=lambda a, q: [add(a, a)],
        )
        s = build_scan([x], [xs], [], [x.type], lambda h, xt: [add(h, xt), h], dim=0, reverse=True)
        a = build_associative_scan([xs], [], lambda l, r: [add(l, r)], dim=0)
        m = build_map([xs], [x], [x.type], lambda xt, k: [add(xt, k)])
        return [c.result, w.result, *s.results, a.result, m.result]

    module = build_func([T("tensor<i1>"), T("tensor<3xf32>"), T("tensor<5x3xf32>"), T("tensor<i64>")], body)
    assert verify_module(module.operation) == []
    text = str(module)
    for name in ("tidal.cond", "tidal.while", "tidal.scan", "tidal.associative_scan", "tidal.map"):
        assert f'"{name}"' in text
    # The printed form parses back and still verifies.
    again = parse_module(text, "again.mlir", ctx)
    check_module(again.operation)


def test_builder_with_dynamic_dims_and_torch_types(ctx):
    def body(h, xs):
        s = build_scan([h], [xs], [], [h.type], lambda c, x: [c, c])
        return list(s.results)

    module = build_func([T("!torch.vtensor<[?],f32>"), T("!torch.vtensor<[?,?],f32>")], body)
    check_module(module.operation)
    assert "!torch.vtensor<[?,?],f32>" in str(module)


def test_verifier_reports_op_position_and_both_types(ctx):
    src = """
    func.func @f(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> tensor<3xf32> {
      %r = "tidal.scan"(%h, %xs) ({
      ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
        %d = "test.d"(%c) : (tensor<3xf32>) -> tensor<3xf64>
        "tidal.yield"(%d) : (tensor<3xf64>) -> ()
      }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false}
         : (tensor<3xf32>, tensor<4x3xf32>) -> tensor<3xf32>
      return %r : tensor<3xf32>
    }"""
    module = parse_module(src, "carry.mlir", ctx)
    with pytest.raises(TidalVerifyError) as e:
        check_module(module.operation)
    msg = e.value.format()
    assert msg.startswith("carry.mlir:3:12: error: 'tidal.scan' op")
    assert "carry match" in msg and "tensor<3xf64>" in msg and "tensor<3xf32>" in msg


def test_missing_rule_raises_actionable_located_error(ctx):
    module = parse_module(
        """func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
          %r = "tidal.unknown"(%x) : (tensor<2xf32>) -> tensor<2xf32>
          return %r : tensor<2xf32>
        }""",
        "missing.mlir",
        ctx,
    )
    op = module.body.operations[0].regions[0].blocks[0].operations[0]
    with pytest.raises(TidalUnsupported) as e:
        LOWER_TO_SCF.rule_for(op)
    assert e.value.format().startswith("missing.mlir:2:16: error: 'tidal.unknown' op has no lower-to-scf rule")
    assert "--describe-op tidal.unknown" in e.value.message


def test_describe_names_definition_and_rules():
    text = op_entry("tidal.while").describe()
    assert text.startswith("tidal.while: loop while a 0-d i1 predicate holds")
    assert "num_carries" in text and "cond " in text
    assert "verifier       tidal.dialects.while_loop.verify_while (dialects/while_loop.py:" in text
    assert (
        "lower-to-scf   tidal.conversion.tidal_to_scf.while_loop.lower_while_to_scf "
        "(python/tidal/conversion/tidal_to_scf/while_loop.py:" in text
    )


def test_deep_nesting_verifies_without_recursion_error(ctx):
    depth = 300
    lines = ["func.func @f(%p: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {"]
    for i in range(depth):
        lines += [
            f'%r{i} = "tidal.cond"(%p, %x) ({{',
            f"^bb0(%a{i}: tensor<2xf32>):",
        ]
    lines.append(f'"tidal.yield"(%a{depth - 1}) : (tensor<2xf32>) -> ()')
    for i in reversed(range(depth)):
        lines += [
            "}, {",
            f"^bb0(%e{i}: tensor<2xf32>):",
            f'"tidal.yield"(%e{i}) : (tensor<2xf32>) -> ()',
            "}) : (tensor<i1>, tensor<2xf32>) -> tensor<2xf32>",
        ]
        if i:
            lines.append(f'"tidal.yield"(%r{i}) : (tensor<2xf32>) -> ()')
    lines += ["return %r0 : tensor<2xf32>", "}"]
    # Inner conds use the outer %p and %x: isolated-from-above is violated at every level but the outermost.
    module = parse_module("\n".join(lines), "deep.mlir", ctx)
    errors = verify_module(module.operation)
    assert len(errors) == depth - 1  # one per inner cond: the first outer operand it uses
    assert all("isolated from above" in e.message for e in errors)
