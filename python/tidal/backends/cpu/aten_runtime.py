"""`tidal-aten-calls-to-runtime`: each `tidal.aten_call` becomes a call into ATen's dispatcher.

Runs on builtin tensors, before bufferization. The op becomes a call of a private helper over
memrefs, `to_buffer` on its operands and `to_tensor restrict` on its results, so one-shot
bufferization passes the buffers the program already has. The helper (generated per call site):
  1. wraps each operand buffer as an ATen tensor, zero-copy (`aoti_torch_create_tensor_from_blob`
     over the buffer's pointer, sizes and strides: slices of loop-carried buffers work as they are);
  2. fills a dispatcher stack with the schema's arguments in the stable ABI's encoding (tensor
     handles, int lists as stable lists, optionals boxed with `torch_new_stable_ivalue`, floats as
     their bits) and calls `torch_call_dispatcher(callee, overload, stack)`: the stable C entry
     point AOTInductor's fallback kernels use, so any aten operator runs, inside loop bodies too;
  3. copies each result into its buffer (`aoti_torch_copy_`, which also handles strided
     results), then frees every handle. A result of static shape is written into a buffer the
     caller allocates (a `memref.alloc` beside the call, which `tidal-results-to-arguments` turns
     into the caller's output tensor when the program returns it: one copy, not two); one of
     dynamic shape is allocated by the helper with the sizes ATen returned.
A failing call (eager would raise: a bad index, a shape error) reports through the module's
error hook, which the runtime turns into a RuntimeError after the native call returns.
"""

from __future__ import annotations

import itertools
import struct

import torch
from torch_mlir import ir
from torch_mlir.dialects import bufferization, func

from tidal.backends.cpu.blas import bmm_as_batch_matmul
from tidal.backends.cpu.transpose_tiles import permuted
from tidal.dialects import declare_transformation
from tidal.dialects.aten_call import NAME as ATEN_CALL
from tidal.dialects.aten_call import is_none, is_operand_ref
from tidal.passes.registry import ops_named, tidal_pass
from tidal.runtime import externs
from tidal.runtime.errors import ERROR_HOOK_SETTER

CPU_CALL = declare_transformation(
    "cpu-aten-call", "tidal.aten_call -> a call into ATen's dispatcher through the stable C ABI (CPU)"
)

# c10::ScalarType codes, as the stable ABI's dtype getters return them.
_DTYPE_CODES = {"ui8": 0, "i8": 1, "i16": 2, "i32": 3, "i64": 4, "f16": 5, "f32": 6, "f64": 7, "i1": 11, "bf16": 15}
_DISPATCHER_VERSION = (2 << 56) | (13 << 48)  # the stable ABI revision whose encodings this emits

_DECLS = {
    "aoti_torch_create_tensor_from_blob": "(!llvm.ptr, i64, !llvm.ptr, !llvm.ptr, i64, i32, i32, i32, !llvm.ptr) -> i32",
    "aoti_torch_delete_tensor_object": "(!llvm.ptr) -> i32",
    "aoti_torch_get_sizes": "(!llvm.ptr, !llvm.ptr) -> i32",
    "aoti_torch_copy_": "(!llvm.ptr, !llvm.ptr, i32) -> i32",
    "torch_call_dispatcher": "(!llvm.ptr, !llvm.ptr, !llvm.ptr, i64) -> i32",
    "torch_new_stable_ivalue": "(!llvm.ptr) -> i32",
    "torch_new_list_reserve_size": "(i64, !llvm.ptr) -> i32",
    "torch_list_push_back": "(!llvm.ptr, i64) -> i32",
    "torch_new_string_handle": "(!llvm.ptr, i64, !llvm.ptr) -> i32",
}
externs.require(*_DECLS)

