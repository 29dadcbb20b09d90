"""The host plan of a GPU program: each op of the lowered function becomes a step, a closure that
reads its operands from an environment and writes its results.

`linalg.generic` becomes a Triton kernel (`kernels.py`); an elementwise `tidal.associative_scan`
becomes one `tt.scan` kernel, its whole length on the device; a `while` with an elementwise body
and a 0-d condition is one kernel with the loop inside. Matmul-likes, views, slices,
concatenation and allocation are ATen calls on the same stream (cuBLAS for the matmuls). The other
control-flow ops run as host loops launching their bodies' steps: `scan` and `map` know their trip
count and never synchronize; any other `while` reads its predicate once per iteration and a `cond`
whose branches are not elementwise reads its predicate once (elementwise ones became selects
before the plan).

The plan is built once per program (`PlanBuilder`); which kernel variant a step launches is
`variants.py`, how it launches and reads on the host is `launch.py`.
"""

from __future__ import annotations

import re

import torch
from torch_mlir import ir

from tidal.backends.gpu import kernels as K
from tidal.backends.gpu.launch import _launch, _NeedsTheHost, _operand_args
from tidal.backends.gpu.row_scan import row_scan_kernel
from tidal.backends.gpu.ttir import element_type
from tidal.backends.gpu.variants import (REDUCE_BLOCK, REDUCE_PROGRAMS, REDUCE_TILE, REDUCE_WARPS, _cdiv, _dense, _layout, dense_like,
                                         _lookback_window, _next_pow2, _prod, _ScanPlan, _variant_name, _Variants)
from tidal.conversion.batching import Unbatchable, batched_function
from tidal.diagnostics import TidalError, TidalUnsupported


_DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
           "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "i1": torch.bool,
           "ui8": torch.uint8}
_DYNAMIC = -(2**63)


def _tensor_type(value) -> ir.RankedTensorType:
    return ir.RankedTensorType(value.type)


def _dtype(value) -> torch.dtype:
    return _DTYPES[element_type(_tensor_type(value).element_type)]


class _Plan:
    """Steps of one block: each `step(env)` reads its operands from `env` and writes its results."""

    def __init__(self, builder: PlanBuilder, block: ir.Block):
        self.steps = []
        self.ops = []
        self.yielded: list = []
        for op in block.operations:
            if op.operation.name in ("tidal.yield", "linalg.yield", "func.return", "scf.yield"):
                self.yielded = list(op.operands)
                continue
            if absorbed_by_scans(op):  # computed inside the scan kernels reading it
                continue
            self.steps.append(builder.step_for(op))
            self.ops.append(op)

    def run(self, env: dict, args: list | None = None, block: ir.Block | None = None) -> list:
        if args is not None:
            for a, v in zip(block.arguments, args):
                env[a] = v
        try:
            for step in self.steps:
                step(env)
        except _NeedsTheHost as exc:
            if exc.op is None:  # the innermost plan names the op that reads
                exc.op = self.ops[self.steps.index(step)]
            raise
        return [env[v] for v in self.yielded]


def _slices(offsets, sizes, strides):
    return tuple(slice(o, o + (s - 1) * st + 1, st) if s > 0 else slice(o, o) for o, s, st in zip(offsets, sizes, strides))


