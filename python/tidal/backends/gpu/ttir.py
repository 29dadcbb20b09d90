"""Triton IR text: a small builder for the core TTIR subset (FOUNDATION.md, "GPU: Triton IR text").

tidal emits TTIR as text and lets triton 3.6 parse it (`triton_compile.py`): the two MLIR builds
(torch-mlir's and Triton's) never share objects, only this text. Scalar element ops of a linalg
body become the same arith/math ops on `tensor<BLOCK x T>` (TTIR uses the upstream arith and math
dialects), printed in MLIR's generic form so that no op's custom syntax has to be reproduced;
transcendental functions go to libdevice through `tt.extern_elementwise`, as `tl.math` does,
because Triton's own `math.exp` is `ex2.approx` (eager CUDA uses accurate `expf`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidal.diagnostics import TidalUnsupported

# MLIR element type -> Triton signature type of a pointer to it / of a scalar argument
SIGNATURE_TYPES = {"f32": "fp32", "f64": "fp64", "f16": "fp16", "bf16": "bf16", "i64": "i64", "i32": "i32",
                   "i16": "i16", "i8": "i8", "i1": "i1"}

# libdevice names of math ops (f32: with the `f` suffix)
_LIBDEVICE = {
    "math.exp": "exp", "math.exp2": "exp2", "math.expm1": "expm1", "math.log": "log", "math.log2": "log2",
    "math.log10": "log10", "math.log1p": "log1p", "math.tanh": "tanh", "math.sinh": "sinh", "math.cosh": "cosh",
    "math.sin": "sin", "math.cos": "cos", "math.tan": "tan", "math.asin": "asin", "math.acos": "acos",
    "math.atan": "atan", "math.atan2": "atan2", "math.asinh": "asinh", "math.acosh": "acosh",
    "math.atanh": "atanh", "math.erf": "erf", "math.erfc": "erfc", "math.sqrt": "sqrt", "math.rsqrt": "rsqrt",
    "math.powf": "pow", "math.cbrt": "cbrt", "math.round": "round", "math.roundeven": "rint",
    "math.trunc": "trunc",
}
# ops printed as they are (generic form), element type unchanged or given by the op's result type
_DIRECT = {
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.maximumf",
    "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.cmpf", "arith.cmpi", "arith.select",
    "arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.remsi", "arith.remui",
    "arith.floordivsi", "arith.ceildivsi", "arith.andi", "arith.ori", "arith.xori", "arith.shli", "arith.shrsi",
    "arith.shrui", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui", "arith.extf", "arith.truncf",
    "arith.extsi", "arith.extui", "arith.trunci", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui",
    "arith.bitcast", "math.absf", "math.absi", "math.floor", "math.ceil", "math.fma",
}


def element_type(mlir_type) -> str:
    """The TTIR element type of a scalar MLIR type (index is i64: offsets and counters)."""
    text = str(mlir_type)
    return "i64" if text == "index" else text


def memory_type(elem: str) -> str:
    return "i8" if elem == "i1" else elem


def tensor_type(shape: tuple[int, ...], elem: str, encoding: str = "") -> str:
    """`tensor<AxBxT>`, with `, encoding` (a TTGIR layout) when given; a scalar type for ()."""
    if not shape:
        return elem
    return f"tensor<{'x'.join(str(s) for s in shape)}x{elem}{', ' + encoding if encoding else ''}>"


# A TTGIR kernel's target is written into its module when it is compiled (triton_compile.py)
TARGET_PLACEHOLDER = "@TARGET@"


@dataclass
class Kernel:
    """A kernel's TTIR text and what a launch needs: the signature (argument name -> Triton type)
    in argument order, and options (num_warps). `stage` "ttgir": the text has explicit layouts
    (a module of TritonGPU types that Triton's layout passes never see)."""

    name: str
    text: str
    signature: dict[str, str]
    num_warps: int = 4
    stage: str = "ttir"
    location: object = None  # the op's source location, for errors (set when the plan takes it)


@dataclass
class KernelBuilder:
    name: str
    args: list[tuple[str, str, str]] = field(default_factory=list)  # (ssa, mlir type, signature type)
    lines: list[str] = field(default_factory=list)
    indent: int = 2
    _count: int = 0
    # TTGIR only (set: the kernel is TTGIR): the encoding of the tensors that `ty` (the helpers
    # below, translate_op) builds without one named, and the layout aliases (`#name = ...`)
    encoding: str = ""
    aliases: list[str] = field(default_factory=list)
    warps: int = 4

    def ty(self, shape: tuple[int, ...], elem: str, encoding: str | None = None) -> str:
        return tensor_type(shape, elem, self.encoding if encoding is None else encoding)

    def fresh(self) -> str:
        self._count += 1
        return f"%v{self._count}"

    def pointer_arg(self, name: str, elem: str) -> str:
        """A pointer argument; booleans live in memory as bytes (`*i1` at launch, i8 inside, as
        Triton's own frontend stores them)."""
        ssa = f"%{name}"
        self.args.append((ssa, f"!tt.ptr<{memory_type(elem)}> {{tt.divisibility = 16 : i32}}", "*" + SIGNATURE_TYPES[elem]))
        return ssa

    def scalar_arg(self, name: str, elem: str = "i32", divisible: bool = False) -> str:
        """A scalar argument; `divisible`: promised a multiple of 16 (as Triton's launcher
        specializes such integers), so that masks and offsets built from it keep vector loads."""
        ssa = f"%{name}"
        self.args.append((ssa, f"{elem} {{tt.divisibility = 16 : i32}}" if divisible else elem, SIGNATURE_TYPES[elem]))
        return ssa

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def op(self, text: str, results: int = 1) -> str | list[str]:
        """`%v = text` (or `%v:n = text`); returns the result name(s)."""
        v = self.fresh()
        self.emit(f"{v}{':' + str(results) if results > 1 else ''} = {text}")
        return v if results == 1 else [f"{v}#{i}" for i in range(results)]

    # -- common values ---------------------------------------------------------------------------

    def const(self, value, elem: str, shape: tuple[int, ...] = (), encoding: str | None = None) -> str:
        if shape:
            return self.op(f"arith.constant dense<{value}> : {self.ty(shape, elem, encoding)}")
        return self.op(f"arith.constant {value} : {elem}")

    def splat(self, scalar: str, elem: str, shape: tuple[int, ...], encoding: str | None = None) -> str:
        return self.op(f"tt.splat {scalar} : {elem} -> {self.ty(shape, elem, encoding)}")

    def binary(self, name: str, a: str, b: str, ty: str) -> str:
        return self.op(f"{name} {a}, {b} : {ty}")

    def text(self) -> Kernel:
        params = ", ".join(f"{ssa}: {ty}" for ssa, ty, _ in self.args)
        body = "\n".join(self.lines)
        module = "module"
        if self.encoding:
            module = "".join(a + "\n" for a in self.aliases) + (
                f'module attributes {{"ttg.num-ctas" = 1 : i32, "ttg.num-warps" = {self.warps} : i32, '
                f'ttg.target = "{TARGET_PLACEHOLDER}", "ttg.threads-per-warp" = 32 : i32}}')
        text = f"{module} {{\n  tt.func public @{self.name}({params}) {{\n{body}\n    tt.return\n  }}\n}}\n"
        signature = {ssa[1:]: sig for ssa, _, sig in self.args}
        return Kernel(self.name, text, signature, num_warps=self.warps, stage="ttgir" if self.encoding else "ttir")


def translate_op(b: KernelBuilder, op, operands: list[str], shape: tuple[int, ...]) -> list[str]:
    """One scalar arith/math op of a linalg body (or a scan combine), applied to values of
    `shape` (() for scalars): the TTIR names of its results."""
    name = op.operation.name
    result_elems = [element_type(r.type) for r in op.results]
    operand_elems = [element_type(v.type) for v in op.operands]
    result_types = [b.ty(shape, e) for e in result_elems]
    operand_types = [b.ty(shape, e) for e in operand_elems]
    if name == "arith.constant":
        value = str(op.attributes["value"]).rsplit(" : ", 1)[0]
        return [b.const(value, result_elems[0], shape)]
    if name in ("arith.index_cast", "arith.index_castui"):
        (src,), (dst,) = operand_elems, result_elems
        if src == dst:
            return list(operands)
        width = lambda e: int(e[1:])  # noqa: E731
        cast = "arith.trunci" if width(src) > width(dst) else ("arith.extsi" if name == "arith.index_cast" else "arith.extui")
        return [b.op(f"{cast} {operands[0]} : {operand_types[0]} to {result_types[0]}")]
    if name == "arith.negf":  # Triton has no lowering of negf; -0.0 - x flips the sign bit exactly
        return [b.op(f"arith.subf {b.const('-0.000000e+00', result_elems[0], shape)}, {operands[0]} : {result_types[0]}")]
    if name == "math.tanh" and result_elems[0] == "f32" and shape:
        return [_tanh_f32(b, operands[0], result_types[0], shape)]
    if name in _LIBDEVICE and result_elems[0] in ("f32", "f64"):
        symbol = f"__nv_{_LIBDEVICE[name]}{'f' if result_elems[0] == 'f32' else ''}"
        return [b.op(
            f'tt.extern_elementwise {", ".join(operands)} {{libname = "", libpath = "", pure = true, symbol = "{symbol}"}}'
            f' : ({", ".join(operand_types)}) -> {result_types[0]}'
        )]
    if name == "math.fpowi" and result_elems[0] in ("f32", "f64"):
        # libdevice's powi takes an i32 exponent
        exp = operands[1]
        if operand_elems[1] != "i32":
            exp = b.op(f"arith.trunci {exp} : {operand_types[1]} to {b.ty(shape, 'i32')}")
        symbol = "__nv_powif" if result_elems[0] == "f32" else "__nv_powi"
        return [b.op(
            f'tt.extern_elementwise {operands[0]}, {exp} {{libname = "", libpath = "", pure = true, symbol = "{symbol}"}}'
            f" : ({operand_types[0]}, {b.ty(shape, 'i32')}) -> {result_types[0]}"
        )]
    if name in _DIRECT:
        attrs = op.attributes
        attr_text = ", ".join(f"{k} = {attrs[k]}" for k in attrs)
        text = f'"{name}"({", ".join(operands)})' + (f" {{{attr_text}}}" if attr_text else "")
        text += f" : ({', '.join(operand_types)}) -> {result_types[0] if len(result_types) == 1 else '(' + ', '.join(result_types) + ')'}"
        return [b.op(text)] if len(op.results) == 1 else b.op(text, len(op.results))
    raise TidalUnsupported(f"GPU backend: '{name}' has no Triton lowering", op.location)


def inline_asm(b: KernelBuilder, instruction: str, x: str, ty: str) -> str:
    """`instruction $0, $1;` on each 32-bit element of x (of type ty)."""
    return b.op(f'tt.elementwise_inline_asm "{instruction} $0, $1;" {{constraints = "=r,r", packed_element = 1 : i32, '
                f"pure = true}} {x} : {ty} -> {ty}")


TF32_ROUND_BIAS, TF32_KEPT_BITS = 0x1000, -0x2000  # half of TF32's last place; the 19 bits TF32 keeps


def round_to_tf32(b: KernelBuilder, x: str, ty: str, shape: tuple[int, ...], encoding: str | None = None) -> str:
    """x rounded to TF32 (10 mantissa bits) to nearest, ties away from zero, as cvt.rna.tf32.f32
    rounds, in two integer ops on the bits (cvt.rna takes four on sm_90: it checks for NaN).
    Equal to cvt.rna for every f32 but NaN (all 2^32 patterns checked against a rounding in
    float64); a NaN comes out NaN, ±0 or (a payload under 0x1000) ±inf, so a caller must carry
    NaNs some other way."""
    bits_ty = b.ty(shape, "i32", encoding)
    bits = b.op(f"tt.bitcast {x} : {ty} -> {bits_ty}")
    biased = b.binary("arith.addi", bits, b.const(TF32_ROUND_BIAS, "i32", shape, encoding), bits_ty)
    kept = b.binary("arith.andi", biased, b.const(TF32_KEPT_BITS, "i32", shape, encoding), bits_ty)
    return b.op(f"tt.bitcast {kept} : {bits_ty} -> {ty}")


def _tanh_f32(b: KernelBuilder, x: str, ty: str, shape: tuple[int, ...]) -> str:
    """libdevice's tanhf, step for step (its constants, its approximate ex2 and rcp), with its two
    paths (|x| < 0.6: an odd polynomial; else 1 - 2/(e^2|x| + 1) with x's sign) computed for
    every element and selected: __nv_tanhf branches per element, so a thread's elements ran
    one after another, on the critical path of a row kernel's step (bench RNN on an H200,
    prototype: 0.30 ms with __nv_tanhf against 0.22 with an inexact tanh; tidal's kernel went
    from 316 to 254 us with this one). Values equal eager's tanhf."""
    i_ty, i1_ty = b.ty(shape, "i32"), b.ty(shape, "i1")

    def const(value):
        return b.const(value, "f32", shape)

    def fma(p, q, r):
        return b.op(f'"math.fma"({p}, {q}, {r}) : ({ty}, {ty}, {ty}) -> {ty}')

    magnitude = b.op(f'"math.absf"({x}) : ({ty}) -> {ty}')
    x2 = b.binary("arith.mulf", x, x, ty)
    poly = fma(const("1.573968306e-02"), x2, const("-5.230396241e-02"))
    for c in ("1.331529766e-01", "-3.333276808e-01", "0.000000e+00"):
        poly = fma(poly, x2, const(c))
    small = fma(poly, x, x)
    e = inline_asm(b, "ex2.approx.ftz.f32", b.binary("arith.mulf", magnitude, const("2.885390043e+00"), ty), ty)
    r = inline_asm(b, "rcp.approx.ftz.f32", b.binary("arith.addf", e, const("1.000000e+00"), ty), ty)
    big = fma(r, const("-2.000000e+00"), const("1.000000e+00"))
    saturated = b.op(f"arith.cmpf oge, {magnitude}, {const('9.010913849e+00')} : {ty}")
    big = b.op(f"arith.select {saturated}, {const('1.000000e+00')}, {big} : {i1_ty}, {ty}")
    sign = b.binary("arith.andi", b.op(f"tt.bitcast {x} : {ty} -> {i_ty}"), b.const(-2147483648, "i32", shape), i_ty)
    signed = b.binary("arith.ori", sign, b.op(f"tt.bitcast {big} : {ty} -> {i_ty}"), i_ty)
    big = b.op(f"tt.bitcast {signed} : {i_ty} -> {ty}")
    near_zero = b.op(f"arith.cmpf ult, {magnitude}, {const('6.000000238e-01')} : {ty}")
    return b.op(f"arith.select {near_zero}, {small}, {big} : {i1_ty}, {ty}")
