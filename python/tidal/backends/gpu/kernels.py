"""Kernels from linalg-level ops: a `linalg.generic` (elementwise or with reductions) and an
elementwise `tidal.associative_scan` (`tt.scan`), as TTIR text plus what the host needs to launch.

A generic's parallel dims are flattened and split into blocks of BLOCK elements, one program per
block; its reduction dims are `scf.for` loops inside the kernel carrying the accumulators, so one
kernel serves sums, maxima, softmax pieces and any other body linalg can express. Every operand is
addressed through strides passed at launch (views need no copies), and every loop size is an
argument, so one kernel serves every shape of its op.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from tidal.backends.gpu.ttir import Kernel, KernelBuilder, element_type, memory_type, tensor_type, translate_op
from tidal.diagnostics import TidalUnsupported
from tidal.passes.registry import map_dims

ELEMENTWISE_BLOCK = 1024
REDUCTION_BLOCK = 128


@dataclass
class GenericLaunch:
    """How the host launches a generic's kernel: which tensors go in (ins, captured, then the
    outs whose initial values are read) and which dims' sizes, read off which operand."""

    kernel: Kernel
    captured: list  # values from above the generic, passed as tensors (or scalars)
    captured_scalar: list[bool]
    reads_init: list[bool]  # per out
    dim_sources: list[tuple[int, int]]  # per loop dim: (operand index in ins+outs, result position)
    parallel_dims: list[int]
    block: int
    flat_reads: list[bool] | None  # per in, then out: read at flat positions (GenericBody.flat_reads); None: no flat variant


def _map_dims(affine_map) -> list[int | None]:
    """Per result of an indexing map: the loop dim it reads (None: the constant 0 of a size-1 dim)."""
    dims = map_dims(affine_map)
    if dims is None:
        raise TidalUnsupported(f"GPU backend: indexing map {affine_map} (only dims and 0)", None)
    return dims


def defined_inside(value, region_op) -> bool:
    """`value` is defined in `region_op`'s regions (a result of a nested op, or a block argument)."""
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner.parent
    while op is not None:
        if op == region_op:
            return True
        op = op.parent
    return False


class _Addressing:
    """Offsets of an operand's elements from the loop indices and its strides (kernel args)."""

    def __init__(self, b: KernelBuilder, shape: tuple[int, ...]):
        self.b, self.shape = b, shape

    def offsets(self, strides: list[str], indices: list[str | None]) -> str:
        b, shape = self.b, self.shape
        ty = tensor_type(shape, "i32")
        off = None
        for stride, index in zip(strides, indices):
            if index is None:
                continue
            term = b.binary("arith.muli", index, b.splat(stride, "i32", shape), ty)
            off = term if off is None else b.binary("arith.addi", off, term, ty)
        return off if off is not None else b.const(0, "i32", shape)

    def pointers(self, ptr: str, elem: str, off: str) -> str:
        b, shape = self.b, self.shape
        mem = memory_type(elem)
        ptr_ty = tensor_type(shape, f"!tt.ptr<{mem}>")
        p = b.op(f"tt.splat {ptr} : !tt.ptr<{mem}> -> {ptr_ty}")
        return b.op(f"tt.addptr {p}, {off} : {ptr_ty}, {tensor_type(shape, 'i32')}")

    def load(self, ptrs: str, elem: str, mask: str, volatile: bool = False) -> str:
        """`volatile`: past L1, for values other programs store during this launch (L1 is not
        coherent with other SMs' stores)."""
        mem = memory_type(elem)
        attrs = " {isVolatile = true}" if volatile else ""
        value = self.b.op(f"tt.load {ptrs}, {mask}{attrs} : {tensor_type(self.shape, f'!tt.ptr<{mem}>')}")
        if mem != elem:  # a byte per boolean
            value = self.b.op(f"arith.cmpi ne, {value}, {self.b.const(0, mem, self.shape)} : {tensor_type(self.shape, mem)}")
        return value

    def load_scalar(self, ptr: str, elem: str) -> str:
        """The one element at `ptr` (unmasked: the tensor has it), as a scalar."""
        mem = memory_type(elem)
        value = self.b.op(f"tt.load {ptr} : !tt.ptr<{mem}>")
        return self.b.op(f"arith.cmpi ne, {value}, {self.b.const(0, mem)} : {mem}") if mem != elem else value

    def store(self, ptrs: str, value: str, elem: str, mask: str) -> None:
        mem = memory_type(elem)
        if mem != elem:
            value = self.b.op(f"arith.extui {value} : {tensor_type(self.shape, elem)} to {tensor_type(self.shape, mem)}")
        self.b.emit(f"tt.store {ptrs}, {value}, {mask} : {tensor_type(self.shape, f'!tt.ptr<{mem}>')}")


def _unflatten(b: KernelBuilder, flat: str, dims: list[int], sizes: list[str], shape: tuple[int, ...], index: dict) -> None:
    """index[d] for each of `dims` (row-major, the last fastest) from flat positions `flat`."""
    ty = tensor_type(shape, "i32")
    rest = flat
    for d in reversed(dims):
        size = b.splat(sizes[d], "i32", shape)
        index[d] = b.binary("arith.remsi", rest, size, ty)
        rest = b.binary("arith.divsi", rest, size, ty)


def _tensor_rank_and_elem(value) -> tuple[int, str]:
    t = ir.RankedTensorType(value.type)
    return t.rank, element_type(t.element_type)


class GenericBody:
    """One linalg.generic's kernel arguments and body, emitted on tiles of `shape`."""

    def __init__(self, op, name: str, builder: KernelBuilder | None = None):
        self.op = op
        g = op.opview
        self.maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
        self.iterators = ["reduction" if "reduction" in str(a) else "parallel" for a in op.attributes["iterator_types"]]
        self.ins, self.outs = list(g.inputs), list(g.outputs)
        self.body = op.regions[0].blocks[0]
        self.parallel = [d for d, it in enumerate(self.iterators) if it == "parallel"]
        self.reduction = [d for d, it in enumerate(self.iterators) if it == "reduction"]
        self.operand_dims = [_map_dims(m) for m in self.maps]
        self.b = builder or KernelBuilder(name)
        # values from above the generic that its body reads (a gather's source, a scalar)
        self.captured, self.captured_scalar = [], []
        for inner in self.body.operations:
            for v in inner.operands:
                if defined_inside(v, op) or any(v == c for c in self.captured):
                    continue
                if isinstance(v.owner, ir.OpView) and v.owner.operation.name == "arith.constant":
                    continue  # re-emitted inside
                self.captured.append(v)
                self.captured_scalar.append(not isinstance(v.type, ir.RankedTensorType))

    def tensor_arg(self, name: str, value):
        rank, elem = _tensor_rank_and_elem(value)
        return self.b.pointer_arg(name, elem), [self.b.scalar_arg(f"{name}_s{r}") for r in range(rank)], elem

    def declare_inputs(self) -> None:
        b = self.b
        self.in_args = [self.tensor_arg(f"in{i}", v) for i, v in enumerate(self.ins)]
        self.cap_args = []
        for i, (v, scalar) in enumerate(zip(self.captured, self.captured_scalar)):
            if scalar:
                self.cap_args.append((b.scalar_arg(f"cap{i}", element_type(v.type)), None, element_type(v.type)))
            else:
                self.cap_args.append(self.tensor_arg(f"cap{i}", v))

    def flat_reads(self) -> list[bool] | None:
        """Per operand the kernel loads (the ins, and the outs of an elementwise generic): True
        when read through the identity map, False when it is one element (its map reads no loop
        dim). None when an operand is read otherwise, the body reads an index or a reduction dim
        comes before a parallel one. Where this is a list and the identity-read operands are
        contiguous, an element's offset is its row-major flat position: no per-dim indices (no
        div/rem by the sizes) and contiguous lanes, so loads vectorize."""
        if self.parallel != list(range(len(self.parallel))):
            return None
        if any(inner.operation.name == "linalg.index" for inner in self.body.operations):
            return None
        loaded = self.operand_dims[: len(self.ins)] if self.reduction else self.operand_dims
        identity = list(range(len(self.iterators)))
        if not all(dims == identity or all(d is None for d in dims) for dims in loaded):
            return None
        return [bool(dims) and dims == identity for dims in loaded]

    def load_operand(self, addr, arg, dims, index, mask, flat: str | None = None):
        """An operand's tile: its one element splat when its map reads no loop dim; else at the
        flat positions `flat` when given (a flat kernel), else through its strides."""
        ptr, strides, elem = arg
        if all(d is None for d in dims):
            return self.b.splat(addr.load_scalar(ptr, elem), elem, addr.shape)
        off = flat if flat is not None else addr.offsets(strides, [index[d] if d is not None else None for d in dims])
        return addr.load(addr.pointers(ptr, elem, off), elem, mask)

    def run_body(self, addr, values, index, mask, shape, stop: dict | None = None):
        """Emit the body on tiles of `shape`; returns the yielded values. `stop` maps ops (the
        combiners of a split reduction) to the value to take for their result instead."""
        b, ity = self.b, tensor_type(shape, "i32")
        for inner in self.body.operations:
            name = inner.operation.name
            if name == "linalg.yield":
                if stop:  # a split reduction's results are its combiners', which its caller folds
                    return []
                # it may yield a captured scalar or a constant as they are
                return [self._tile_of(v, values, shape, inner) for v in inner.operands]
            if stop and any(inner == s for s in stop):
                continue
            if name == "linalg.index":
                d = ir.IntegerAttr(inner.attributes["dim"]).value
                values[inner.results[0]] = b.op(f"arith.extsi {index[d]} : {ity} to {tensor_type(shape, 'i64')}")
                continue
            if name == "cf.assert":
                # torch-mlir's index-bounds checks: dropped in kernels (triton 3.6 aborts on tt.assert
                # of these masks), so an out-of-range index reads out of bounds instead of raising
                continue
            if name == "tensor.extract":
                k = next(i for i, c in enumerate(self.captured) if c == inner.operands[0])
                ptr, strides, elem = self.cap_args[k]
                idx_i32 = [b.op(f"arith.trunci {values[v]} : {tensor_type(shape, 'i64')} to {ity}") if element_type(v.type) == "i64"
                           else values[v] for v in list(inner.operands)[1:]]
                values[inner.results[0]] = addr.load(addr.pointers(ptr, elem, addr.offsets(strides, idx_i32)), elem, mask)
                continue
            operands = [self._tile_of(v, values, shape, inner) for v in inner.operands]
            for r, v in zip(inner.results, translate_op(b, inner, operands, shape)):
                values[r] = v
        raise AssertionError("linalg.generic body without linalg.yield")

    def _tile_of(self, v, values, shape, user) -> str:
        """The tile holding `v` inside the body: computed there, or a captured scalar splat, or a
        constant re-emitted (once each)."""
        if v not in values:
            k = next((i for i, c in enumerate(self.captured) if c == v), None)
            if k is not None and self.captured_scalar[k]:
                values[v] = self.b.splat(self.cap_args[k][0], self.cap_args[k][2], shape)
            elif isinstance(v.owner, ir.OpView) and v.owner.operation.name == "arith.constant":
                values[v] = translate_op(self.b, v.owner, [], shape)[0]
            else:
                raise TidalUnsupported(f"GPU backend: '{user.operation.name}' reads a tensor inside a generic", user.location)
        return values[v]

    def dim_sources(self):
        return [next((k, r) for k, dims in enumerate(self.operand_dims) for r, dd in enumerate(dims) if dd == d)
                for d in range(len(self.iterators))]


