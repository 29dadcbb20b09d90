"""tidal demo: build a small control-flow program with tidal's builders and print its IR.

(The CPU backend replaces this with a model compiled by torch.compile(backend="tidal").)
"""

from torch_mlir import ir
from torch_mlir.dialects import arith, func

from tidal.context import make_context
from tidal.dialects import check_module
from tidal.dialects.scan import build_scan


def main():
    with make_context(), ir.Location.file("demo.py", 1, 1):
        module = ir.Module.create()
        f32x3 = ir.Type.parse("tensor<3xf32>")
        xs_type = ir.Type.parse("tensor<8x3xf32>")
        with ir.InsertionPoint(module.body):

            @func.FuncOp.from_py_func(f32x3, xs_type)
            def cumsum(h, xs):
                scan = build_scan(
                    [h], [xs], [], [f32x3], lambda c, x: [arith.AddFOp(c, x).result] * 2
                )
                return list(scan.results)

        check_module(module.operation)
        print(module)


if __name__ == "__main__":
    main()