_PRELUDE = f"""
llvm.mlir.global internal @tidal_error_hook() : !llvm.ptr {{
  %0 = llvm.mlir.zero : !llvm.ptr
  llvm.return %0 : !llvm.ptr
}}
llvm.func @{ERROR_HOOK_SETTER}(%hook: !llvm.ptr) {{
  %slot = llvm.mlir.addressof @tidal_error_hook : !llvm.ptr
  llvm.store %hook, %slot : !llvm.ptr, !llvm.ptr
  llvm.return
}}
llvm.func @tidal_report_aten_error(%callee: !llvm.ptr) {{
  %slot = llvm.mlir.addressof @tidal_error_hook : !llvm.ptr
  %hook = llvm.load %slot : !llvm.ptr -> !llvm.ptr
  %null = llvm.mlir.zero : !llvm.ptr
  %set = llvm.icmp "ne" %hook, %null : !llvm.ptr
  llvm.cond_br %set, ^call, ^done
^call:
  llvm.call %hook(%callee) : !llvm.ptr, (!llvm.ptr) -> ()
  llvm.br ^done
^done:
  llvm.return
}}
"""


def _decl(name: str, sig: str) -> str:
    args, result = sig.split(" -> ")
    return f"llvm.func @{name}{args} -> {result}\n"


class _Emitter:
    """MLIR text of one helper function; fresh SSA names from one counter.

    Stack slots go to the entry block (`prologue`) even when used inside an `scf.if`: LLVM hoists
    only entry-block allocas when it inlines the helper into a loop body; any other alloca would
    grow the stack on every iteration.
    """

    def __init__(self):
        self.prologue: list[str] = []
        self.lines: list[str] = []
        self._ids = itertools.count()

    def fresh(self, hint: str = "v") -> str:
        return f"%{hint}{next(self._ids)}"

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def const_i64(self, v: int) -> str:
        r = self.fresh("c")
        self.emit(f"{r} = llvm.mlir.constant({v} : i64) : i64")
        return r

    def const_i32(self, v: int) -> str:
        r = self.fresh("c")
        self.emit(f"{r} = llvm.mlir.constant({v} : i32) : i32")
        return r

    def alloca(self, elem: str) -> str:
        one, r = self.fresh("c"), self.fresh("slot")
        self.prologue.append(f"  {one} = llvm.mlir.constant(1 : i64) : i64")
        self.prologue.append(f"  {r} = llvm.alloca {one} x {elem} : (i64) -> !llvm.ptr")
        return r

    def call(self, name: str, args: list[str]) -> str:
        sig = _DECLS[name]
        r = self.fresh("rc")
        self.emit(f"{r} = llvm.call @{name}({', '.join(args)}) : {sig}")
        return r

    def out_param(self, name: str, args: list[str]) -> str:
        """Call `name(args..., &out)` and load the returned pointer."""
        slot = self.alloca("!llvm.ptr")
        self.call(name, args + [slot])
        r = self.fresh("p")
        self.emit(f"{r} = llvm.load {slot} : !llvm.ptr -> !llvm.ptr")
        return r

    def as_i64(self, ptr: str) -> str:
        r = self.fresh("i")
        self.emit(f"{r} = llvm.ptrtoint {ptr} : !llvm.ptr to i64")
        return r

    def boxed(self, value_i64: str) -> str:
        """A heap StableIValue holding `value` (the stable ABI's present optional); as i64."""
        box = self.out_param("torch_new_stable_ivalue", [])
        self.emit(f"llvm.store {value_i64}, {box} : i64, !llvm.ptr")
        return self.as_i64(box)

    def stable_list(self, items_i64: list[str]) -> str:
        n = self.const_i64(len(items_i64))
        lst = self.out_param("torch_new_list_reserve_size", [n])
        for item in items_i64:
            self.call("torch_list_push_back", [lst, item])
        return self.as_i64(lst)

    def index_to_i64(self, v: str) -> str:
        r = self.fresh("i")
        self.emit(f"{r} = arith.index_cast {v} : index to i64")
        return r

    def i64_array(self, values: list[str]) -> str:
        n = max(len(values), 1)
        arr = self.alloca(f"!llvm.array<{n} x i64>")
        for d, v in enumerate(values):
            g = self.fresh("g")
            self.emit(f"{g} = llvm.getelementptr {arr}[0, {d}] : (!llvm.ptr) -> !llvm.ptr, !llvm.array<{n} x i64>")
            self.emit(f"llvm.store {v}, {g} : i64, !llvm.ptr")
        return arr

    def wrap(self, buf: str, memref_type: ir.MemRefType) -> str:
        """A new ATen tensor handle over the memref's buffer (no copy)."""
        rank = memref_type.rank
        elem = str(memref_type.element_type)
        base, off = self.fresh("base"), self.fresh("off")
        sizes = [self.fresh("sz") for _ in range(rank)]
        strides = [self.fresh("st") for _ in range(rank)]
        results = ", ".join([base, off, *sizes, *strides])
        types = ", ".join([f"memref<{elem}>"] + ["index"] * (1 + 2 * rank))
        self.emit(f"{results} = memref.extract_strided_metadata {buf} : {memref_type} -> {types}")
        aligned = self.fresh("ptr")
        self.emit(f"{aligned} = memref.extract_aligned_pointer_as_index {buf} : {memref_type} -> index")
        # The element offset folded into the pointer: storage_offset stays 0.
        elt_bytes = max(memref_type.element_type.width // 8, 1)  # i1 is stored as one byte
        step = self.fresh("b")
        self.emit(f"{step} = arith.constant {elt_bytes} : index")
        off_bytes, addr = self.fresh("ob"), self.fresh("addr")
        self.emit(f"{off_bytes} = arith.muli {off}, {step} : index")
        self.emit(f"{addr} = arith.addi {aligned}, {off_bytes} : index")
        ptr = self.fresh("p")
        self.emit(f"{ptr} = llvm.inttoptr {self.index_to_i64(addr)} : i64 to !llvm.ptr")
        dims = self.i64_array([self.index_to_i64(s) for s in sizes])
        strs = self.i64_array([self.index_to_i64(s) for s in strides])
        zero32 = self.const_i32(0)
        return self.out_param(
            "aoti_torch_create_tensor_from_blob",
            [ptr, self.const_i64(rank), dims, strs, self.const_i64(0), self.const_i32(_DTYPE_CODES[elem]), zero32, zero32],
        )


def _dtype_of(t: ir.Type) -> str:
    elem = str(ir.ShapedType(t).element_type)
    if elem not in _DTYPE_CODES:
        raise NotImplementedError(elem)
    return elem


def _input_memref_type(t: ir.Type) -> ir.MemRefType:
    """Fully dynamic strided layout: any buffer (a slice, a transposed view) can be passed."""
    t = ir.RankedTensorType(t)
    dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
    layout = ir.StridedLayoutAttr.get(dynamic, [dynamic] * t.rank)
    return ir.MemRefType.get(t.shape, t.element_type, layout, loc=ir.Location.unknown())


def _result_memref_type(t: ir.Type) -> ir.MemRefType:
    t = ir.RankedTensorType(t)
    return ir.MemRefType.get(t.shape, t.element_type, loc=ir.Location.unknown())


def _string_global(globals_: list[str], text: str, name: str) -> str:
    data = text.encode() + b"\0"
    escaped = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}" for c in data)
    globals_.append(f'llvm.mlir.global internal constant @{name}("{escaped}") : !llvm.array<{len(data)} x i8>\n')
    return name