def _program_block(b: KernelBuilder, block: int, numel: str) -> tuple[str, str, str]:
    """This program's id, the flat positions of its BLOCK lanes and which of them are < numel."""
    ity = tensor_type((block,), "i32")
    pid = b.op("tt.get_program_id x : i32")
    start = b.binary("arith.muli", pid, b.const(block, "i32"), "i32")
    lanes = b.op(f"tt.make_range {{end = {block} : i32, start = 0 : i32}} : {ity}")
    idx = b.binary("arith.addi", b.splat(start, "i32", (block,)), lanes, ity)
    return pid, idx, b.op(f"arith.cmpi slt, {idx}, {b.splat(numel, 'i32', (block,))} : {ity}")


def generic_kernel(op, name: str, flat: bool = False, aligned: bool = False) -> GenericLaunch:
    """Parallel dims flattened over programs of BLOCK elements; reduction dims as `scf.for` loops
    in each lane (any body: argmax, norms, ...). `flat` (an elementwise generic whose
    `flat_reads` is a list, launched on contiguous operands): each lane's flat position is its
    element's offset. `aligned`: numel is a multiple of 16, so the mask keeps vector loads."""
    gen = GenericBody(op, name)
    b, n_in, body = gen.b, len(gen.ins), gen.body
    reads_init = [bool(gen.reduction) or len(list(body.arguments[n_in + j].uses)) > 0 for j in range(len(gen.outs))]
    block = REDUCTION_BLOCK if gen.reduction else ELEMENTWISE_BLOCK
    shape = (block,)
    addr = _Addressing(b, shape)
    gen.declare_inputs()
    init_args = [gen.tensor_arg(f"init{j}", v) if reads_init[j] else None for j, v in enumerate(gen.outs)]
    res_args = [gen.tensor_arg(f"res{j}", v) for j, v in enumerate(gen.outs)]
    sizes = [b.scalar_arg(f"n{d}") for d in range(len(gen.iterators))]
    total = b.scalar_arg("numel", divisible=aligned)

    _, idx, mask = _program_block(b, block, total)
    index: dict[int, str] = {}
    if not flat:
        _unflatten(b, idx, gen.parallel, sizes, shape, index)
    at = idx if flat else None

    acc_init = [gen.load_operand(addr, init_args[j], gen.operand_dims[n_in + j], index, mask, at) if reads_init[j] else None
                for j in range(len(gen.outs))]

    def body_values(accs):
        values = {body.arguments[i]: gen.load_operand(addr, gen.in_args[i], gen.operand_dims[i], index, mask, at) for i in range(n_in)}
        values.update({body.arguments[n_in + j]: a for j, a in enumerate(accs) if a is not None})
        return values

    out_elems = [tensor_type(shape, _tensor_rank_and_elem(v)[1]) for v in gen.outs]

    def reduce_loops(dims, accs):
        if not dims:
            return gen.run_body(addr, body_values(accs), index, mask, shape)
        d, more = dims[0], dims[1:]
        iv, iters, results = b.fresh(), [b.fresh() for _ in accs], b.fresh()
        b.emit(
            f"{results}:{len(accs)} = scf.for {iv} = {b.const(0, 'i32')} to {sizes[d]} step {b.const(1, 'i32')} "
            f"iter_args({', '.join(f'{i} = {a}' for i, a in zip(iters, accs))}) -> ({', '.join(out_elems)}) : i32 {{"
        )
        b.indent += 1
        index[d] = b.splat(iv, "i32", shape)
        new = reduce_loops(more, iters)
        b.emit(f"scf.yield {', '.join(new)} : {', '.join(out_elems)}")
        b.indent -= 1
        b.emit("}")
        return [f"{results}#{i}" for i in range(len(accs))]

    results = reduce_loops(gen.reduction, acc_init)
    for j, value in enumerate(results):
        ptr, strides, elem = res_args[j]
        off = idx if flat else addr.offsets(strides, [index[d] if d is not None else None for d in gen.operand_dims[n_in + j]])
        addr.store(addr.pointers(ptr, elem, off), value, elem, mask)
    return GenericLaunch(b.text(), gen.captured, gen.captured_scalar, reads_init, gen.dim_sources(), gen.parallel, block,
                         None if gen.reduction else gen.flat_reads())


# -- split reductions: sums, maxima, ... over many programs -------------------------------------

# combiner op -> its identity, as a TTIR literal (f32 infinities; other widths' in _INFINITIES)
COMBINERS = {
    "arith.addf": "0.000000e+00",
    "arith.addi": "0",
    "arith.mulf": "1.000000e+00",
    "arith.maximumf": "0xFF800000",
    "arith.minimumf": "0x7F800000",
    "arith.maxnumf": "0xFF800000",
    "arith.minnumf": "0x7F800000",
    "arith.ori": "0",
    "arith.andi": "1",
}
# an infinity is written as its bit pattern, which has the element type's width
_INFINITIES = {
    "f64": {"0xFF800000": "0xFFF0000000000000", "0x7F800000": "0x7FF0000000000000"},
    "f16": {"0xFF800000": "0xFC00", "0x7F800000": "0x7C00"},
    "bf16": {"0xFF800000": "0xFF80", "0x7F800000": "0x7F80"},
}


def split_combiners(op):
    """For a generic whose every out is folded by one combiner (out' = combine(f(ins), out), f
    not reading any out): the combiner ops, one per out; else None."""
    if not any("reduction" in str(a) for a in op.attributes["iterator_types"]):
        return None
    body = op.regions[0].blocks[0]
    g = op.opview
    n_in, outs = len(g.inputs), list(g.outputs)
    out_args = [body.arguments[n_in + j] for j in range(len(outs))]
    yield_op = list(body.operations)[-1]
    combiners = []
    for j, v in enumerate(yield_op.operands):
        c = v.owner
        if isinstance(c, ir.Block) or c.operation.name not in COMBINERS or len(list(out_args[j].uses)) != 1:
            return None
        a, b2 = c.operands
        if not (a == out_args[j] or b2 == out_args[j]):
            return None
        elem = element_type(v.type)
        if c.operation.name in ("arith.ori", "arith.andi") and elem != "i1":
            return None
        combiners.append(c)
    # f must not read any out: outs are used only by their combiner (checked above)
    maps = [ir.AffineMapAttr(a).value for a in op.attributes["indexing_maps"]]
    parallel = [d for d, a in enumerate(op.attributes["iterator_types"]) if "parallel" in str(a)]
    for m in maps[n_in:]:
        if [d for d in _map_dims(m) if d is not None] != parallel:
            return None  # partials are laid out like the out only when it is indexed by the parallel dims in order
    return combiners


def split_reduction_kernel(op, name: str, block_p: int, block_r: int, flat: bool = False,
                           aligned: bool = False, inits: list[str | None] | None = None) -> tuple[Kernel, GenericBody]:
    """Program (i, s) reduces rows [i·BP, (i+1)·BP) over its split s of the flattened reduction
    dims, in tiles [BP, BR] combined elementwise into a tile of accumulators (masked lanes holding
    the identity), one `tt.reduce` along the tile's reduction axis after the loop (not one per
    tile: each is a round trip through shared memory), and writes its partial to part_j[row, s].
    The last program of row block i to finish folds the block's S partials and the initial values
    into res_j (`_fold_partials`). `flat` (the ins' `flat_reads` is a list, launched on contiguous
    ins): row r's element k sits at r·red + k. `aligned`: red and per_split are multiples of 16,
    so masks and row starts keep vector loads. `inits[j]`: out j's initial value as a literal (the
    out is a fill of a constant), or None: read from init_j[row]."""
    gen = GenericBody(op, name)
    combiners = split_combiners(op)
    b, n_in, body = gen.b, len(gen.ins), gen.body
    tile = (block_p, block_r)
    addr = _Addressing(b, tile)
    gen.declare_inputs()
    out_elems = [_tensor_rank_and_elem(v)[1] for v in gen.outs]
    parts = [b.pointer_arg(f"part{j}", e) for j, e in enumerate(out_elems)]
    inits = inits or [None] * len(out_elems)
    init_ptrs = [b.pointer_arg(f"init{j}", e) if lit is None else None for j, (e, lit) in enumerate(zip(out_elems, inits))]
    res = [b.pointer_arg(f"res{j}", e) for j, e in enumerate(out_elems)]
    arrivals = b.pointer_arg("arrivals", "i32")
    sizes = [b.scalar_arg(f"n{d}") for d in range(len(gen.iterators))]
    rows_total = b.scalar_arg("rows")
    red_total, per_split = b.scalar_arg("red", divisible=aligned), b.scalar_arg("per_split", divisible=aligned)
    splits = b.scalar_arg("splits")
    ty = tensor_type(tile, "i32")
    pid_p, pid_s = b.op("tt.get_program_id x : i32"), b.op("tt.get_program_id y : i32")

    rows1 = b.binary("arith.addi", b.splat(b.binary("arith.muli", pid_p, b.const(block_p, "i32"), "i32"), "i32", (block_p,)),
                     b.op(f"tt.make_range {{end = {block_p} : i32, start = 0 : i32}} : {tensor_type((block_p,), 'i32')}"),
                     tensor_type((block_p,), "i32"))
    rows = _broadcast_vector(b, rows1, "i32", tile, axis=1)
    lanes = _broadcast_vector(b, b.op(f"tt.make_range {{end = {block_r} : i32, start = 0 : i32}} : {tensor_type((block_r,), 'i32')}"), "i32", tile, axis=0)
    row_ok = b.op(f"arith.cmpi slt, {rows}, {b.splat(rows_total, 'i32', tile)} : {ty}")
    index: dict[int, str] = {}
    if not flat:
        _unflatten(b, rows, gen.parallel, sizes, tile, index)
    begin = b.binary("arith.muli", pid_s, per_split, "i32")
    end = b.op(f"arith.minsi {b.binary('arith.addi', begin, per_split, 'i32')}, {red_total} : i32")

    def identity(c, elem, shape):
        literal = COMBINERS[c.operation.name]
        literal = _INFINITIES.get(elem, {}).get(literal, literal)
        if elem == "i1":
            literal = "true" if literal == "1" else "false"
        return b.const(literal, elem, shape)

    accs0 = [identity(c, e, tile) for c, e in zip(combiners, out_elems)]
    acc_tys = [tensor_type(tile, e) for e in out_elems]
    iv, iters, results = b.fresh(), [b.fresh() for _ in accs0], b.fresh()
    b.emit(
        f"{results}:{len(accs0)} = scf.for {iv} = {begin} to {end} step {b.const(block_r, 'i32')} "
        f"iter_args({', '.join(f'{i} = {a}' for i, a in zip(iters, accs0))}) -> ({', '.join(acc_tys)}) : i32 {{"
    )
    b.indent += 1
    r = b.binary("arith.addi", b.splat(iv, "i32", tile), lanes, ty)
    mask = b.binary("arith.andi", row_ok, b.op(f"arith.cmpi slt, {r}, {b.splat(end, 'i32', tile)} : {ty}"), tensor_type(tile, "i1"))
    at = b.binary("arith.addi", b.binary("arith.muli", rows, b.splat(red_total, "i32", tile), ty), r, ty) if flat else None
    if not flat:
        _unflatten(b, r, gen.reduction, sizes, tile, index)
    values = {body.arguments[i]: gen.load_operand(addr, gen.in_args[i], gen.operand_dims[i], index, mask, at) for i in range(n_in)}
    out_args = [body.arguments[n_in + j] for j in range(len(gen.outs))]
    gen.run_body(addr, values, index, mask, tile, stop={c: None for c in combiners})
    new = []
    for j, c in enumerate(combiners):
        a, b2 = c.operands
        term = values[b2 if a == out_args[j] else a]
        masked = b.op(f"arith.select {mask}, {term}, {identity(c, out_elems[j], tile)} : {tensor_type(tile, 'i1')}, {acc_tys[j]}")
        new.append(b.binary(c.operation.name, iters[j], masked, acc_tys[j]))
    b.emit(f"scf.yield {', '.join(new)} : {', '.join(acc_tys)}")
    b.indent -= 1
    b.emit("}")
    partials = [_fold_rows(b, f"{results}#{j}", tile, 1, c.operation.name, elem) for j, (c, elem) in enumerate(zip(combiners, out_elems))]
    row_addr = _Addressing(b, (block_p,))
    row_mask = b.op(f"arith.cmpi slt, {rows1}, {b.splat(rows_total, 'i32', (block_p,))} : {tensor_type((block_p,), 'i32')}")
    off = b.binary("arith.addi", b.binary("arith.muli", rows1, b.splat(splits, "i32", (block_p,)), tensor_type((block_p,), "i32")),
                   b.splat(pid_s, "i32", (block_p,)), tensor_type((block_p,), "i32"))
    for j, elem in enumerate(out_elems):
        row_addr.store(row_addr.pointers(parts[j], elem, off), partials[j], elem, row_mask)
    _fold_partials(b, combiners, out_elems, parts, init_ptrs, inits, res, arrivals, pid_p, splits, rows1, row_mask,
                   block_p, identity)
    return b.text(), gen