class PlanBuilder:
    """Makes the step of each op (`step_for`) and keeps every kernel it made (`kernels`, what
    --emit prints). Steps launch kernels and read device values on the host through the two
    callables of the call running them (`launch.Launcher`): `compiled(kernel)` for the GPU this
    call runs on, `on_host(value)` knowing the values the call's arguments came from."""

    def __init__(self, module: ir.Module, compiled, on_host):
        self.module = module  # its resources hold the dense_resource constants
        self.compiled, self._on_host = compiled, on_host
        self._resources = None
        self._kernel_count = 0
        self.kernels: list = []  # every Kernel made, in order: what --emit prints
        self.step_by_step: list = []  # (location, why) of each scan run one step at a time

    # -- helpers -----------------------------------------------------------------------------------

    def take(self, kernel, op):
        """`kernel`, made for `op`, checked by Triton's parser and verifier before anything
        launches it: an invalid kernel is the op's TidalUnsupported (a located fallback, or the
        strict mode's error), never a crash of a call. Listed for --emit."""
        from tidal.backends.gpu.triton_compile import kernel_errors

        kernel.location = op.location
        errors = kernel_errors(kernel)
        if errors is not None:
            raise TidalUnsupported(f"GPU backend: the kernel made for '{op.operation.name}' is not valid Triton IR "
                                   f"({errors.splitlines()[0]}); please report it with the program", op.location)
        self.kernels.append(kernel)
        return kernel

    def _new_kernel_name(self, what: str) -> str:
        self._kernel_count += 1
        return f"tidal_{what}_{self._kernel_count}"

    def _shape(self, value, dynamic_operands, env) -> list[int]:
        dyn = iter(dynamic_operands)
        return [int(self._on_host(env[next(dyn)])) if s == _DYNAMIC else s for s in _tensor_type(value).shape]

    @staticmethod
    def _static(op, name):
        return list(ir.DenseI64ArrayAttr(op.attributes[name]))

    def _mixed(self, static, dynamic_values, env):
        """Static offsets/sizes/strides with the dynamic ones read from `env`."""
        dyn = iter(dynamic_values)
        return [int(self._on_host(env[next(dyn)])) if v == _DYNAMIC else v for v in static]

    def _constant_array(self, attr, value):
        import numpy as np

        t = _tensor_type(value)
        shape = list(t.shape)
        dtype = _dtype(value)
        if isinstance(attr, ir.DenseElementsAttr):
            dense = ir.DenseElementsAttr(attr)
            if dense.is_splat:
                text = str(attr).split("dense<", 1)[1].split(">", 1)[0]
                scalar = _scalar_literal(f"{text} : {element_type(t.element_type)}")
                return lambda device: torch.full(shape, scalar, dtype=dtype, device=device)
            array = np.array(dense)
            return lambda device: torch.from_numpy(array.copy()).reshape(shape).to(device)
        # dense_resource<name>: the blob is in the module's resources (4 bytes of alignment first)
        name = str(attr).split("dense_resource<", 1)[1].split(">", 1)[0]
        if self._resources is None:
            self._resources = dict(re.findall(r'^\s*([\w.]+): "0x([0-9A-Fa-f]*)"', str(self.module), re.M))
        blob = bytes.fromhex(self._resources[name])[4:]
        host = torch.frombuffer(bytearray(blob), dtype=dtype).reshape(shape).clone()
        return lambda device: host.to(device)

    # -- ops -----------------------------------------------------------------------------------------

    def _op_arith_constant(self, op):
        attr, result = op.attributes["value"], op.results[0]
        if isinstance(result.type, ir.RankedTensorType):
            make = self._constant_array(attr, result)
            cache: dict = {}

            def step(env):
                device = torch.cuda.current_device()
                if device not in cache:
                    cache[device] = make(torch.device("cuda", device))
                env[result] = cache[device]

            return step
        value = _scalar_literal(str(attr))
        return lambda env: env.__setitem__(result, value)

    def _op_tensor_empty(self, op):
        result = op.results[0]
        dtype = _dtype(result)
        dyn = list(op.operands)
        return lambda env: env.__setitem__(result, torch.empty(self._shape(result, dyn, env), dtype=dtype, device="cuda"))

    def _op_linalg_fill(self, op):
        value, out, result = op.operands[0], op.operands[1], op.results[0]
        if _folded_fill_literal(result) is not None:
            return lambda env: None  # the reductions it initializes fold the constant in their kernel
        return lambda env: env.__setitem__(result, torch.full(env[out].shape, env[value], dtype=env[out].dtype, device=env[out].device))

    def _split_reduction(self, op):
        """A generic folding each out with one combiner: partials over many programs, folded by
        the last program of each row block (a full sum of 16M elements is not one lane's loop)."""
        g = op.opview
        ins, outs, results = list(g.inputs), list(g.outputs), list(op.results)
        operands = [*ins, *outs]
        inits = [_folded_fill_literal(o) for o in outs]
        dtypes = [_dtype(o) for o in outs]
        probe = K.GenericBody(op, "probe")
        parallel, reduction, dim_sources = probe.parallel, probe.reduction, probe.dim_sources()
        captured, captured_scalar = probe.captured, probe.captured_scalar
        flat_reads = probe.flat_reads()
        name = self._new_kernel_name("reduce")
        def make(bp, br, flat, aligned):
            kernel = K.split_reduction_kernel(op, _variant_name(f"{name}_{bp}x{br}", flat, aligned), bp, br, flat, aligned,
                                              inits)[0]
            kernel.num_warps = REDUCE_WARPS
            return kernel

        variants = _Variants(self, op, make)

        def blocks(rows: int, red: int) -> tuple[int, int]:
            """Two row tiles per reduction size, not one per power of two of the rows: a batched
            combine meets a new row count at every level of its scan, and each variant is a
            compile (a [1000, 6, 4] scan compiled 10 of them for one reduction)."""
            block_r = min(_next_pow2(max(red, 1)), REDUCE_BLOCK)
            full = max(1, REDUCE_TILE // block_r)
            return (full if rows >= full else min(full, SMALL_ROW_TILE)), block_r

        # build a kernel now, so Triton verifies it before any call and --emit shows it
        sizes = [_static_or_typical(_tensor_type(operands[k]).shape[r]) for k, r in dim_sources]
        red = _prod(sizes[d] for d in reduction)
        variants.kernel((*blocks(_prod(sizes[d] for d in parallel), red), *_layout(flat_reads, [], red)))
        arrivals: dict = {}  # (device, row blocks) -> zeroed counters, which the last arrival zeroes again

        def out_shape(env, o):
            return env[o].shape if env.get(o) is not None else env[o.owner.operands[1]].shape  # a folded fill's out

        def step(env):
            tensors = [env[v] for v in ins]
            shapes = [t.shape for t in tensors] + [out_shape(env, o) for o in outs]
            sizes = [shapes[k][r] for k, r in dim_sources]
            rows, red = _prod(sizes[d] for d in parallel), _prod(sizes[d] for d in reduction)
            if red == 0 or rows == 0:
                for r, o, lit, dtype in zip(results, outs, inits, dtypes):
                    init = env[o] if lit is None else torch.full(out_shape(env, o), env[o.owner.operands[0]], dtype=dtype, device="cuda")
                    env[r] = init.clone()
                return
            key = (*blocks(rows, red), *_layout(flat_reads, tensors, red))
            programs_p = _cdiv(rows, key[0])
            splits = max(1, min(_cdiv(red, key[1]), _cdiv(REDUCE_PROGRAMS, programs_p)))
            per_split = _cdiv(_cdiv(red, splits), key[1]) * key[1]
            splits = max(1, _cdiv(red, per_split))
            device = tensors[0].device if tensors else torch.device("cuda", torch.cuda.current_device())
            parts = [torch.empty(rows, splits, dtype=dtype, device=device) for dtype in dtypes]
            init_args = [env[o].reshape(rows).contiguous() for o, lit in zip(outs, inits) if lit is None]
            res = [torch.empty(rows, dtype=dtype, device=device) for dtype in dtypes]
            counters = arrivals.get((device, programs_p))
            if counters is None:
                counters = arrivals[(device, programs_p)] = torch.zeros(programs_p, dtype=torch.int32, device=device)
            args = _operand_args(tensors, captured, captured_scalar, env, self._on_host)
            args += [*parts, *init_args, *res, counters, *sizes, rows, red, per_split, splits]
            _launch(variants.compiled(key), (programs_p, splits, 1), args, op)
            for r, o, total in zip(results, outs, res):
                env[r] = total.reshape(out_shape(env, o))

        return step

    def _op_linalg_generic(self, op):
        if not list(op.opview.outputs):
            # torch-mlir's index-bounds check of a gather/index_select: a generic with no outputs
            # whose body only asserts, which kernels drop (run_body): nothing runs on the device.
            return lambda env: None
        if K.split_combiners(op) is not None:
            return self._split_reduction(op)
        name = self._new_kernel_name("generic")
        launch = K.generic_kernel(op, name)  # what every variant launches with
        variants = _Variants(self, op, lambda flat, aligned: K.generic_kernel(op, _variant_name(name, flat, aligned), flat, aligned).kernel)
        g = op.opview
        ins, outs, results = list(g.inputs), list(g.outputs), list(op.results)
        operands = [*ins, *outs]
        block = launch.block
        slots = [_concat_slot(r) for r in results]
        # build the kernel now: --emit shows it (the multiple-of-16 promise only at static shapes)
        out_type = _tensor_type(outs[0])
        flat, aligned = _layout(launch.flat_reads, [], _prod(out_type.shape))
        variants.kernel((flat, aligned and out_type.has_static_shape))

        def step(env):
            tensors = [env[v] for v in operands]
            sizes = [tensors[k].shape[r] for k, r in launch.dim_sources]
            # elementwise: results in the inputs' dim order, so a transposed chain stays flat
            identity_ins = [t for t, reads in zip(tensors[: len(ins)], launch.flat_reads or ()) if reads]
            res = [dense_like(env[o].shape, env[o].dtype, env[o].device, identity_ins) for o in outs]
            for j, slot in enumerate(slots):
                if slot is not None:
                    res[j] = _concat_slot_view(env, *slot, res[j])
            args = _operand_args(tensors[: len(ins)], launch.captured, launch.captured_scalar, env, self._on_host)
            for j, reads in enumerate(launch.reads_init):
                if reads:
                    t = tensors[len(ins) + j]
                    args += [t, *t.stride()]
            for r in res:
                args += [r, *r.stride()]
            numel = _prod(sizes[d] for d in launch.parallel_dims)
            args += [*sizes, numel]
            if numel > 0:
                written = [tensors[len(ins) + j] if reads else r for j, (reads, r) in enumerate(zip(launch.reads_init, res))]
                key = _layout(launch.flat_reads, [*tensors[: len(ins)], *written], numel, any_dense_order=True)
                _launch(variants.compiled(key), (_cdiv(numel, block), 1, 1), args, op)
            for r, t in zip(results, res):
                env[r] = t

        return step

    def _op_linalg_matmul(self, op):
        a, bmat, init = op.operands
        result = op.results[0]
        return lambda env: env.__setitem__(result, torch.addmm(env[init], env[a], env[bmat]))

    def _op_linalg_batch_matmul(self, op):
        a, bmat, init = op.operands
        result = op.results[0]
        return lambda env: env.__setitem__(result, torch.baddbmm(env[init], env[a], env[bmat]))

    def _op_linalg_matvec(self, op):
        a, x, init = op.operands
        result = op.results[0]
        return lambda env: env.__setitem__(result, torch.addmv(env[init], env[a], env[x]))

    def _op_linalg_transpose(self, op):
        src, result = op.operands[0], op.results[0]
        perm = self._static(op, "permutation")
        return lambda env: env.__setitem__(result, env[src].permute(perm))

    def _op_linalg_broadcast(self, op):
        src, init, result = op.operands[0], op.operands[1], op.results[0]
        dims = sorted(self._static(op, "dimensions"))

        def step(env):
            t = env[src]
            for d in dims:  # the result's dims the input lacks
                t = t.unsqueeze(d)
            env[result] = t.expand(env[init].shape)

        return step

    def _op_linalg_copy(self, op):
        src, result = op.operands[0], op.results[0]
        return lambda env: env.__setitem__(result, env[src].clone())

    def _op_tensor_expand_shape(self, op):
        """A view: the result's sizes are its static ones and, for each dynamic one, an operand."""
        src, result = op.operands[0], op.results[0]
        static, dynamic = self._static(op, "static_output_shape"), list(op.operands)[1:]
        return lambda env: env.__setitem__(result, env[src].reshape(self._mixed(static, dynamic, env)))

    def _op_tensor_collapse_shape(self, op):
        """A view (a copy only where the source's strides cannot be merged): each result dim is
        the product of its group of source dims."""
        src, result = op.operands[0], op.results[0]
        groups = [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]

        def step(env):
            t = env[src]
            env[result] = t.reshape([_prod(t.shape[d] for d in g) for g in groups])

        return step

    def _op_tensor_reshape(self, op):
        """A view to sizes given as a 1-d tensor: read where they were made on the host (a
        `tensor.from_elements` of sizes) without a device round trip; else read back once."""
        src, sizes, result = op.operands[0], op.operands[1], op.results[0]
        owner = sizes.owner
        if not isinstance(owner, ir.Block) and owner.operation.name == "tensor.from_elements":
            elems = list(owner.operands)
            return lambda env: env.__setitem__(result, env[src].reshape([int(self._on_host(env[e])) for e in elems]))

        def step(env):
            if torch.cuda.is_current_stream_capturing():
                raise _NeedsTheHost
            env[result] = env[src].reshape([int(v) for v in env[sizes].tolist()])

        return step

    def _op_tensor_cast(self, op):
        src, result = op.operands[0], op.results[0]
        return lambda env: env.__setitem__(result, env[src])

    def _slice_parts(self, op, first_dynamic: int):
        """Per group (offsets, sizes, strides) of an extract/insert_slice: its static values (read
        once, not per call) and its dynamic operands."""
        dynamic = list(op.operands)[first_dynamic:]
        parts = []
        for name in ("static_offsets", "static_sizes", "static_strides"):
            static = self._static(op, name)
            count = sum(1 for v in static if v == _DYNAMIC)
            parts.append((static, dynamic[:count]))
            dynamic = dynamic[count:]
        return parts

    def _slices_of(self, parts, env):
        return _slices(*[self._mixed(static, dyn, env) for static, dyn in parts])

    def _op_tensor_extract_slice(self, op):
        src, result = op.operands[0], op.results[0]
        parts = self._slice_parts(op, 1)
        result_shape = list(_tensor_type(result).shape)

        def step(env):
            view = env[src][self._slices_of(parts, env)]
            if view.dim() != len(result_shape):  # rank-reducing: drop the unit dims the result lacks
                sizes = self._mixed(*parts[1], env)
                view = view.reshape(result_shape if _DYNAMIC not in result_shape else [s for s in sizes if s != 1])
            env[result] = view

        return step

    def _op_tensor_insert_slice(self, op):
        src, dest, result = op.operands[0], op.operands[1], op.results[0]
        parts = self._slice_parts(op, 2)

        def step(env):
            out = env[dest].clone()
            view = out[self._slices_of(parts, env)]
            view.copy_(env[src].reshape(view.shape))
            env[result] = out

        return step

    def _op_tensor_extract(self, op):
        src, indices, result = op.operands[0], list(op.operands)[1:], op.results[0]
        def step(env):
            index = tuple(int(self._on_host(env[i])) for i in indices)
            env[result] = self._on_host(env[src][index] if index else env[src])  # a 0-d argument itself: its host value

        return step

    def _op_tensor_from_elements(self, op):
        elems, result = list(op.operands), op.results[0]
        dtype, shape = _dtype(result), list(_tensor_type(result).shape)
        if all(u.owner.name == "tensor.reshape" and u.operand_number == 1 for u in result.uses):
            return lambda env: None  # sizes the reshapes read on the host (`_op_tensor_reshape`)
        def step(env):
            if torch.cuda.is_current_stream_capturing():
                raise _NeedsTheHost  # a copy from host memory
            env[result] = torch.tensor([env[e] for e in elems], dtype=dtype, device="cuda").reshape(shape)

        return step

    def _op_tensor_concat(self, op):
        """torch.cat, its result in the dim order of its largest part: a shifted [T, B, D] view of
        a [B, T, D] buffer stays [B, T, D] in memory, laid out as the other operands of the scan
        that reads it (which then reads them all in place, `_in_place_layout`)."""
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        parts, result = list(op.operands), op.results[0]

        def step(env):
            tensors = [env[p] for p in parts]
            written = env.pop((_IN_PLACE, result), None)
            if written is not None:  # a generic wrote its part where it goes (`_concat_slot`)
                out, placed = written
                offset = 0
                for i, t in enumerate(tensors):
                    if i != placed:
                        out.narrow(dim, offset, t.shape[dim]).copy_(t)
                    offset += t.shape[dim]
                env[result] = out
                return
            order = _dim_order(max(tensors, key=lambda t: t.numel()))
            if order == sorted(order):
                env[result] = torch.cat(tensors, dim)
                return
            shape = list(tensors[0].shape)
            shape[dim] = sum(t.shape[dim] for t in tensors)
            out = torch.empty([shape[d] for d in order], dtype=tensors[0].dtype, device=tensors[0].device)
            env[result] = torch.cat(tensors, dim, out=out.permute([order.index(d) for d in range(len(order))]))

        return step

    def _op_tensor_dim(self, op):
        src, index, result = op.operands[0], op.operands[1], op.results[0]
        return lambda env: env.__setitem__(result, env[src].shape[int(self._on_host(env[index]))])

    def _op_tidal_aten_call(self, op):
        """The same ATen operator on the CUDA tensors (cuDNN for convolutions), on the current stream."""
        from tidal.dialects.aten_call import is_none, is_operand_ref

        callee = ir.StringAttr(op.attributes["callee"]).value
        overload = ir.StringAttr(op.attributes["overload"]).value or "default"
        packet = getattr(torch.ops.aten, callee.split("::", 1)[1])
        fn = getattr(packet, overload)
        operands, results = list(op.operands), list(op.results)

        def decode(a):
            if is_operand_ref(a):
                return lambda env: env[operands[a.value]]
            if is_none(a):
                return lambda env: None
            if isinstance(a, ir.BoolAttr):
                return lambda env, v=a.value: v
            if isinstance(a, ir.IntegerAttr):
                return lambda env, v=a.value: v
            if isinstance(a, ir.FloatAttr):
                return lambda env, v=a.value: v
            if isinstance(a, ir.StringAttr):
                return lambda env, v=a.value: v
            if isinstance(a, ir.DenseI64ArrayAttr):
                return lambda env, v=list(a): v
            if isinstance(a, ir.ArrayAttr):
                items = [decode(e) for e in a]
                return lambda env: [item(env) for item in items]
            raise TidalUnsupported(f"GPU backend: argument {a} of {callee}", op.location)

        args = [decode(a) for a in ir.ArrayAttr(op.attributes["args"])]
        keywords = [a.name if a.kwarg_only else None for a in fn._schema.arguments]

        def step(env):
            values = [a(env) for a in args]
            out = fn(*[v for v, k in zip(values, keywords) if k is None],
                     **{k: v for v, k in zip(values, keywords) if k is not None})
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            for r, v in zip(results, outs):
                env[r] = v

        return step

    def _op_cf_assert(self, op):
        cond = op.operands[0]
        msg = ir.StringAttr(op.attributes["msg"]).value

        def step(env):
            if not bool(self._on_host(env[cond])):
                raise RuntimeError(msg)

        return step

    # host scalar arithmetic (indices, sizes, extracted values)
    _SCALAR = {
        "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
        "arith.divsi": lambda a, b: int(a / b), "arith.remsi": lambda a, b: a - b * int(a / b),
        "arith.floordivsi": lambda a, b: a // b, "arith.ceildivsi": lambda a, b: -(-a // b),
        "arith.maxsi": max, "arith.minsi": min, "arith.addf": lambda a, b: a + b, "arith.subf": lambda a, b: a - b,
        "arith.mulf": lambda a, b: a * b, "arith.divf": lambda a, b: a / b, "arith.andi": lambda a, b: a & b,
        "arith.ori": lambda a, b: a | b, "arith.xori": lambda a, b: a ^ b, "arith.maximumf": max, "arith.minimumf": min,
        "arith.index_cast": lambda a: a, "arith.index_castui": lambda a: a, "arith.extsi": lambda a: a,
        "arith.extui": lambda a: int(a), "arith.trunci": lambda a: a, "arith.sitofp": float, "arith.fptosi": int,
        "arith.extf": lambda a: a, "arith.truncf": lambda a: a, "arith.negf": lambda a: -a,
        "arith.select": lambda c, a, b: a if c else b,
    }
    _PREDICATES = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule", 8: "ugt", 9: "uge"}
    _COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
                "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
    _FPREDICATES = {1: "eq", 2: "gt", 3: "ge", 4: "lt", 5: "le", 6: "ne", 8: "eq", 9: "gt", 10: "ge", 11: "lt", 12: "le", 13: "ne"}

    def _scalar_op(self, op):
        fn = self._SCALAR[op.operation.name]
        operands, result = list(op.operands), op.results[0]
        if any(isinstance(v.type, ir.RankedTensorType) for v in operands):
            raise TidalUnsupported(f"GPU backend: '{op.operation.name}' on tensors outside linalg", op.location)
        return lambda env: env.__setitem__(result, fn(*[env[v] for v in operands]))

    def _compare(self, op):
        pred = ir.IntegerAttr(op.attributes["predicate"]).value
        table = self._PREDICATES if op.operation.name == "arith.cmpi" else self._FPREDICATES
        kind = table.get(pred)
        if kind is None:
            raise TidalUnsupported(f"GPU backend: predicate {pred} of '{op.operation.name}' on the host", op.location)
        fn = self._COMPARE[kind.lstrip("su") if kind not in ("eq", "ne") else kind]
        a, b, result = op.operands[0], op.operands[1], op.results[0]
        return lambda env: env.__setitem__(result, fn(env[a], env[b]))

    def step_for(self, op):
        """The step running `op` on the host (kernels, ATen calls, host scalar arithmetic)."""
        name = op.operation.name
        handler = getattr(self, "_op_" + name.replace(".", "_"), None)
        if handler is not None:
            try:
                return handler(op)
            except (TidalError, _NeedsTheHost):
                raise
            except Exception as exc:  # noqa: BLE001 - a case the kernel builder does not handle
                # Located at the op (the user's line), so torch.compile falls back naming it and
                # tidal-compile prints FILE:LINE:COL: error.
                raise TidalUnsupported(
                    f"GPU backend: internal error lowering '{name}' ({type(exc).__name__}: {exc})", op.location
                ) from exc
        if name in self._SCALAR:
            return self._scalar_op(op)
        if name in ("arith.cmpi", "arith.cmpf"):
            return self._compare(op)
        raise TidalUnsupported(f"GPU backend: '{name}' is not supported yet", op.location)

    # -- control flow ----------------------------------------------------------------------------------

    def _op_tidal_cond(self, op):
        pred, operands, results = op.operands[0], list(op.operands)[1:], list(op.results)
        blocks = [r.blocks[0] for r in op.regions]
        plans = [_Plan(self, b) for b in blocks]

        def step(env):
            p = env[pred]
            branch = 0 if bool(self._on_host(p)) else 1  # one read
            outs = plans[branch].run(env, [env[v] for v in operands], blocks[branch])
            for r, v in zip(results, outs):
                env[r] = v

        return step

    def _op_tidal_scan(self, op):
        launch = row_scan_kernel(op, lambda: self._new_kernel_name("scan_rows"))
        if not isinstance(launch, str):
            return self._device_row_scan(op, launch)
        self.step_by_step.append((op.location, launch))
        attr = lambda n: ir.IntegerAttr(op.attributes[n]).value  # noqa: E731
        n, k, dim = attr("num_carries"), attr("num_xs"), attr("dim")
        reverse = ir.BoolAttr(op.attributes["reverse"]).value
        operands, results = list(op.operands), list(op.results)
        block = op.regions[0].blocks[0]
        body = _Plan(self, block)

        stacked = [(list(_tensor_type(r).shape), _dtype(r)) for r in results[n:]]
        inner_dynamic = any(s == _DYNAMIC for shape, _ in stacked for i, s in enumerate(shape) if i != dim)

        def step(env):
            carries = [env[v] for v in operands[:n]]
            xs = [env[v] for v in operands[n : n + k]]
            consts = [env[v] for v in operands[n + k :]]
            length = xs[0].shape[dim]
            ys = None
            if length == 0 and inner_dynamic:
                raise TidalUnsupported("GPU backend: a scan of no steps whose per-step outputs have dynamic sizes "
                                       "(the sizes of its empty stacked outputs are unknown)", op.location)
            for i in range(length):
                t = length - 1 - i if reverse else i
                outs = body.run(env, [*carries, *[x.select(dim, t) for x in xs], *consts], block)
                carries = outs[:n]
                if ys is None:  # the per-step outputs' sizes are known from the first step
                    ys = [torch.empty([*v.shape[:dim], length, *v.shape[dim:]], dtype=dtype, device="cuda")
                          for v, (_, dtype) in zip(outs[n:], stacked)]
                for y, v in zip(ys, outs[n:]):
                    y.select(dim, t).copy_(v)
            if ys is None:
                ys = [torch.empty([length if i == dim else s for i, s in enumerate(shape)], dtype=dtype, device="cuda")
                      for shape, dtype in stacked]
            for r, v in zip(results, [*carries, *ys]):
                env[r] = v

        return step

    def _device_row_scan(self, op, launch):
        """The whole time loop in one kernel, one program per block of batch rows (`row_scan`),
        the number of steps T an argument (a dynamic T included)."""
        self.take(launch.kernel, op)
        results = list(op.results)
        n = ir.IntegerAttr(op.attributes["num_carries"]).value
        shapes = [list(_tensor_type(r).shape) for r in results]
        xs0 = op.operands[n]

        def step(env):
            length = env[xs0].shape[0]
            if length == 0:  # no step: the carries are the initial ones, no ys
                for i, r in enumerate(results):
                    env[r] = env[op.operands[i]].clone() if i < n else torch.empty(
                        [0, *shapes[i][1:]], dtype=torch.float32, device="cuda")
                return
            tensors = [env[v].contiguous() for v in launch.operands]
            outs = [torch.empty([length if s == _DYNAMIC else s for s in shape], dtype=torch.float32, device="cuda")
                    for shape in shapes]
            # final carries, then ys, the scratch of programs sharing rows, then T
            scratch = [] if launch.parts == 1 else [
                torch.empty(launch.exchange_floats, dtype=torch.float32, device="cuda"),
                torch.zeros(launch.arrivals, dtype=torch.int32, device="cuda")]
            _launch(self.compiled(launch.kernel), launch.grid, [*tensors, *outs, *scratch, length], op)
            for r, t in zip(results, outs):
                env[r] = t

        return step

    def _batched_plan(self, op, batched: list[bool]):
        """(function, its block, its plan): the block of `op`'s region over a leading batch of the
        arguments marked in `batched` (conversion/batching.py), or None where an op of it has no
        batching rule or its kernel no lowering; the caller then runs the region slice by slice."""
        try:
            with op.context, op.location:
                fn = batched_function(op.regions[0].blocks[0], batched, "batched_region")
            block = fn.regions[0].blocks[0]
            return fn, block, _Plan(self, block)
        except (Unbatchable, TidalUnsupported):
            return None

    def _op_tidal_map(self, op):
        k = ir.IntegerAttr(op.attributes["num_xs"]).value
        operands, results = list(op.operands), list(op.results)
        block = op.regions[0].blocks[0]
        batched = self._batched_plan(op, [i < k for i in range(len(operands))])

        def empty(r):
            return torch.empty([0, *_tensor_type(r).shape[1:]], dtype=_dtype(r), device="cuda")

        if batched is not None:  # the body once, over every row
            fn, batched_block, body = batched

            def step(env):
                if env[operands[0]].shape[0] == 0:
                    outs = [empty(r) for r in results]
                else:
                    outs = body.run(env, [env[v] for v in operands], batched_block)
                for r, o in zip(results, outs):
                    env[r] = o

            step.keep_alive = fn
            return step

        body = _Plan(self, block)

        def step(env):
            xs, consts = [env[v] for v in operands[:k]], [env[v] for v in operands[k:]]
            rows = [body.run(env, [*[x[i] for x in xs], *consts], block) for i in range(xs[0].shape[0])]
            for j, r in enumerate(results):
                env[r] = torch.stack([row[j] for row in rows]) if rows else empty(r)

        return step

    def _op_tidal_while(self, op):
        shape = K.device_while_shape(op)
        if shape is not None:
            return self._device_while(op, shape)
        return self._host_while(op)

    def _device_while(self, op, shape):
        """The whole loop in one kernel: no host round trip per iteration (see `K.while_kernel`)."""
        n = ir.IntegerAttr(op.attributes["num_carries"]).value
        launch = K.while_kernel(op, self._new_kernel_name("while"), shape)
        self.take(launch.kernel, op)
        operands, results = list(op.operands), list(op.results)
        numel = _prod(shape)

        def step(env):
            tensors = [env[v].contiguous() for v in operands]
            outs = [torch.empty_like(t) for t in tensors[:n]]
            _launch(self.compiled(launch.kernel), (max(1, _cdiv(numel, launch.block)), 1, 1), [*tensors, *outs, numel], op)
            for r, t in zip(results, outs):
                env[r] = t

        return step

    def _host_while(self, op):
        n = ir.IntegerAttr(op.attributes["num_carries"]).value
        stacked = "stack_outputs" in op.attributes and ir.BoolAttr(op.attributes["stack_outputs"]).value
        operands, results = list(op.operands), list(op.results)
        cond_block, body_block = op.regions[0].blocks[0], op.regions[1].blocks[0]
        cond, body = _Plan(self, cond_block), _Plan(self, body_block)

        def step(env):
            carries, consts = [env[v] for v in operands[:n]], [env[v] for v in operands[n:]]
            rows = []
            while True:
                (p,) = cond.run(env, [*carries, *consts], cond_block)
                if not bool(self._on_host(p)):  # one read per iteration
                    break
                carries = body.run(env, [*carries, *consts], body_block)
                if stacked:
                    rows.append(carries)
            if stacked:
                rows = rows or [carries]
                carries = [torch.stack([row[j] for row in rows]) for j in range(n)]
            for r, v in zip(results, carries):
                env[r] = v

        return step

    def _odd_even_combine(self, op, batched):
        """An associative_scan whose combine is not one elementwise kernel (matrix products,
        operands of different shapes, captured values), with its combine batched: the odd/even
        scan, each level ONE batched combine over all its pairs (2·log2(T) combines in all, O(T)
        work), the levels' results interleaved by strided copies. Nothing is read back."""
        attr = lambda n: ir.IntegerAttr(op.attributes[n]).value  # noqa: E731
        k, dim = attr("num_xs"), attr("dim")
        reverse = ir.BoolAttr(op.attributes["reverse"]).value
        operands, results = list(op.operands), list(op.results)
        fn, block, combine = batched
        dtypes = [_dtype(r) for r in results]

        def scan(env, xs, consts):  # along dim 0
            length = xs[0].shape[0]
            if length < 2:
                return xs
            pairs = combine.run(env, [*[x[0:length - 1:2] for x in xs], *[x[1::2] for x in xs], *consts], block)
            odd = scan(env, pairs, consts)  # the prefixes ending at 1, 3, 5, ...
            outs = [torch.empty(x.shape, dtype=dt, device=x.device) for x, dt in zip(xs, dtypes)]
            for o, x, p in zip(outs, xs, odd):
                o[0].copy_(x[0])
                o[1::2].copy_(p)
            if length > 2:  # those ending at 2, 4, ...: the odd prefix before, combined with x there
                half = (length - 1) // 2
                even = combine.run(env, [*[p[:half] for p in odd], *[x[2::2] for x in xs], *consts], block)
                for o, e in zip(outs, even):
                    o[2::2].copy_(e)
            return outs

        def step(env):
            xs, consts = [env[v].movedim(dim, 0) for v in operands[:k]], [env[v] for v in operands[k:]]
            if reverse:  # the later slices accumulated are the combine's lhs, as in the running combine
                xs = [x.flip(0) for x in xs]
            outs = scan(env, xs, consts)
            for r, o in zip(results, outs):
                env[r] = (o.flip(0) if reverse else o).movedim(0, dim)

        step.keep_alive = fn
        return step

    def _running_combine(self, op):
        """An associative_scan whose combine cannot be batched (`_batched_plan`: an ATen call without
        a batching rule, a scalar read out of a slice): the CPU's sequential form, the combine's
        steps launched once per position from the host. Nothing is read back, so a replay runs it
        as one CUDA graph."""
        attr = lambda n: ir.IntegerAttr(op.attributes[n]).value  # noqa: E731
        k, dim = attr("num_xs"), attr("dim")
        reverse = ir.BoolAttr(op.attributes["reverse"]).value
        operands, results = list(op.operands), list(op.results)
        block = op.regions[0].blocks[0]
        combine = _Plan(self, block)

        def step(env):
            xs, consts = [env[v] for v in operands[:k]], [env[v] for v in operands[k:]]
            length = xs[0].shape[dim]
            outs = [torch.empty_like(x) for x in xs]
            order = range(length - 1, -1, -1) if reverse else range(length)
            prefix = None
            for t in order:  # with reverse, the later slices accumulated are the combine's lhs
                row = [x.select(dim, t) for x in xs]
                prefix = row if prefix is None else combine.run(env, [*prefix, *row, *consts], block)
                for o, p in zip(outs, prefix):
                    o.select(dim, t).copy_(p)
            for r, o in zip(results, outs):
                env[r] = o

        return step

    def _op_tidal_associative_scan(self, op):
        k = ir.IntegerAttr(op.attributes["num_xs"]).value
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        if len(op.operands) != k or not K.elementwise_combine(op):
            n = len(op.operands)
            batched = self._batched_plan(op, [i < 2 * k for i in range(n + k)])
            return self._running_combine(op) if batched is None else self._odd_even_combine(op, batched)
        xs_values, results = list(op.operands)[:k], list(op.results)
        name = self._new_kernel_name("scan")

        # a scan output nothing reads (a linear recurrence's running product) is never written
        live = tuple(bool(list(r.uses)) for r in results)
        fused = [_scan_prologue(v) for v in xs_values]
        shifted = [None if f else _shifted_operand(v, dim) for v, f in zip(xs_values, fused)]
        prologues = tuple(f[0] if f else sh[1] if sh else None for f, sh in zip(fused, shifted))
        # per operand: the values the kernel loads for it, each with the permutation that views it as the operand
        loaded = [[(i, f[1]) for i in list(f[0].opview.inputs)] if f else [(sh[0] if sh else v, None)]
                  for v, f, sh in zip(xs_values, fused, shifted)]

        def make(variant, block_t, block_c, unit_runs=True):
            kernel_name = f"{name}_{variant}" + ("" if unit_runs else "_strided")
            if variant == "lookback":
                return K.lookback_scan_kernel(op, kernel_name, block_t, block_c, _lookback_window(block_c), unit_runs,
                                              live=live, prologues=prologues)
            if variant == "wide":
                return K.wide_scan_kernel(op, kernel_name, block_t, block_c, unit_runs, live=live, prologues=prologues)
            return K.scan_kernel(op, kernel_name, block_t, block_c, unit_runs, live=live, prologues=prologues)

        variants = _Variants(self, op, make)

        def launch(key, grid, *args):
            _launch(variants.compiled(key), grid, args, op)

        # build a kernel now, so Triton verifies it before any call and --emit shows it
        shape = [_static_or_typical(s) for s in _tensor_type(xs_values[0]).shape]
        sizes = [max(1, _tensor_type(v).element_type.maybe_downcast().width // 8) for v in xs_values]
        variants.kernel((*_ScanPlan(shape[dim], _prod(s for i, s in enumerate(shape) if i != dim), sizes).key, True))

        def step(env):
            reads = [[(env[v] if perm is None else env[v].permute(perm)).movedim(dim, 0) for v, perm in per] for per in loaded]
            xs = [t for per in reads for t in per]
            length = xs[0].shape[0]
            width = _prod(xs[0].shape[1:])
            plan = _ScanPlan(length, width, sizes) if length > 0 and width > 0 else None
            layout = _in_place_layout(xs, plan.block_c if plan else 1)
            if layout is None:  # read (and written) as contiguous [T, C] copies
                reads = [[x.contiguous() for x in per] for per in reads]
                xs = [t for per in reads for t in per]
                layout = (width, max(width, 1), 1, max(width, 1), True)
            *layout, unit_runs = layout
            outs = [torch.empty_strided(per[0].shape, per[0].stride(), dtype=_dtype(r), device=per[0].device) if used else None
                    for per, r, used in zip(reads, results, live)]
            stored = [o for o in outs if o is not None]
            if plan is not None:
                col_blocks = plan.col_blocks
                key = (*plan.key, unit_runs)
                if plan.form in ("scan", "wide"):
                    launch(key, (col_blocks, 1, 1), *xs, *stored, length, width, *layout)
                else:
                    pieces = _cdiv(length, plan.block_t)
                    state = torch.zeros(1 + pieces * col_blocks, dtype=torch.int32, device=xs[0].device)  # flags, counter
                    aggs = [torch.empty(pieces, width, dtype=_dtype(r), device=xs[0].device) for r in results]
                    incs = [torch.empty_like(a) for a in aggs]
                    launch(key, (pieces * col_blocks, 1, 1), *xs, *stored, *aggs, *incs, state[1:], state[:1],
                           length, width, col_blocks, *layout)
            for r, o in zip(results, outs):
                env[r] = o.movedim(0, dim) if o is not None else None

        return step


# The row tile of a split reduction over fewer rows than a full tile holds.
SMALL_ROW_TILE = 64


def _fusing_scan(user, operand_number: int) -> bool:
    """`user` is an associative_scan made as one kernel (elementwise combine, no extra operands)
    and the value is one of its scanned operands."""
    if user.name != "tidal.associative_scan":
        return False
    k = ir.IntegerAttr(user.attributes["num_xs"]).value
    return len(user.operands) == k and operand_number < k and K.elementwise_combine(user)


def _scan_prologue(value):
    """(generic, permutation or None) when the scan operand `value` is an elementwise generic's
    result, or a transpose of one, that the scan kernel computes from the generic's inputs
    (`kernels.ScanPrologue`); else None."""
    owner, perm = value.owner, None
    if isinstance(owner, ir.Block):
        return None
    if owner.name == "linalg.transpose":
        perm = PlanBuilder._static(owner, "permutation")
        value = owner.operands[0]
        owner = value.owner
        if isinstance(owner, ir.Block):
            return None
    return (owner, perm) if K.prologue_generic(owner) else None


_IN_PLACE = "part written in place"  # env key, with a concat's result: (its buffer, the part already there)


def _concat_slot(result):
    """(concat, operand number) when `result` is a part of a concat in its block that runs as a
    step: the kernel making `result` writes it into its slice of the concat's buffer
    (`_concat_slot_view`), and the concat copies only its other parts. An adjoint's
    `cat([zeros, x̄_{1..T-1}])` then costs one row, not a pass over x̄. Other ops may read
    `result` too (a view is as good), but it is not one the block returns (its caller gets
    results of their own)."""
    uses = list(result.uses)
    if any(u.owner.name in ("func.return", "tidal.yield", "scf.yield") for u in uses):
        return None
    for use in uses:
        user = use.owner
        if user.name == "tensor.concat" and user.parent == result.owner.parent and not absorbed_by_scans(user):
            return user, use.operand_number
    return None


def _concat_slot_view(env, concat, index: int, part: torch.Tensor) -> torch.Tensor:
    """Where part `index` (`part`: the buffer it would have had) goes in the concat's result, made
    now in `part`'s dim order; `part` itself while another part's dynamic size is not known yet."""
    dim = ir.IntegerAttr(concat.attributes["dim"]).value
    sizes = []
    for i, p in enumerate(concat.operands):
        size = part.shape[dim] if i == index else _tensor_type(p).shape[dim]
        if size == _DYNAMIC:
            if p not in env:
                return part
            size = env[p].shape[dim]
        sizes.append(size)
    shape = list(part.shape)
    shape[dim] = sum(sizes)
    order = _dim_order(part)
    out = torch.empty([shape[d] for d in order], dtype=part.dtype, device=part.device)
    out = out.permute([order.index(d) for d in range(len(order))])
    env[(_IN_PLACE, concat.results[0])] = (out, index)
    return out.narrow(dim, sum(sizes[:index]), sizes[index])


def _shifted_operand(value, dim: int):
    """(source, `kernels.ScanShift`) when the scan operand `value` is the concat along the scan
    dim of a slice of `source` (a tensor of `value`'s type) starting at row 1 and one constant row
    after it (row t is source row t + 1), or of a constant row and the slice starting at row 0
    (row t - 1); else None."""
    concat = value.owner
    if isinstance(concat, ir.Block) or concat.name != "tensor.concat" or ir.IntegerAttr(concat.attributes["dim"]).value != dim:
        return None
    parts = list(concat.operands)
    if len(parts) != 2:
        return None
    for slice_at, fill_at, first_row, shift in ((0, 1, 1, 1), (1, 0, 0, -1)):
        piece, fill = parts[slice_at].owner, _splat_literal(parts[fill_at])
        if isinstance(piece, ir.Block) or piece.name != "tensor.extract_slice" or fill is None:
            continue
        source = piece.operands[0]
        offsets, strides = PlanBuilder._static(piece, "static_offsets"), PlanBuilder._static(piece, "static_strides")
        if (source.type == value.type and len(piece.operands) == 1 and all(st == 1 for st in strides)
                and offsets == [first_row if d == dim else 0 for d in range(len(offsets))]
                and ir.RankedTensorType(parts[fill_at].type).shape[dim] == 1):
            return source, K.ScanShift(shift, fill)
    return None


def _splat_literal(value) -> str | None:
    """The TTIR literal of every element of `value` when it is a splat constant or a fill of one."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    elem = ir.RankedTensorType(value.type).element_type
    if owner.name == "linalg.fill":
        owner = owner.operands[0].owner
        if isinstance(owner, ir.Block) or owner.name != "arith.constant" or owner.results[0].type != elem:
            return None
        text = str(owner.attributes["value"]).split(" : ")[0]
    elif (owner.name == "arith.constant" and isinstance(owner.attributes["value"], ir.DenseElementsAttr)
          and owner.attributes["value"].is_splat):
        text = str(owner.attributes["value"].get_splat_value()).split(" : ")[0]
    else:
        return None
    return {"0": "false", "1": "true"}.get(text, text) if element_type(elem) == "i1" else text


def absorbed_by_scans(op) -> bool:
    """`op` (an elementwise generic, or a transpose of its result, or a shifted concat) has no
    step of its own: every use is a scan in the same block that computes it in its kernel
    (`_scan_prologue`, `_shifted_operand`)."""
    parent = op.operation.parent
    if op.operation.name == "tensor.concat":
        uses = list(op.results[0].uses)
        return bool(uses) and all(
            u.owner.parent == parent and _fusing_scan(u.owner, u.operand_number)
            and _shifted_operand(op.results[0], ir.IntegerAttr(u.owner.attributes["dim"]).value) is not None
            for u in uses)

    def fused_use(use) -> bool:
        user = use.owner
        if user.name == "linalg.transpose":
            return all(fused_use(u) for u in user.results[0].uses)
        return (user.parent == parent and _fusing_scan(user, use.operand_number)
                and _scan_prologue(user.operands[use.operand_number]) is not None)

    if op.operation.name == "linalg.transpose":
        source = op.operands[0].owner
        return not isinstance(source, ir.Block) and source.name == "linalg.generic" and absorbed_by_scans(source)
    if op.operation.name != "linalg.generic" or not K.prologue_generic(op):
        return False
    uses = list(op.results[0].uses)
    return bool(uses) and all(fused_use(u) for u in uses)


def _in_place_layout(xs: list, block_c: int) -> tuple[int, int, int, int, bool] | None:
    """(row stride, inner size, inner stride, outer stride, unit runs) of `kernels.ScanLayout`
    when the scan can read every operand [T, ...] where it is (and write its outputs alike): all
    of one shape and strides, dense and non-overlapping, with the dims after T merging into at most
    two runs. Unit runs: the inner run is contiguous and the programs' blocks of `block_c`
    columns never cross from one run into the next."""
    shape, strides = xs[0].shape, xs[0].stride()
    if any(x.shape != shape or x.stride() != strides for x in xs):
        return None
    if not _dense(xs[0]):
        return None
    runs: list[list[int]] = []  # [size, stride] of the column dims, adjacent ones merged where they can
    for size, stride in zip(shape[1:], strides[1:]):
        if size == 1:
            continue
        if runs and runs[-1][1] == stride * size:
            runs[-1] = [runs[-1][0] * size, stride]
        else:
            runs.append([size, stride])
    if len(runs) > 2:
        return None
    row_stride = strides[0] if shape[0] > 1 else 0
    if not runs:
        return row_stride, 1, 1, 1, True
    if len(runs) == 1:
        (size, stride), = runs
        return row_stride, size, stride, size, stride == 1
    (_, outer_stride), (inner, inner_stride) = runs
    return row_stride, inner, inner_stride, outer_stride, inner_stride == 1 and inner % block_c == 0


def _dim_order(t: torch.Tensor) -> list[int]:
    """`t`'s dims from the outermost in memory to the innermost (unit dims first, in order)."""
    return sorted(range(t.dim()), key=lambda d: (t.shape[d] != 1, -t.stride()[d], d))


def _static_or_typical(size: int) -> int:
    """A static size as it is; a dynamic one as a typical size, to build one variant at plan time."""
    return 1024 if size == _DYNAMIC else size


def _folded_fill_literal(value) -> str | None:
    """The constant of `value = linalg.fill(arith.constant)` as a TTIR literal when every use of
    `value` is the initial value (an out) of a split reduction, which then folds it in its kernel
    (no fill kernel); else None."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "linalg.fill":
        return None
    for use in value.uses:
        user = use.owner
        if user.operation.name != "linalg.generic" or K.split_combiners(user) is None:
            return None
        if use.operand_number < len(user.opview.inputs):
            return None
    return _splat_literal(value)


def _scalar_literal(text: str):
    """`1.5 : f32`, `0xFF800000 : f32` (bit pattern), `3 : index`, `true` → a Python value."""
    import struct

    literal, _, ty = text.partition(" : ")
    literal = literal.strip()
    if literal in ("true", "false"):
        return literal == "true"
    if ty.startswith(("f", "bf")):
        if literal.lower().startswith("0x"):
            bits = int(literal, 16)
            return struct.unpack("<d", struct.pack("<Q", bits))[0] if ty == "f64" else struct.unpack("<f", struct.pack("<I", bits))[0]
        return float(literal)
    return int(literal, 0)