def _helper_text(op: ir.Operation, fn_name: str, globals_: list[str], channels_last: bool = False) -> str:
    """The helper's MLIR text; `channels_last`: its one result is returned as an NHWC buffer,
    which the ATen result (channels-last itself) is copied into in memory order."""
    callee = ir.StringAttr(op.attributes["callee"]).value
    overload = ir.StringAttr(op.attributes["overload"]).value
    args = list(ir.ArrayAttr(op.attributes["args"]))
    schema = torch._C._get_schema(callee, overload)
    in_types = [_input_memref_type(v.type) for v in op.operands]
    out_types = [_result_memref_type(_nhwc(r.type) if channels_last else r.type) for r in op.results]
    for t in list(op.operands) + list(op.results):
        _dtype_of(t.type)

    e = _Emitter()
    given = [t.has_static_shape for t in out_types]  # destinations the caller passes
    params = ", ".join([f"%a{i}: {t}" for i, t in enumerate(in_types)]
                       + [f"%d{j}: {t}" for j, t in enumerate(out_types) if given[j]])
    returned = [t for t, g in zip(out_types, given) if not g]
    results = ", ".join(str(t) for t in returned)
    header = f"func.func private @{fn_name}({params}) -> ({results}) {{"

    handles = [e.wrap(f"%a{i}", t) for i, t in enumerate(in_types)]

    def encode(a: ir.Attribute, kind) -> str:
        optional = isinstance(kind, torch.OptionalType)
        inner = kind.getElementType() if optional else kind
        if is_none(a):
            return e.const_i64(0)
        if is_operand_ref(a):
            value = e.as_i64(handles[a.value])
        elif isinstance(a, ir.BoolAttr):
            value = e.const_i64(int(a.value))
        elif isinstance(a, ir.IntegerAttr):
            value = e.const_i64(a.value)
        elif isinstance(a, ir.FloatAttr):
            value = e.const_i64(struct.unpack("<q", struct.pack("<d", a.value))[0])
        elif isinstance(a, ir.DenseI64ArrayAttr):
            value = e.stable_list([e.const_i64(v) for v in a])
        elif isinstance(a, ir.ArrayAttr):
            element = inner.getElementType()
            value = e.stable_list([encode(x, element) for x in a])
        elif isinstance(a, ir.StringAttr):
            g = _string_global(globals_, a.value, f"{fn_name}_str{len(globals_)}")
            ptr = e.fresh("s")
            e.emit(f"{ptr} = llvm.mlir.addressof @{g} : !llvm.ptr")
            value = e.as_i64(e.out_param("torch_new_string_handle", [ptr, e.const_i64(len(a.value.encode()))]))
        else:
            raise NotImplementedError(str(a))
        return e.boxed(value) if optional else value

    stack_values = [encode(a, s.type) for a, s in zip(args, schema.arguments)]
    depth = max(len(stack_values), len(out_types), 1)
    stack = e.alloca(f"!llvm.array<{depth} x i64>")
    for i, v in enumerate(stack_values):
        g = e.fresh("g")
        e.emit(f"{g} = llvm.getelementptr {stack}[0, {i}] : (!llvm.ptr) -> !llvm.ptr, !llvm.array<{depth} x i64>")
        e.emit(f"llvm.store {v}, {g} : i64, !llvm.ptr")
    name_g = _string_global(globals_, callee, f"{fn_name}_callee")
    overload_g = _string_global(globals_, overload, f"{fn_name}_overload")
    pn, po = e.fresh("s"), e.fresh("s")
    e.emit(f"{pn} = llvm.mlir.addressof @{name_g} : !llvm.ptr")
    e.emit(f"{po} = llvm.mlir.addressof @{overload_g} : !llvm.ptr")
    rc = e.call("torch_call_dispatcher", [pn, po, stack, e.const_i64(_DISPATCHER_VERSION)])
    ok = e.fresh("ok")
    e.emit(f"{ok} = llvm.icmp \"eq\" {rc}, {e.const_i32(0)} : i32")
    e.emit(f"scf.if {ok} {{")
    e.emit("} else {")
    e.emit(f"  llvm.call @tidal_report_aten_error({pn}) : (!llvm.ptr) -> ()")
    e.emit("}")

    outs = []
    for j, t in enumerate(out_types):
        g, h = e.fresh("g"), e.fresh("h")
        e.emit(f"{g} = llvm.getelementptr {stack}[0, {j}] : (!llvm.ptr) -> !llvm.ptr, !llvm.array<{depth} x i64>")
        e.emit(f"{h} = llvm.load {g} : !llvm.ptr -> !llvm.ptr")
        dynamic = [d for d in range(t.rank) if t.is_dynamic_dim(d)]
        dims = []
        if dynamic:
            # Sizes ATen chose (a failed call allocates empty dims: its results are never read).
            dims = [e.fresh("d") for _ in dynamic]
            e.emit(f"{', '.join(dims)} = scf.if {ok} -> ({', '.join(['index'] * len(dims))}) {{")
            sizes = e.out_param("aoti_torch_get_sizes", [h])
            got = []
            for d in dynamic:
                p, v = e.fresh("g"), e.fresh("n")
                e.emit(f"{p} = llvm.getelementptr {sizes}[{d}] : (!llvm.ptr) -> !llvm.ptr, i64")
                e.emit(f"{v} = llvm.load {p} : !llvm.ptr -> i64")
                idx = e.fresh("d")
                e.emit(f"{idx} = arith.index_cast {v} : i64 to index")
                got.append(idx)
            e.emit(f"scf.yield {', '.join(got)} : {', '.join(['index'] * len(got))}")
            e.emit("} else {")
            zero = e.fresh("z")
            e.emit(f"{zero} = arith.constant 0 : index")
            e.emit(f"scf.yield {', '.join([zero] * len(dims))} : {', '.join(['index'] * len(dims))}")
            e.emit("}")
        if given[j]:
            buf = f"%d{j}"
        else:
            buf = e.fresh("out")
            e.emit(f"{buf} = memref.alloc({', '.join(dims)}) : {t}")
            outs.append(buf)
        e.emit(f"scf.if {ok} {{")
        if channels_last:  # NCHW sizes over the NHWC buffer: ATen's channels-last strides
            view, view_type = e.fresh("nchw"), _nchw_view_type(t)
            e.emit(f"{view} = memref.transpose {buf} (d0, d1, d2, d3) -> (d0, d3, d1, d2) : {t} to {view_type}")
            dst = e.wrap(view, view_type)
        else:
            dst = e.wrap(buf, t)
        e.call("aoti_torch_copy_", [dst, h, e.const_i32(0)])
        e.call("aoti_torch_delete_tensor_object", [dst])
        e.call("aoti_torch_delete_tensor_object", [h])
        e.emit("}")
    e.emit(f"return {', '.join(outs)} : {results}" if outs else "return")
    return "\n".join([header, *e.prologue, *e.lines, "}"]) + "\n"