FOLD_BLOCK = 256  # partials per row folded at once by the last program


def _fold_rows(b, value: str, shape: tuple[int, ...], axis: int, combiner: str, elem: str) -> str:
    """`tt.reduce` of a tile along `axis` with the scalar op `combiner`."""
    red, p, q, t = b.fresh(), b.fresh(), b.fresh(), b.fresh()
    rest = tuple(n for d, n in enumerate(shape) if d != axis)
    b.emit(f'{red} = "tt.reduce"({value}) <{{axis = {axis} : i32}}> ({{')
    b.emit(f"^bb0({p}: {elem}, {q}: {elem}):")
    b.emit(f"  {t} = {combiner} {p}, {q} : {elem}")
    b.emit(f"  tt.reduce.return {t} : {elem}")
    b.emit(f"}}) : ({tensor_type(shape, elem)}) -> {tensor_type(rest, elem)}")
    return red


def _broadcast_vector(b, vec: str, elem: str, shape: tuple[int, int], axis: int) -> str:
    """A vector along one axis of a 2-d tile, repeated along the other (`axis` is the new one)."""
    return _spread(b, vec, elem, shape, 1 - axis)


def _fold_partials(b, combiners, elems, parts, init_ptrs, inits, res, arrivals, pid_p, splits, rows1, row_mask,
                   block_p, identity) -> None:
    """The last of row block i's S programs to arrive folds part_j[rows, 0..S) and the initial
    values into res_j[rows] (folding them on the host took one ATen reduction and one binary op
    per out, and a fill of the initial value: more launches than the reduction itself for a full
    reduction). Arrival is counted with an acq_rel atomic on arrivals[i] after a CTA barrier (the
    barrier orders every thread's partial stores before thread 0's release); the last program
    reads the partials with volatile loads (past L1, which other SMs' writes do not update), and
    zeroes arrivals[i] for the next launch (launches on one stream do not overlap)."""
    b.emit("gpu.barrier")
    one, true = b.const(1, "i32"), b.op("arith.constant true")
    counter = b.op(f"tt.addptr {arrivals}, {pid_p} : !tt.ptr<i32>, i32")
    before = b.op(f"tt.atomic_rmw add, acq_rel, gpu, {counter}, {one}, {true} : (!tt.ptr<i32>, i32, i1) -> i32")
    last = b.op(f"arith.cmpi eq, {before}, {b.binary('arith.subi', splits, one, 'i32')} : i32")
    b.emit(f"scf.if {last} {{")
    b.indent += 1
    tile = (block_p, FOLD_BLOCK)
    ty = tensor_type(tile, "i32")
    rows_t = _broadcast_vector(b, rows1, "i32", tile, axis=1)
    lane1 = b.op(f"tt.make_range {{end = {FOLD_BLOCK} : i32, start = 0 : i32}} : {tensor_type((FOLD_BLOCK,), 'i32')}")
    lanes = _broadcast_vector(b, lane1, "i32", tile, axis=0)
    row_mask_t = _broadcast_vector(b, row_mask, "i1", tile, axis=1)
    acc_tys = [tensor_type(tile, e) for e in elems]
    iv, iters, folded = b.fresh(), [b.fresh() for _ in elems], b.fresh()
    accs0 = [identity(c, e, tile) for c, e in zip(combiners, elems)]
    b.emit(f"{folded}:{len(elems)} = scf.for {iv} = {b.const(0, 'i32')} to {splits} step {b.const(FOLD_BLOCK, 'i32')} "
           f"iter_args({', '.join(f'{i} = {a}' for i, a in zip(iters, accs0))}) -> ({', '.join(acc_tys)}) : i32 {{")
    b.indent += 1
    s = b.binary("arith.addi", b.splat(iv, "i32", tile), lanes, ty)
    mask = b.binary("arith.andi", row_mask_t, b.op(f"arith.cmpi slt, {s}, {b.splat(splits, 'i32', tile)} : {ty}"), tensor_type(tile, "i1"))
    off = b.binary("arith.addi", b.binary("arith.muli", rows_t, b.splat(splits, "i32", tile), ty), s, ty)
    addr = _Addressing(b, tile)
    new = []
    for j, (c, elem) in enumerate(zip(combiners, elems)):
        value = addr.load(addr.pointers(parts[j], elem, off), elem, mask, volatile=True)
        value = b.op(f"arith.select {mask}, {value}, {identity(c, elem, tile)} : {tensor_type(tile, 'i1')}, {acc_tys[j]}")
        new.append(b.binary(c.operation.name, iters[j], value, acc_tys[j]))
    b.emit(f"scf.yield {', '.join(new)} : {', '.join(acc_tys)}")
    b.indent -= 1
    b.emit("}")
    row_addr = _Addressing(b, (block_p,))
    for j, (c, elem) in enumerate(zip(combiners, elems)):
        red = _fold_rows(b, f"{folded}#{j}", tile, 1, c.operation.name, elem)
        if inits[j] is None:
            init = row_addr.load(row_addr.pointers(init_ptrs[j], elem, rows1), elem, row_mask)
        else:
            init = b.const(inits[j], elem, (block_p,))
        total = b.binary(c.operation.name, init, red, tensor_type((block_p,), elem))
        row_addr.store(row_addr.pointers(res[j], elem, rows1), total, elem, row_mask)
    b.emit(f"tt.store {counter}, {b.const(0, 'i32')} : !tt.ptr<i32>")
    b.indent -= 1
    b.emit("}")


# -- associative_scan → tt.scan -----------------------------------------------------------------


def elementwise_combine(op) -> bool:
    """The combine of a `tidal.associative_scan` only maps its slices elementwise (every generic
    all-parallel with identity maps over the slice shape): it can run on scalars inside `tt.scan`."""
    body = op.regions[0].blocks[0]
    for inner in body.operations:
        if inner.operation.name in ("tensor.empty", "arith.constant", "tidal.yield"):
            continue
        if inner.operation.name != "linalg.generic":
            return False
        if any("reduction" in str(a) for a in inner.attributes["iterator_types"]):
            return False
        for a in inner.attributes["indexing_maps"]:
            m = ir.AffineMapAttr(a).value
            if not m.is_permutation or any(e.maybe_downcast().position != i for i, e in enumerate(m.results)):
                return False
        for generic_op in inner.regions[0].blocks[0].operations:
            if generic_op.operation.name in ("linalg.index", "tensor.extract"):
                return False
    return True


def _combine_scalars(b: KernelBuilder, op, lhs: list[str], rhs: list[str], shape: tuple[int, ...]) -> list[str]:
    """The combine region of `op` applied elementwise to values of `shape` (() for scalars)."""
    body = op.regions[0].blocks[0]
    k = len(lhs)
    values = {body.arguments[i]: v for i, v in enumerate([*lhs, *rhs])}
    for inner in body.operations:
        if inner.operation.name == "tensor.empty":
            continue
        if inner.operation.name == "tidal.yield":
            return [values[v] for v in inner.operands]
        if inner.operation.name == "arith.constant":
            attr = inner.attributes["value"]
            if isinstance(attr, ir.DenseElementsAttr) and not ir.DenseElementsAttr(attr).is_splat:
                raise TidalUnsupported("GPU backend: a non-splat constant in a scan combine", inner.location)
            elem = element_type(ir.RankedTensorType(inner.results[0].type).element_type) if isinstance(inner.results[0].type, ir.RankedTensorType) else element_type(inner.results[0].type)
            text = str(attr)
            value = text.split("dense<", 1)[1].split(">", 1)[0] if text.startswith("dense<") else text.rsplit(" : ", 1)[0]
            values[inner.results[0]] = b.const(value, elem, shape)
            continue
        g = inner.opview
        gbody = inner.regions[0].blocks[0]
        inner_values = {gbody.arguments[i]: values[v] for i, v in enumerate(g.inputs)}
        for gop in gbody.operations:
            if gop.operation.name == "linalg.yield":
                for r, v in zip(inner.results, gop.operands):
                    values[r] = inner_values[v]
                break
            operands = []
            for v in gop.operands:
                if v not in inner_values:
                    if isinstance(v.owner, ir.OpView) and v.owner.operation.name == "arith.constant":
                        inner_values[v] = translate_op(b, v.owner, [], shape)[0]
                    else:
                        raise TidalUnsupported("GPU backend: a scan combine reads a value from outside", gop.location)
                operands.append(inner_values[v])
            for r, name in zip(gop.results, translate_op(b, gop, operands, shape)):
                inner_values[r] = name
    raise AssertionError(f"combine of {k} operands without tidal.yield")


@dataclass(frozen=True)
class ScanLayout:
    """Where element (t, c) of a scan's [T, C] rows is: t·row_stride + (c / inner)·outer_stride +
    (c % inner)·inner_stride (kernel arguments). The columns are the operand's other dims merged
    into at most two runs, so a scan along T of a [B, T, D] tensor reads and writes it in place,
    coalesced along D, where a contiguous [T, B·D] copy would cost two more passes over memory.

    `unit_runs` (a kernel variant): inner_stride is 1 and no program's block of columns crosses a
    run (or the runs are contiguous, outer_stride = inner), so a block's offsets are one base plus
    a range: Triton then knows them contiguous (vector accesses, and the look-back tile's layout
    keeping each thread's rows in its registers). Otherwise every column's offset is computed."""

    row_stride: str
    inner: str
    inner_stride: str
    outer_stride: str
    unit_runs: bool

    @staticmethod
    def args(b: KernelBuilder, unit_runs: bool) -> "ScanLayout":
        return ScanLayout(*(b.scalar_arg(n) for n in ("RS", "CI", "IS", "CS")), unit_runs)

    def column_offsets(self, b: KernelBuilder, first: str, cols: str, block_c: int) -> str:
        """Offsets of columns `cols` (first + 0 .. block_c - 1)."""
        c_i32 = tensor_type((block_c,), "i32")
        if self.unit_runs:
            base = b.binary("arith.addi", b.binary("arith.muli", b.op(f"arith.divsi {first}, {self.inner} : i32"),
                                                   self.outer_stride, "i32"),
                            b.op(f"arith.remsi {first}, {self.inner} : i32"), "i32")
            return b.binary("arith.addi", b.splat(base, "i32", (block_c,)),
                            b.op(f"tt.make_range {{end = {block_c} : i32, start = 0 : i32}} : {c_i32}"), c_i32)
        outer = b.op(f"arith.divsi {cols}, {b.splat(self.inner, 'i32', (block_c,))} : {c_i32}")
        inner = b.op(f"arith.remsi {cols}, {b.splat(self.inner, 'i32', (block_c,))} : {c_i32}")
        return b.binary("arith.addi", b.binary("arith.muli", outer, b.splat(self.outer_stride, "i32", (block_c,)), c_i32),
                        b.binary("arith.muli", inner, b.splat(self.inner_stride, "i32", (block_c,)), c_i32), c_i32)


def _scan_order_addresses(b: KernelBuilder, tile: tuple[int, ...], position: str, start: str, end: str, length: str,
                          row_stride: str, col_off_t: str, col_ok: str, reverse: bool) -> tuple[str, str, str]:
    """Offsets, mask and rows t of a tile of [T, C] rows (`ScanLayout`: row t at t·row_stride,
    column offsets `col_off_t`) whose element at `position` (an i32 tile: its place among the
    tile's rows in scan order) is row start + position of the scan, in range below `end`;
    `reverse` scans read row T-1 first."""
    t_i32 = tensor_type(tile, "i32")
    s = b.binary("arith.addi", b.splat(start, "i32", tile), position, t_i32)
    t = (b.binary("arith.subi", b.splat(b.binary("arith.subi", length, b.const(1, "i32"), "i32"), "i32", tile), s, t_i32)
         if reverse else s)
    in_range = b.op(f"arith.cmpi slt, {s}, {b.splat(end, 'i32', tile)} : {t_i32}")
    mask = b.binary("arith.andi", in_range, col_ok, tensor_type(tile, "i1"))
    off = b.binary("arith.addi", b.binary("arith.muli", t, b.splat(row_stride, "i32", tile), t_i32), col_off_t, t_i32)
    return off, mask, t


class _RowsScan:
    """Emits the inclusive scan along dim 0 of rows [begin, end) (in scan order) of k [T, C]
    contiguous tensors, for the `block_c` columns `cols`, in tiles of `block_t` rows: `tt.scan`
    within a tile, the carry of the rows before combined in (lhs: the earlier prefix). `reverse`
    reads rows from the end, so the scan inside a tile runs forward and padding rows come last."""

    def __init__(self, b: KernelBuilder, op, elems: list[str], xs: list[str], block_t: int, block_c: int,
                 cols: str, length: str, width: str, reverse: bool, row_stride: str, col_offsets: str):
        self.b, self.op, self.elems, self.xs = b, op, elems, xs
        self.block_t, self.block_c, self.cols, self.length, self.width, self.reverse = block_t, block_c, cols, length, width, reverse
        self.row_stride = row_stride
        self.tile = tile = (block_t, block_c)
        t_i32 = tensor_type(tile, "i32")
        self.cols_t = _broadcast_vector(b, cols, "i32", tile, axis=0)
        self.col_off_t = _broadcast_vector(b, col_offsets, "i32", tile, axis=0)
        rows1 = b.op(f"tt.make_range {{end = {block_t} : i32, start = 0 : i32}} : {tensor_type((block_t,), 'i32')}")
        self.rows_t = _broadcast_vector(b, rows1, "i32", tile, axis=1)
        self.col_ok = b.op(f"arith.cmpi slt, {self.cols_t}, {b.splat(width, 'i32', tile)} : {t_i32}")
        self.last_row = b.op(f"arith.cmpi eq, {self.rows_t}, {b.const(block_t - 1, 'i32', tile)} : {t_i32}")
        self.addr = _Addressing(b, tile)

    def _tile(self, start: str, end: str, ys: list, carry: list[str] | None, carry_valid: str | None) -> list[str]:
        """Scan rows [start, start + block_t), store them; returns the last row. `carry` is
        combined in where `carry_valid` (an i1; always when None)."""
        return self.finish(*self.load_scan(start, end), ys, carry, carry_valid)

    def load_scan(self, start: str, end: str) -> tuple[list[str], str, str]:
        """The tile of rows [start, start + block_t) loaded and scanned: (values, offsets, mask)."""
        b, tile = self.b, self.tile
        off, mask, rows = _scan_order_addresses(b, tile, self.rows_t, start, end, self.length, self.row_stride,
                                                self.col_off_t, self.col_ok, self.reverse)
        tiles = _load_operands(b, self.addr, self.xs, self.elems, off, mask, tile, (rows, self.row_stride, self.length))
        return _tt_scan(b, self.op, tiles, self.elems, tile), off, mask

    def finish(self, values: list[str], off: str, mask: str, ys: list, carry: list[str] | None,
               carry_valid: str | None) -> list[str]:
        """A scanned tile with `carry` combined in (where `carry_valid`), stored to `ys`; returns
        its last row."""
        b, tile, elems = self.b, self.tile, self.elems
        if carry is not None:
            spread = [_broadcast_vector(b, c, e, tile, axis=0) for c, e in zip(carry, elems)]
            combined = _combine_scalars(b, self.op, spread, values, tile)
            if carry_valid is None:
                values = combined
            else:  # a combine has no known identity to start the first rows from: pick instead
                valid = b.splat(carry_valid, "i1", tile)
                values = [b.op(f"arith.select {valid}, {c}, {v} : {tensor_type(tile, 'i1')}, {tensor_type(tile, e)}")
                          for c, v, e in zip(combined, values, elems)]
        for y, v, e in zip(ys, values, elems):
            if y is not None:
                self.addr.store(self.addr.pointers(y, e, off), v, e, mask)
        return _last_rows(b, values, elems, tile, self.last_row)

    def run(self, begin: str, end: str, ys: list) -> None:
        """The rows' scan, stored to `ys` (None entries: not stored); each tile's last row carries
        into the next."""
        b, k = self.b, len(self.elems)
        first = self._tile(begin, end, ys, None, None)
        carry_tys = [tensor_type((self.block_c,), e) for e in self.elems]
        iv, iters, results = b.fresh(), [b.fresh() for _ in range(k)], b.fresh()
        b.emit(
            f"{results}:{k} = scf.for {iv} = {b.binary('arith.addi', begin, b.const(self.block_t, 'i32'), 'i32')} to {end} "
            f"step {b.const(self.block_t, 'i32')} "
            f"iter_args({', '.join(f'{i} = {c}' for i, c in zip(iters, first))}) -> ({', '.join(carry_tys)}) : i32 {{"
        )
        b.indent += 1
        new = self._tile(iv, end, ys, iters, None)
        b.emit(f"scf.yield {', '.join(new)} : {', '.join(carry_tys)}")
        b.indent -= 1
        b.emit("}")


def _spread(b: KernelBuilder, vec: str, elem: str, shape: tuple[int, ...], axis: int) -> str:
    """A vector along `axis` of a tile of `shape`, repeated along every other axis."""
    cur = (shape[axis],)
    for d in range(len(shape)):
        if d != axis:
            nxt = cur[:d] + (1,) + cur[d:]
            vec = b.op(f"tt.expand_dims {vec} {{axis = {d} : i32}} : {tensor_type(cur, elem)} -> {tensor_type(nxt, elem)}")
            cur = nxt
    return b.op(f"tt.broadcast {vec} : {tensor_type(cur, elem)} -> {tensor_type(shape, elem)}")


def _spread_runs(b: KernelBuilder, value: str, elem: str, shape: tuple[int, int, int]) -> str:
    """A [G, C] tile repeated along the middle axis of a [G, K, C] one."""
    g, _, c = shape
    e = b.op(f"tt.expand_dims {value} {{axis = 1 : i32}} : {tensor_type((g, c), elem)} -> {tensor_type((g, 1, c), elem)}")
    return b.op(f"tt.broadcast {e} : {tensor_type((g, 1, c), elem)} -> {tensor_type(shape, elem)}")


# Rows each thread scans in its registers in a look-back chunk (`_GroupedTile`).
LOOKBACK_RUN = 16