_NCHW_TO_NHWC, _NHWC_TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _nhwc(t: ir.Type) -> ir.RankedTensorType:
    t = ir.RankedTensorType(t)
    return ir.RankedTensorType.get([t.shape[d] for d in _NCHW_TO_NHWC], t.element_type, loc=ir.Location.unknown())


def _nchw_view_type(nhwc: ir.MemRefType) -> ir.MemRefType:
    """The type of an NHWC buffer seen with NCHW sizes (channels-last strides)."""
    n, h, w, c = nhwc.shape
    layout = ir.StridedLayoutAttr.get(0, [h * w * c, 1, w * c, c])
    return ir.MemRefType.get([n, c, h, w], nhwc.element_type, layout, loc=ir.Location.unknown())


def _channels_last_convolution(op: ir.Operation) -> bool:
    """A 2-D f32 convolution of static shapes: oneDNN runs it channels-last about twice as fast
    as on NCHW tensors (it reorders those to blocked formats and back on every call: [8, 32, 32,
    32] with a 3x3 kernel, 1 thread: 1.68 ms NCHW, 0.72 ms NHWC), and the transposes to and from
    NHWC are generics that elementwise fusion folds into the ops around the call."""
    if ir.StringAttr(op.attributes["callee"]).value != "aten::convolution" or len(op.results) != 1:
        return False
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    args = list(ir.ArrayAttr(op.attributes["args"]))
    input_, weight, transposed = args[0], args[1], args[6]
    if not (is_operand_ref(input_) and is_operand_ref(weight) and isinstance(transposed, ir.BoolAttr)) or transposed.value:
        return False
    types = [ir.RankedTensorType(t) for t in (op.operands[input_.value].type, op.operands[weight.value].type, op.results[0].type)]
    return all(t.rank == 4 and t.has_static_shape and str(t.element_type) == "f32" for t in types)