class _GroupedTile:
    """A look-back chunk of `block_t` rows as a [G, K, block_c] tile holding row g*K + j at
    [g, j]: Triton gives the threads the G and column axes and repeats the tile along K, so the
    scan along K runs inside each thread's registers. The G group totals then get an exclusive
    scan across threads (G·C elements, not G·K·C) and each row combines its group's prefix.
    [1M, 16] f32 linear recurrence on an H200, prototype side by side: 94.6 us against 112.5
    for a [512, 16] `tt.scan` (whose layout walks the rows across lanes and warps: 600 shuffles
    a thread against 208); without the look-back the two tile scans took 56.6 and 80.8 us.

    A combine has no known identity, so the exclusive prefixes scan (E, has E, L) triples:
    [E1 L1] then [E2 L2] is [(E1 L1 E2) L2], with E absent for a group of its own."""

    def __init__(self, b: KernelBuilder, op, elems: list[str], xs: list[str], block_t: int, block_c: int,
                 cols: str, length: str, width: str, reverse: bool, row_stride: str, col_offsets: str):
        self.b, self.op, self.elems, self.xs = b, op, elems, xs
        self.length, self.width, self.reverse, self.row_stride = length, width, reverse, row_stride
        run = min(LOOKBACK_RUN, block_t)
        groups = block_t // run
        self.tile = tile = (groups, run, block_c)
        self.groups_tile = (groups, block_c)
        t_i32 = tensor_type(tile, "i32")

        def arange(n):
            return b.op(f"tt.make_range {{end = {n} : i32, start = 0 : i32}} : {tensor_type((n,), 'i32')}")

        g3, j3 = _spread(b, arange(groups), "i32", tile, 0), _spread(b, arange(run), "i32", tile, 1)
        self.position = b.binary("arith.addi", b.binary("arith.muli", g3, b.const(run, "i32", tile), t_i32), j3, t_i32)
        self.cols_t = _spread(b, cols, "i32", tile, 2)
        self.col_off_t = _spread(b, col_offsets, "i32", tile, 2)
        self.col_ok = b.op(f"arith.cmpi slt, {self.cols_t}, {b.splat(width, 'i32', tile)} : {t_i32}")
        self.last_in_run = b.op(f"arith.cmpi eq, {j3}, {b.const(run - 1, 'i32', tile)} : {t_i32}")
        g2 = _broadcast_vector(b, arange(groups), "i32", self.groups_tile, axis=1)
        self.last_group = b.op(f"arith.cmpi eq, {g2}, {b.const(groups - 1, 'i32', self.groups_tile)} : {tensor_type(self.groups_tile, 'i32')}")
        self.addr = _Addressing(b, tile)

    def load_scan(self, start: str, end: str):
        """Rows [start, start + block_t) (in scan order) loaded and scanned within their groups.
        Returns the tile state `finish` takes and the chunk's total ([C] vectors; a partial last
        chunk's is garbage, read by none)."""
        b, tile, elems, op = self.b, self.tile, self.elems, self.op
        off, mask, rows = _scan_order_addresses(b, tile, self.position, start, end, self.length, self.row_stride,
                                                self.col_off_t, self.col_ok, self.reverse)
        loaded = _load_operands(b, self.addr, self.xs, elems, off, mask, tile, (rows, self.row_stride, self.length))
        runs = _tt_scan(b, op, loaded, elems, tile, axis=1)
        totals = _last_rows(b, runs, elems, tile, self.last_in_run, axis=1)  # [G, C] per group
        before, has_before = self._exclusive(totals)
        gt = self.groups_tile
        with_before = _combine_scalars(b, op, before, totals, gt)
        has = b.op(f"arith.cmpi ne, {has_before}, {b.const(0, 'i32', gt)} : {tensor_type(gt, 'i32')}")
        through = [b.op(f"arith.select {has}, {w}, {v} : {tensor_type(gt, 'i1')}, {tensor_type(gt, e)}")
                   for w, v, e in zip(with_before, totals, elems)]
        total = _last_rows(b, through, elems, gt, self.last_group)
        return (runs, before, has, off, mask), total

    def _exclusive(self, totals: list[str]) -> tuple[list[str], str]:
        """Each group's prefix of the groups before it, and an i32 tile nonzero where there is one."""
        b, op, elems, gt = self.b, self.op, self.elems, self.groups_tile
        k = len(elems)
        tys = [tensor_type(gt, e) for e in [*elems, "i32", *elems]]
        scanned = b.fresh()
        e1, e2 = [b.fresh() for _ in elems], [b.fresh() for _ in elems]
        l1, l2 = [b.fresh() for _ in elems], [b.fresh() for _ in elems]
        f1, f2 = b.fresh(), b.fresh()
        b.emit(f'{scanned}:{2 * k + 1} = "tt.scan"({", ".join([*totals, b.const(0, "i32", gt), *totals])}) '
               f'<{{axis = 0 : i32, reverse = false}}> ({{')
        args = [*zip(e1, elems), (f1, "i32"), *zip(l1, elems), *zip(e2, elems), (f2, "i32"), *zip(l2, elems)]
        b.emit(f"^bb0({', '.join(f'{v}: {e}' for v, e in args)}):")
        b.indent += 1
        zero = b.const(0, "i32")

        def pick(flag, yes, no):
            cond = b.op(f"arith.cmpi ne, {flag}, {zero} : i32")
            return [b.op(f"arith.select {cond}, {y}, {n} : {e}") for y, n, e in zip(yes, no, elems)]

        middle = pick(f1, _combine_scalars(b, op, e1, l1, ()), l1)
        before = pick(f2, _combine_scalars(b, op, middle, e2, ()), middle)
        b.emit(f"tt.scan.return {', '.join([*before, b.const(1, 'i32'), *l2])} : {', '.join([*elems, 'i32', *elems])}")
        b.indent -= 1
        b.emit(f"}}) : ({', '.join(tys)}) -> ({', '.join(tys)})")
        return [f"{scanned}#{i}" for i in range(k)], f"{scanned}#{k}"

    def finish(self, state, ys: list, prefix: list[str], has_prefix: str) -> None:
        """The tile with each group's prefix (the chunk's `prefix` where `has_prefix`, then the
        groups before it) combined in, stored to `ys` (None entries: not stored)."""
        b, op, elems, tile, gt = self.b, self.op, self.elems, self.tile, self.groups_tile
        runs, before, has_before, off, mask = state
        gt_i1 = tensor_type(gt, "i1")
        spread = [_broadcast_vector(b, p, e, gt, axis=0) for p, e in zip(prefix, elems)]
        chunk_too = b.splat(has_prefix, "i1", gt)
        both = _combine_scalars(b, op, spread, before, gt)
        groups_only = [b.op(f"arith.select {chunk_too}, {x}, {y} : {gt_i1}, {tensor_type(gt, e)}") for x, y, e in zip(both, before, elems)]
        entering = [b.op(f"arith.select {has_before}, {x}, {y} : {gt_i1}, {tensor_type(gt, e)}") for x, y, e in zip(groups_only, spread, elems)]
        apply = b.binary("arith.ori", has_before, chunk_too, gt_i1)
        entering3 = [_spread_runs(b, v, e, tile) for v, e in zip(entering, elems)]
        apply3 = _spread_runs(b, apply, "i1", tile)
        combined = _combine_scalars(b, op, entering3, runs, tile)
        values = [b.op(f"arith.select {apply3}, {c}, {v} : {tensor_type(tile, 'i1')}, {tensor_type(tile, e)}")
                  for c, v, e in zip(combined, runs, elems)]
        for y, v, e in zip(ys, values, elems):
            if y is not None:
                self.addr.store(self.addr.pointers(y, e, off), v, e, mask)


def _column_block_start(op, name: str, block_c: int, unit_runs: bool, live, prologues):
    """A scan kernel of one program per block of `block_c` columns: `_scan_kernel_start`'s values,
    then T, C, the `ScanLayout`, the block's first column and its columns."""
    b, elems, xs, ys, reverse = _scan_kernel_start(op, name, live, prologues)
    length, width = b.scalar_arg("T"), b.scalar_arg("C")
    layout = ScanLayout.args(b, unit_runs)
    c_i32 = tensor_type((block_c,), "i32")
    c0 = b.binary("arith.muli", b.op("tt.get_program_id x : i32"), b.const(block_c, "i32"), "i32")
    cols = b.binary("arith.addi", b.splat(c0, "i32", (block_c,)), b.op(f"tt.make_range {{end = {block_c} : i32, start = 0 : i32}} : {c_i32}"), c_i32)
    return b, elems, xs, ys, reverse, length, width, layout, c0, cols


def scan_kernel(op, name: str, block_t: int, block_c: int, unit_runs: bool = True, *,
                live: tuple[bool, ...] | None = None, prologues: tuple | None = None) -> Kernel:
    """Inclusive scan along dim 0 of k [T, C] tensors (`ScanLayout`), one program per block of
    `block_c` columns walking every row in tiles of `block_t` rows (`_RowsScan`): the form for
    scans too short to fill the GPU with chunks (`lookback_scan_kernel` takes the others).
    `live[i]`: scan output i is used (only those get a y pointer and are stored). C is a plain
    argument, so rows are read one element per load: with C declared a multiple of 16 (16-byte
    vector loads) the look-back took as long at 16 columns and 13% longer at 64 on the H100."""
    b, elems, xs, ys, reverse, length, width, layout, c0, cols = _column_block_start(op, name, block_c, unit_runs, live, prologues)
    _RowsScan(b, op, elems, xs, block_t, block_c, cols, length, width, reverse, layout.row_stride,
              layout.column_offsets(b, c0, cols, block_c)).run(b.const(0, "i32"), length, ys)
    return b.text()


def wide_scan_kernel(op, name: str, block_t: int, block_c: int, unit_runs: bool = True, *,
                     live: tuple[bool, ...] | None = None, prologues: tuple | None = None) -> Kernel:
    """Inclusive scan along dim 0 of k [T, C] tensors (`ScanLayout`), one program per block of
    `block_c` columns walking every row in look-back-sized chunks (`_GroupedTile`: each thread
    scans runs of rows in its registers), the chunk's total carried into the next in registers:
    the form for scans whose columns alone fill the GPU ([B, T, D] with thousands of channels),
    where a look-back would only add waits (`_ScanPlan`: measured there)."""
    b, elems, xs, ys, reverse, length, width, layout, c0, cols = _column_block_start(op, name, block_c, unit_runs, live, prologues)
    tile = _GroupedTile(b, op, elems, xs, block_t, block_c, cols, length, width, reverse, layout.row_stride,
                        layout.column_offsets(b, c0, cols, block_c))
    state, first = tile.load_scan(b.const(0, "i32"), b.op(f"arith.minsi {b.const(block_t, 'i32')}, {length} : i32"))
    tile.finish(state, ys, first, b.op("arith.constant false"))
    k = len(elems)
    carry_tys = [tensor_type((block_c,), e) for e in elems]
    iv, iters, results = b.fresh(), [b.fresh() for _ in range(k)], b.fresh()
    b.emit(f"{results}:{k} = scf.for {iv} = {b.const(block_t, 'i32')} to {length} step {b.const(block_t, 'i32')} "
           f"iter_args({', '.join(f'{i} = {c}' for i, c in zip(iters, first))}) -> ({', '.join(carry_tys)}) : i32 {{")
    b.indent += 1
    end = b.op(f"arith.minsi {b.binary('arith.addi', iv, b.const(block_t, 'i32'), 'i32')}, {length} : i32")
    state, total = tile.load_scan(iv, end)
    tile.finish(state, ys, iters, b.op("arith.constant true"))
    carried = _combine_scalars(b, op, iters, total, (block_c,))
    b.emit(f"scf.yield {', '.join(carried)} : {', '.join(carry_tys)}")
    b.indent -= 1
    b.emit("}")
    kernel = b.text()
    # a thread a run: one column's LOOKBACK_RUN rows
    return Kernel(kernel.name, kernel.text, kernel.signature, num_warps=max(1, min(8, block_t * block_c // (32 * LOOKBACK_RUN))))


def _load_operands(b: KernelBuilder, addr: _Addressing, xs: list, elems: list[str], off: str, mask: str,
                   tile: tuple[int, ...], rows: tuple[str, str, str]) -> list[str]:
    """The scan operands' tiles at offsets `off` (`rows`: the tile's rows t, the row stride and
    T): each loaded, computed from the tiles of its elementwise producer's inputs
    (`ScanPrologue`), or loaded from other rows of its source (`ShiftedOperand`)."""
    tiles = []
    for x, e in zip(xs, elems):
        if isinstance(x, ShiftedOperand):
            tiles.append(x.load(b, addr, e, off, mask, tile, *rows))
        elif isinstance(x, ScanPrologue):
            values = {arg: addr.load(addr.pointers(ptr, pe, off), pe, mask)
                      for arg, ptr, pe in zip(x.body.body.arguments, x.pointers, x.elems)}
            tiles.append(x.body.run_body(addr, values, {}, mask, tile)[0])
        else:
            tiles.append(addr.load(addr.pointers(x, e, off), e, mask))
    return tiles


@dataclass
class ScanPrologue:
    """A scan operand made by an elementwise generic (`exp(g)` of a gated recurrence) inside the
    scan kernel: its inputs loaded where the operand would be, its body applied in registers, so
    the operand never goes through memory."""

    body: GenericBody
    pointers: list[str]
    elems: list[str]


@dataclass(frozen=True)
class ScanShift:
    """A scan operand that is a tensor of its shape moved `shift` rows along the scan (row t holds
    the source's row t + shift), `fill` (a TTIR literal) in the rows that come from outside: the
    concat of a slice and a constant row an adjoint builds (G_t needs a_{t+1}; da_t needs
    h_{t-1}). The scan kernel reads the source where it is instead of a shifted copy."""

    shift: int
    fill: str


@dataclass(frozen=True)
class ShiftedOperand:
    pointer: str
    how: ScanShift

    def load(self, b: KernelBuilder, addr: _Addressing, elem: str, off: str, mask: str, tile: tuple[int, ...],
             rows: str, row_stride: str, length: str) -> str:
        t_i32, t_i1 = tensor_type(tile, "i32"), tensor_type(tile, "i1")
        source_rows = b.binary("arith.addi", rows, b.const(self.how.shift, "i32", tile), t_i32)
        inside = b.binary("arith.andi", b.op(f"arith.cmpi sge, {source_rows}, {b.const(0, 'i32', tile)} : {t_i32}"),
                          b.op(f"arith.cmpi slt, {source_rows}, {b.splat(length, 'i32', tile)} : {t_i32}"), t_i1)
        step = b.binary("arith.muli", row_stride, b.const(self.how.shift, "i32"), "i32")
        moved = b.binary("arith.addi", off, b.splat(step, "i32", tile), t_i32)
        value = addr.load(addr.pointers(self.pointer, elem, moved), elem, b.binary("arith.andi", mask, inside, t_i1))
        return b.op(f"arith.select {inside}, {value}, {b.const(self.how.fill, elem, tile)} : {t_i1}, {tensor_type(tile, elem)}")


def prologue_generic(op) -> bool:
    """`op` is a generic a scan kernel can apply to its inputs' tiles: elementwise, one result,
    every input read through the identity map (no broadcast, no index, nothing captured but
    constants), and its out's initial value unread."""
    if op.operation.name != "linalg.generic" or len(op.results) != 1:
        return False
    body = GenericBody(op, "probe")
    if body.reduction or body.captured or body.flat_reads() is None or not all(body.flat_reads()[: len(body.ins)]):
        return False
    n_in = len(body.ins)
    return not list(body.body.arguments[n_in].uses) and bool(body.ins)


def _scan_kernel_start(op, name: str, live: tuple[bool, ...] | None, prologues: tuple | None = None):
    """A scan kernel's builder and first arguments: (builder, element types, x pointers (or
    `ScanPrologue`s for the operands whose elementwise producer `prologues` names, or
    `ShiftedOperand`s where it names a `ScanShift`), y pointers
    (None for outputs nothing reads), reverse)."""
    k = ir.IntegerAttr(op.attributes["num_xs"]).value
    elems = [element_type(ir.RankedTensorType(v.type).element_type) for v in list(op.operands)[:k]]
    b = KernelBuilder(name)
    xs = []
    for i, e in enumerate(elems):
        producer = prologues[i] if prologues else None
        if producer is None or isinstance(producer, ScanShift):
            pointer = b.pointer_arg(f"x{i}", e)
            xs.append(pointer if producer is None else ShiftedOperand(pointer, producer))
            continue
        body = GenericBody(producer, name, b)
        in_elems = [_tensor_rank_and_elem(v)[1] for v in body.ins]
        xs.append(ScanPrologue(body, [b.pointer_arg(f"x{i}_{j}", pe) for j, pe in enumerate(in_elems)], in_elems))
    ys = [b.pointer_arg(f"y{i}", e) if used else None for i, (e, used) in enumerate(zip(elems, live or (True,) * k))]
    return b, elems, xs, ys, ir.BoolAttr(op.attributes["reverse"]).value


def lookback_scan_kernel(op, name: str, block_t: int, block_c: int, window: int, unit_runs: bool = True,
                         live: tuple[bool, ...] | None = None, prologues: tuple | None = None) -> Kernel:
    """Inclusive scan along dim 0 of k [T, C] tensors (`ScanLayout`) in ONE pass over the data: a
    decoupled look-back (CUB's single-pass scan) over chunks of one tile of `block_t` rows,
    held in registers from load to store (`_GroupedTile`: each thread scans runs of rows).

    Each program takes the next (chunk, column block) from an atomic counter (`vid`, chunk-major:
    every chunk a program waits for belongs to a program already running), scans its tile,
    publishes the tile's total (`aggs`, flag 1), and looks back over the `window` chunks before
    it at once: when none of those after the nearest inclusive prefix (flag 2) is still
    unpublished, their records combine in one segmented `tt.scan` (restarting at that prefix);
    without one in the window it moves a window further back. It then publishes its own
    inclusive prefix (`incs`, flag 2) and stores the tile with the prefix combined in. Looking
    back one chunk per step (an L2 round trip each) made every program wait out ~100 steps,
    since that many chunks are between their total and their prefix at full bandwidth.

    Publishing: values stored, a CTA barrier, then thread 0's release atomic on the flag;
    reading: acquire atomics on the flags, then volatile loads (past L1, which other SMs' stores
    do not update). `flags` and `counter` are zero at launch (the caller zeroes them).

    Where the time goes ([1M, 16] f32 on an H200, 88.6 us, 56% of copy; without the look-back
    the same tile runs at 85%). A 64 KiB tile takes ~237 registers a thread, so 2 programs fit an
    SM (ncu: occupancy 12.5%, limited by registers), and a program spends about as long in its
    look-back (4.4 us median, waiting for the slowest of the chunks just before it to publish)
    as loading its tile (4.4 us), with nothing else in flight: DRAM 36% busy. Tried (in a
    prototype or here) and not faster: acquire loads or a sleep instead of atomic polls, windows of
    16-256, an L2 prefetch of the tile 132-528 tickets ahead, (value, epoch) words without
    fences, a lag of one chunk (re-read from L2, or held in registers), persistent programs
    prefetching into registers, register caps of 168/200 (spills), runs of 4/8/32 rows, 32 or
    128 KiB tiles. Tiles in shared memory (a Gluon prototype, TTGIR-level control: cp.async
    copies, the tile read back in [8-16, 16, 16] sub-tiles, so ~100-130 registers) were slower
    too: the copies alone ran at 86% of copy, the scan without its look-back at 64-69%, and with
    the look-back 176-230 us (persistent programs copying their next ticket's tile during the
    current look-back: that ticket's total is published a whole tile later, and its successors
    wait for it) or 140 us (its total published before the current look-back, three tiles held);
    one ticket a program as here, 72 registers and 3 programs an SM, 102.5-105.6 us (smaller tiles,
    more programs: 116-173). A lag of one ticket with group records did not pay either (Triton
    prototype, H200, against 94.5-96.5 for this kernel): each program reads its next ticket's tile
    for the total alone and publishes it (the last of a group of 32 tiles to arrive publishes the
    group's total), then finishes its previous ticket, whose predecessors had a whole load to
    publish, looking back over group records and the tile totals of its own group (two rounds),
    re-reading the tile from L2: 98-103 us; with the next tile's loads in flight during that
    finish (its tile re-read or kept in registers): 117-185 us, 117-121 with every publication
    relaxed (no fences, measured only). Waiting there on a later ticket (the own group's total)
    deadlocks: a program can hold two tickets of one group. Group records without the lag (the
    window reaching back 32 groups of 16-64 tiles, not 32 tiles) changed nothing: 96.4-98.1 us
    against 95.2, 117-125 with 32 KiB tiles and 3 programs an SM. What the look-back waits for is the
    slowest recent chunk's total, and more programs in flight make that wait longer, not shorter.
    Nor did taking the waits away (prototype, H100, against 104.7 us for this kernel): static
    tickets (program p takes chunks p, p+P, ...) and a lag of one held in registers, the next
    chunk's loads in flight during the previous chunk's look-back, so every total a look-back
    reads was published an iteration before: 155-162 us, at 255 registers one program an SM.
    The one design measured faster (Gluon prototype, H100, one process: 94-97 us against 104-105
    for this kernel, 70-72% of copy; not built: it needs shared memory, so a TTGIR kernel): static
    tickets and a lag of one with the held chunk's tile-inclusive values in shared memory (2
    programs an SM), records as words that are valid once they differ from a sentinel NaN
    payload (no flags or fences: a look-back step is one round trip; float types only), windows
    of 16. Its ceiling without any look-back is 88 us (77%): it does not reach 80% either. The
    lag alone with flags took 125 us, the sentinel words alone 105-110, the held chunk in an L2
    scratch slot instead of shared memory 130-134.
    TMA rings do not have the room either (Gluon prototypes, H100, one process, against 95 us for
    that design and 70 us for torch.addcmul, the same traffic elementwise): persistent programs
    whose next chunks' tiles TMA copies into a ring of shared-memory slots run at 78-83 us
    (83-87% of copy) with no look-back at all. With one: each program combining the totals of
    the P-1 chunks since its own previous one (no chain through other programs; a lag of one
    chunk, held in its slot) 96.5-182 us; the sentinel-word look-back with that lag 110-169; one
    designated program an iteration scanning that iteration's totals and publishing every
    chunk's prefix (a lag of two) 149-214."""
    b, elems, xs, ys, reverse = _scan_kernel_start(op, name, live, prologues)
    aggs = [b.pointer_arg(f"agg{i}", e) for i, e in enumerate(elems)]
    incs = [b.pointer_arg(f"inc{i}", e) for i, e in enumerate(elems)]
    flags, counter = b.pointer_arg("flags", "i32"), b.pointer_arg("counter", "i32")
    length, width, col_blocks = b.scalar_arg("T"), b.scalar_arg("C"), b.scalar_arg("CB")
    layout = ScanLayout.args(b, unit_runs)
    c_i32 = tensor_type((block_c,), "i32")
    zero, one, two, true = b.const(0, "i32"), b.const(1, "i32"), b.const(2, "i32"), b.op("arith.constant true")
    vid = b.op(f"tt.atomic_rmw add, acq_rel, gpu, {counter}, {one}, {true} : (!tt.ptr<i32>, i32, i1) -> i32")
    pid = b.op(f"arith.remsi {vid}, {col_blocks} : i32")
    chunk = b.op(f"arith.divsi {vid}, {col_blocks} : i32")
    c0 = b.binary("arith.muli", pid, b.const(block_c, "i32"), "i32")
    cols = b.binary("arith.addi", b.splat(c0, "i32", (block_c,)),
                    b.op(f"tt.make_range {{end = {block_c} : i32, start = 0 : i32}} : {c_i32}"), c_i32)
    col_mask = b.op(f"arith.cmpi slt, {cols}, {b.splat(width, 'i32', (block_c,))} : {c_i32}")
    tile = _GroupedTile(b, op, elems, xs, block_t, block_c, cols, length, width, reverse, layout.row_stride,
                        layout.column_offsets(b, c0, cols, block_c))
    begin = b.binary("arith.muli", chunk, b.const(block_t, "i32"), "i32")
    end = b.op(f"arith.minsi {b.binary('arith.addi', begin, b.const(block_t, 'i32'), 'i32')}, {length} : i32")
    tile_state, total = tile.load_scan(begin, end)
    row_addr = _Addressing(b, (block_c,))
    vec_tys = [tensor_type((block_c,), e) for e in elems]

    def publish(records, values, flag_value):
        for rec, e, v in zip(records, elems, values):
            off = b.binary("arith.addi", b.splat(b.binary("arith.muli", chunk, width, "i32"), "i32", (block_c,)), cols, c_i32)
            row_addr.store(row_addr.pointers(rec, e, off), v, e, col_mask)
        b.emit("gpu.barrier")
        mine = b.op(f"tt.addptr {flags}, {vid} : !tt.ptr<i32>, i32")
        b.op(f"tt.atomic_rmw exch, release, gpu, {mine}, {flag_value}, {true} : (!tt.ptr<i32>, i32, i1) -> i32")

    has_prefix = b.op(f"arith.cmpi sgt, {chunk}, {zero} : i32")
    b.emit(f"scf.if {has_prefix} {{")
    b.indent += 1
    publish(aggs, total, one)
    b.indent -= 1
    b.emit("}")
    prefix = _look_back(b, op, elems, aggs, incs, flags, chunk, pid, col_blocks, cols, col_mask, width, block_c, window)
    with_prefix = _combine_scalars(b, op, prefix, total, (block_c,))
    inclusive = [b.op(f"arith.select {has_prefix}, {w}, {t} : {ty}") for w, t, ty in zip(with_prefix, total, vec_tys)]
    publish(incs, inclusive, two)
    tile.finish(tile_state, ys, prefix, has_prefix)
    kernel = b.text()
    return Kernel(kernel.name, kernel.text, kernel.signature, num_warps=LOOKBACK_WARPS)


LOOKBACK_WARPS = 4


def _look_back(b: KernelBuilder, op, elems: list[str], aggs: list[str], incs: list[str], flags: str, chunk: str,
               pid: str, col_blocks: str, cols: str, col_mask: str, width: str, block_c: int, window: int) -> list[str]:
    """The combine of chunks 0 .. chunk-1's records, looked back at a window of chunks per step
    (`lookback_scan_kernel`); meaningless for chunk 0."""
    k = len(elems)
    w_i32, w_i1 = tensor_type((window,), "i32"), tensor_type((window,), "i1")
    tile = (window, block_c)
    t_i32, t_i1 = tensor_type(tile, "i32"), tensor_type(tile, "i1")
    vec_tys = [tensor_type((block_c,), e) for e in elems]
    loop_tys = ["i32", *vec_tys, "i1"]
    lanes = b.op(f"tt.make_range {{end = {window} : i32, start = 0 : i32}} : {w_i32}")
    last_lane = _broadcast_vector(b, b.op(f"arith.cmpi eq, {lanes}, {b.const(window - 1, 'i32', (window,))} : {w_i32}"),
                                  "i1", tile, axis=1)
    cols_t = _broadcast_vector(b, cols, "i32", tile, axis=0)
    col_mask_t = _broadcast_vector(b, col_mask, "i1", tile, axis=0)
    addr = _Addressing(b, tile)
    j, accs, have, results = b.fresh(), [b.fresh() for _ in elems], b.fresh(), b.fresh()
    inits = [b.const("0.000000e+00" if e.startswith(("f", "bf")) else 0, e, (block_c,)) for e in elems]
    start = b.binary("arith.subi", chunk, b.const(1, "i32"), "i32")
    b.emit(f"{results}:{k + 2} = scf.while ({j} = {start}, {', '.join(f'{a} = {v}' for a, v in zip(accs, inits))}, "
           f"{have} = {b.op('arith.constant false')}) : ({', '.join(loop_tys)}) -> ({', '.join(loop_tys)}) {{")
    b.indent += 1
    go = b.op(f"arith.cmpi sge, {j}, {b.const(0, 'i32')} : i32")
    b.emit(f"scf.condition({go}) {j}, {', '.join(accs)}, {have} : {', '.join(loop_tys)}")
    b.indent -= 1
    b.emit("} do {")
    bj, baccs, bhave = b.fresh(), [b.fresh() for _ in elems], b.fresh()
    b.emit(f"^bb0({bj}: i32, {', '.join(f'{a}: {t}' for a, t in zip(baccs, vec_tys))}, {bhave}: i1):")
    b.indent += 1
    first = b.binary("arith.subi", bj, b.const(window - 1, "i32"), "i32")
    idx = b.binary("arith.addi", b.splat(first, "i32", (window,)), lanes, w_i32)
    valid = b.op(f"arith.cmpi sge, {idx}, {b.const(0, 'i32', (window,))} : {w_i32}")
    flag_off = b.binary("arith.addi", b.binary("arith.muli", idx, b.splat(col_blocks, "i32", (window,)), w_i32),
                        b.splat(pid, "i32", (window,)), w_i32)
    flag_ptrs = _Addressing(b, (window,)).pointers(flags, "i32", flag_off)
    state = b.op(f"tt.atomic_rmw add, acquire, gpu, {flag_ptrs}, {b.const(0, 'i32', (window,))}, {valid} "
                 f": ({tensor_type((window,), '!tt.ptr<i32>')}, {w_i32}, {w_i1}) -> {w_i32}")
    state = b.op(f"arith.select {valid}, {state}, {b.const(2, 'i32', (window,))} : {w_i1}, {w_i32}")  # before chunk 0: done
    is_inc = b.op(f"arith.cmpi eq, {state}, {b.const(2, 'i32', (window,))} : {w_i32}")
    last_inc = _fold_rows(b, b.op(f"arith.select {is_inc}, {idx}, {b.const(-window - 1, 'i32', (window,))} : {w_i1}, {w_i32}"),
                          (window,), 0, "arith.maxsi", "i32")
    after = b.op(f"arith.cmpi sgt, {idx}, {b.splat(last_inc, 'i32', (window,))} : {w_i32}")
    unpublished = b.binary("arith.andi", after, b.op(f"arith.cmpi eq, {state}, {b.const(0, 'i32', (window,))} : {w_i32}"), w_i1)
    waiting = _fold_rows(b, b.op(f"arith.extui {unpublished} : {w_i1} to {w_i32}"), (window,), 0, "arith.maxsi", "i32")
    ready = b.op(f"arith.cmpi eq, {waiting}, {b.const(0, 'i32')} : i32")
    step = b.fresh()
    b.emit(f"{step}:{k + 2} = scf.if {ready} -> ({', '.join(loop_tys)}) {{")
    b.indent += 1
    use_inc = b.op(f"arith.cmpi eq, {idx}, {b.splat(last_inc, 'i32', (window,))} : {w_i32}")
    use_inc_t = _broadcast_vector(b, use_inc, "i1", tile, axis=1)
    inc_mask = b.binary("arith.andi", use_inc_t, col_mask_t, t_i1)
    agg_mask = b.binary("arith.andi", _broadcast_vector(b, after, "i1", tile, axis=1), col_mask_t, t_i1)
    off = b.binary("arith.addi", b.binary("arith.muli", _broadcast_vector(b, idx, "i32", tile, axis=1),
                                          b.splat(width, "i32", tile), t_i32), cols_t, t_i32)
    records = []
    for inc, agg, e in zip(incs, aggs, elems):
        from_inc = addr.load(addr.pointers(inc, e, off), e, inc_mask, volatile=True)
        from_agg = addr.load(addr.pointers(agg, e, off), e, agg_mask, volatile=True)
        records.append(b.op(f"arith.select {use_inc_t}, {from_inc}, {from_agg} : {t_i1}, {tensor_type(tile, e)}"))
    restart = b.op(f"arith.extui {use_inc_t} : {t_i1} to {t_i32}")
    window_total = _last_rows(b, _segmented_scan(b, op, restart, records, elems, tile), elems, tile, last_lane)
    combined = _combine_scalars(b, op, window_total, baccs, (block_c,))  # the window is the earlier part
    new_accs = [b.op(f"arith.select {bhave}, {c}, {w} : {t}") for c, w, t in zip(combined, window_total, vec_tys)]
    found = b.op(f"arith.cmpi sge, {last_inc}, {first} : i32")
    new_j = b.op(f"arith.select {found}, {b.const(-1, 'i32')}, {b.binary('arith.subi', bj, b.const(window, 'i32'), 'i32')} : i32")
    b.emit(f"scf.yield {new_j}, {', '.join(new_accs)}, {b.op('arith.constant true')} : {', '.join(loop_tys)}")
    b.indent -= 1
    b.emit("} else {")  # a chunk in the window has not published its total yet: look again
    b.indent += 1
    b.emit(f"scf.yield {bj}, {', '.join(baccs)}, {bhave} : {', '.join(loop_tys)}")
    b.indent -= 1
    b.emit("}")
    b.emit(f"scf.yield {', '.join(f'{step}#{i}' for i in range(k + 2))} : {', '.join(loop_tys)}")
    b.indent -= 1
    b.emit("}")
    return [f"{results}#{i + 1}" for i in range(k)]


def _segmented_scan(b: KernelBuilder, op, restart: str, values: list[str], elems: list[str],
                    shape: tuple[int, int]) -> list[str]:
    """`tt.scan` along axis 0 with `op`'s combine, started afresh at each row where `restart`
    (an i32 tile) is nonzero: rows before the last restart do not reach the last row."""
    k = len(values)
    tys = [tensor_type(shape, e) for e in ["i32", *elems]]
    scanned, r1, r2 = b.fresh(), b.fresh(), b.fresh()
    lhs, rhs = [b.fresh() for _ in elems], [b.fresh() for _ in elems]
    b.emit(f'{scanned}:{k + 1} = "tt.scan"({restart}, {", ".join(values)}) <{{axis = 0 : i32, reverse = false}}> ({{')
    b.emit(f"^bb0({r1}: i32, {', '.join(f'{v}: {e}' for v, e in zip(lhs, elems))}, "
           f"{r2}: i32, {', '.join(f'{v}: {e}' for v, e in zip(rhs, elems))}):")
    b.indent += 1
    out = _combine_scalars(b, op, lhs, rhs, ())
    again = b.op(f"arith.cmpi ne, {r2}, {b.const(0, 'i32')} : i32")
    picked = [b.op(f"arith.select {again}, {r}, {o} : {e}") for r, o, e in zip(rhs, out, elems)]
    b.emit(f"tt.scan.return {b.binary('arith.ori', r1, r2, 'i32')}, {', '.join(picked)} : i32, {', '.join(elems)}")
    b.indent -= 1
    b.emit(f"}}) : ({', '.join(tys)}) -> ({', '.join(tys)})")
    return [f"{scanned}#{i + 1}" for i in range(k)]


def _tt_scan(b: KernelBuilder, op, tiles: list[str], elems: list[str], shape: tuple[int, ...], axis: int = 0) -> list[str]:
    """`tt.scan` along `axis` with `op`'s combine."""
    k = len(tiles)
    tys = [tensor_type(shape, e) for e in elems]
    scanned = b.fresh()
    lhs, rhs = [b.fresh() for _ in elems], [b.fresh() for _ in elems]
    b.emit(f'{scanned}:{k} = "tt.scan"({", ".join(tiles)}) <{{axis = {axis} : i32, reverse = false}}> ({{')
    b.emit(f"^bb0({', '.join(f'{v}: {e}' for v, e in zip([*lhs, *rhs], [*elems, *elems]))}):")
    b.indent += 1
    out = _combine_scalars(b, op, lhs, rhs, ())
    b.emit(f"tt.scan.return {', '.join(out)} : {', '.join(elems)}")
    b.indent -= 1
    b.emit(f"}}) : ({', '.join(tys)}) -> ({', '.join(tys)})")
    return [f"{scanned}#{i}" for i in range(k)]


def _last_rows(b: KernelBuilder, values: list[str], elems: list[str], shape: tuple[int, ...], last_row: str,
               axis: int = 0) -> list[str]:
    """The slice where `last_row` (an i1 tile true at one index of `axis`) holds, of each tile:
    an [R, C] tile's last row as a [C] vector."""
    rows = []
    for v, e in zip(values, elems):
        zero = b.const("0.000000e+00" if e.startswith(("f", "bf")) else 0, e, shape)
        picked = b.op(f"arith.select {last_row}, {v}, {zero} : {tensor_type(shape, 'i1')}, {tensor_type(shape, e)}")
        rows.append(_fold_rows(b, picked, shape, axis, "arith.addf" if e.startswith(("f", "bf")) else "arith.addi", e))
    return rows


# -- a whole tidal.while in one kernel -------------------------------------------------------------------

WHILE_BLOCK = 256


@dataclass
class WhileLaunch:
    """A `tidal.while` run by one kernel: each program loops over its block of the shaped carries
    (0-d carries and consts in every program alike), storing the final carries once."""

    kernel: Kernel
    shaped: list[bool]  # per carry, then per const: of the loop's common shape (else 0-d)
    block: int


def _elementwise_region_ops(block, shape_rank: int) -> bool:
    """Every op of a while region can run per element: elementwise generics over the common shape
    or over 0-d values (reading only their inputs), constants, empties, the yield."""
    for op in block.operations:
        name = op.operation.name
        if name in ("tensor.empty", "tidal.yield"):
            continue
        if name == "arith.constant":
            if isinstance(op.results[0].type, ir.RankedTensorType):
                return False
            continue
        if name != "linalg.generic":
            return False
        g = GenericBody(op, "probe")
        if g.reduction or g.captured:
            return False
        if any(inner.operation.name in ("linalg.index", "tensor.extract") for inner in g.body.operations):
            return False
        rank = len(g.iterators)
        if rank not in (0, shape_rank):
            return False
        for m in g.maps:
            dims = _map_dims(m)
            if rank and dims != list(range(rank)):
                return False
        n_in = len(g.ins)
        if any(len(list(g.body.arguments[n_in + j].uses)) for j in range(len(g.outs))):
            return False
    return True


def device_while_shape(op) -> tuple[int, ...] | None:
    """The common static shape of a `tidal.while`'s shaped carries when the whole loop can run in
    one kernel, else None. The condition is then computed from 0-d values only (a 0-d value of a
    region without reductions depends on 0-d values alone), so every program takes the same trip
    count: no cross-program communication."""
    if "stack_outputs" in op.attributes and ir.BoolAttr(op.attributes["stack_outputs"]).value:
        return None
    shapes = set()
    for v in op.operands:
        if not isinstance(v.type, ir.RankedTensorType):
            return None
        t = ir.RankedTensorType(v.type)
        if not t.has_static_shape:
            return None
        if t.rank:
            shapes.add(tuple(t.shape))
    if len(shapes) > 1:
        return None
    shape = shapes.pop() if shapes else ()
    if not all(_elementwise_region_ops(r.blocks[0], len(shape)) for r in op.regions):
        return None
    return shape


def while_kernel(op, name: str, shape: tuple[int, ...]) -> WhileLaunch:
    """The loop as `scf.while` inside the kernel: the shaped carries and consts as tiles of
    WHILE_BLOCK elements, the 0-d ones as scalars (the condition is then a scalar `scf.condition`,
    the same in every lane and program, and a 0-d counter costs one scalar op per iteration); the
    regions' generics emitted as straight-line code, a 0-d value splatted where a tile reads it."""
    n = ir.IntegerAttr(op.attributes["num_carries"]).value
    operands = list(op.operands)
    shaped = [ir.RankedTensorType(v.type).rank > 0 for v in operands]
    block = WHILE_BLOCK
    tile = (block,)
    b = KernelBuilder(name)
    addr = _Addressing(b, tile)
    elems = [_tensor_rank_and_elem(v)[1] for v in operands]
    in_ptrs = [b.pointer_arg(f"in{i}", e) for i, e in enumerate(elems)]
    out_ptrs = [b.pointer_arg(f"out{j}", elems[j]) for j in range(n)]
    numel = b.scalar_arg("numel")
    pid, idx, in_range = _program_block(b, block, numel)

    loaded = [addr.load(addr.pointers(ptr, e, idx), e, in_range) if s else addr.load_scalar(ptr, e)
              for ptr, e, s in zip(in_ptrs, elems, shaped)]
    types = [tensor_type(tile, e) if s else e for e, s in zip(elems[:n], shaped[:n])]

    def emit_region(region_block, args: list[str]) -> list[str]:
        values = dict(zip(region_block.arguments, args))
        is_tile = {a: s for a, s in zip(region_block.arguments, shaped)}
        for inner in region_block.operations:
            kind = inner.operation.name
            if kind == "tidal.yield":
                return [values[v] for v in inner.operands]
            if kind in ("tensor.empty", "arith.constant"):
                continue  # a generic re-emits the constants it reads, at its own shape
            g = GenericBody(inner, "probe")
            g.b = b
            rank_shape = tile if g.iterators else ()
            body_values = {}
            for i, v in enumerate(g.ins):
                value = values[v]
                if g.iterators and not is_tile[v]:
                    value = b.splat(value, _tensor_rank_and_elem(v)[1], tile)
                body_values[g.body.arguments[i]] = value
            for r, v in zip(inner.results, g.run_body(addr, body_values, {}, None, rank_shape)):
                values[r], is_tile[r] = v, bool(g.iterators)
        raise AssertionError("while region without tidal.yield")

    cond_block, body_block = op.regions[0].blocks[0], op.regions[1].blocks[0]
    const_values = loaded[n:]
    before = [b.fresh() for _ in range(n)]
    after = [b.fresh() for _ in range(n)]
    results = b.fresh()
    b.emit(f"{results}:{n} = scf.while ({', '.join(f'{a} = {v}' for a, v in zip(before, loaded[:n]))}) "
           f": ({', '.join(types)}) -> ({', '.join(types)}) {{")
    b.indent += 1
    (pred,) = emit_region(cond_block, [*before, *const_values])
    b.emit(f"scf.condition({pred}) {', '.join(before)} : {', '.join(types)}")
    b.indent -= 1
    b.emit("} do {")
    b.emit(f"^bb0({', '.join(f'{a}: {ty}' for a, ty in zip(after, types))}):")
    b.indent += 1
    new = emit_region(body_block, [*after, *const_values])
    b.emit(f"scf.yield {', '.join(new)} : {', '.join(types)}")
    b.indent -= 1
    b.emit("}")
    scalar_results = [j for j in range(n) if not shaped[j]]
    for j in range(n):
        if shaped[j]:
            addr.store(addr.pointers(out_ptrs[j], elems[j], idx), f"{results}#{j}", elems[j], in_range)
    if scalar_results:  # the 0-d carries: the same in every program, stored by the first
        first = b.op(f"arith.cmpi eq, {pid}, {b.const(0, 'i32')} : i32")
        b.emit(f"scf.if {first} {{")
        b.indent += 1
        for j in scalar_results:
            value, mem = f"{results}#{j}", memory_type(elems[j])
            if mem != elems[j]:
                value = b.op(f"arith.extui {value} : {elems[j]} to {mem}")
            b.emit(f"tt.store {out_ptrs[j]}, {value} : !tt.ptr<{mem}>")
        b.indent -= 1
        b.emit("}")
    return WhileLaunch(b.text(), shaped, block)