@CPU_CALL.rule(ATEN_CALL)
def lower_aten_call(op: ir.Operation, fn_name: str, globals_: list[str]) -> str:
    """Replace `op` by a call of the helper `fn_name`; returns the helper's MLIR text. A
    convolution runs channels-last (`_channels_last_convolution`): its input and weight are
    handed over as NHWC buffers seen with NCHW sizes, its result comes back as an NHWC buffer."""
    from torch_mlir.dialects import memref

    channels_last = _channels_last_convolution(op)
    text = _helper_text(op, fn_name, globals_, channels_last)
    args = list(ir.ArrayAttr(op.attributes["args"]))
    to_nhwc = {args[0].value, args[1].value} if channels_last else set()
    with ir.InsertionPoint(op), op.location:
        buffers = []
        for i, v in enumerate(op.operands):
            if i in to_nhwc:
                nhwc = permuted(v, _NCHW_TO_NHWC)
                buf = bufferization.ToBufferOp(_result_memref_type(nhwc.type), nhwc, read_only=True).result
                view = memref.TransposeOp(_nchw_view_type(buf.type), buf, ir.AffineMap.get_permutation(_NHWC_TO_NCHW)).result
                buffers.append(memref.CastOp(_input_memref_type(v.type), view).result)
            else:
                buffers.append(bufferization.ToBufferOp(_input_memref_type(v.type), v, read_only=True).result)
        result_types = [_nhwc(r.type) if channels_last else r.type for r in op.results]
        memref_types = [_result_memref_type(t) for t in result_types]
        dests = [memref.AllocOp(m, [], []).result for m in memref_types if m.has_static_shape]
        call = func.CallOp([m for m in memref_types if not m.has_static_shape], ir.FlatSymbolRefAttr.get(fn_name),
                           buffers + dests)
        given, returned = iter(dests), iter(call.results)
        tensors = [
            bufferization.ToTensorOp(t, next(given) if m.has_static_shape else next(returned), restrict=True, writable=True).result
            for t, m in zip(result_types, memref_types)
        ]
        if channels_last:
            tensors = [permuted(t, _NHWC_TO_NCHW) for t in tensors]
    for old, new in zip(op.results, tensors):
        old.replace_all_uses_with(new)
    op.erase()
    return text


HELPER_PREFIX = "tidal_aten_call_"


def _producer(v: ir.Value):
    return v.owner.operation if isinstance(v, ir.OpResult) else None


# Ops between an operand's `to_buffer` and the helper call: a convolution's NCHW view of an NHWC buffer.
_BUFFER_VIEWS = ("memref.transpose", "memref.cast")


@tidal_pass("tidal-anchor-aten-buffers",
            "Give each ATen helper call its operands' to_buffer right before it (run just before One-Shot bufferization)")
def anchor_aten_buffers(module_op):
    """One-Shot bufferization sees a tensor read at its `to_buffer`, not where the buffer is used.
    `to_buffer` is a pure op, so loop-invariant code motion hoists the one of a loop-invariant
    operand out of the loop (and cse merges equal ones): a loop body's later in-place writes may
    then reuse that tensor's buffer while the call inside the loop still reads it. A
    `torch.arange` index of an `index_put` in a `while_loop` shared its buffer with a `tok + 1`
    computed after it in the body (both written into one `tensor.empty`), and ATen saw `tok + 1`
    as the index. Each call gets its own `to_buffer` (and views) right before it, so One-Shot sees
    the read where it happens."""
    for call in ops_named(module_op, ("func.call",)):
        if not ir.FlatSymbolRefAttr(call.attributes["callee"]).value.startswith(HELPER_PREFIX):
            continue
        for i, v in enumerate(list(call.operands)):
            chain, op = [], _producer(v)
            while op is not None and op.name in _BUFFER_VIEWS:
                chain.append(op)
                op = _producer(op.operands[0])
            if op is None or op.name != "bufferization.to_buffer":
                continue
            chain.append(op)
            value = None
            for old in reversed(chain):
                new = old.clone(ir.InsertionPoint(call))
                if value is not None:
                    new.operands[0] = value
                value = new.results[0]
            call.operands[i] = value
            for old in chain:
                if not list(old.results[0].uses):
                    old.erase()


@tidal_pass("tidal-aten-calls-to-runtime", "Lower tidal.aten_call to calls into ATen's dispatcher (CPU, before bufferization)")
def aten_calls_to_runtime(module_op):
    calls: list[ir.Operation] = []

    def visit(op):
        if op.name == ATEN_CALL:
            calls.append(op.operation)
        return ir.WalkResult.ADVANCE

    module_op.walk(visit)
    calls = [op for op in calls if not bmm_as_batch_matmul(op)]
    if not calls:
        return
    helpers, globals_ = [], []
    for k, op in enumerate(calls):
        helpers.append(CPU_CALL.rule_for(op)(op, f"{HELPER_PREFIX}{k}", globals_))
    text = _PRELUDE + "".join(_decl(n, s) for n, s in _DECLS.items()) + "".join(globals_) + "".join(helpers)
    body = module_op.regions[0].blocks[0]
    parsed = ir.Module.parse(text)
    first = body.operations[0] if len(body.operations) else None
    for new in list(parsed.body.operations):
        if first is not None:
            new.operation.move_before(first)
        else:
            new.operation.move_before(body.operations[0])
