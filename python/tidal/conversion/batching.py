"""A region's body over a batch of its arguments: `vmap` at the linalg level.

`batched_function(block, batched)` builds a detached `func.func` whose arguments marked in
`batched` carry a new leading dim of dynamic size N, and whose results are the block's results
for each of the N slices, stacked on that dim. Arguments not marked (an associative_scan's or a
map's captured values) are shared by every slice.

Why: on the GPU an associative_scan whose combine is not one elementwise kernel (matrix
products, operands of different shapes) ran one combine per position from the host, and a
`tidal.map` one body per row. Batched, the combine runs on all pairs of a level of the odd/even
scan at once (2·log2(T) launches of each of its kernels instead of T) and the map body once.

Each op whose operands are all shared is cloned as it is. An op reading a batched value gets
the leading dim: a `linalg.generic` a new outer parallel loop (its `linalg.index` dims shift),
its output a batched init; named linalg ops, slices, reshapes and casts the same dim in their
attributes; an ATen matmul call broadcasts over it. Region ops are batched through their bodies:
a cond runs both branches and selects per slice, a while_loop runs while any slice's predicate
holds, a scan runs one dim further in, an inner map is flattened into the batch. Anything else
(another ATen call, a scalar extracted from a batched tensor) raises `Unbatchable` naming the op,
and the caller keeps its per-slice form.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch_mlir import ir
from torch_mlir.dialects import arith, func, linalg, tensor

DYNAMIC = ir.ShapedType.get_dynamic_size()

# ATen calls whose batched form is the same call with the batch dim broadcast (operands of rank >= 2)
_MATMUL_CALLS = {"aten::mm", "aten::bmm", "aten::matmul"}
_PURE = ("tensor.empty", "arith.constant", "tensor.dim", "linalg.fill")
_TERMINATORS = ("tidal.yield", "func.return", "scf.yield", "linalg.yield")


class Unbatchable(Exception):
    def __init__(self, op, why: str):
        super().__init__(f"'{op.name}' {why}")
        self.op = op


def _batched_type(t: ir.Type) -> ir.RankedTensorType:
    t = ir.RankedTensorType(t)
    return ir.RankedTensorType.get([DYNAMIC, *t.shape], t.element_type, t.encoding)


def _i64_array(values) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def _shifted_map(m: ir.AffineMap, batched: bool) -> ir.AffineMap:
    """`m` over one more loop dim, d0, the old dims renumbered from d1; d0 first in its results when
    the operand is batched."""
    shift = ir.AffineMap.get(m.n_dims + 1, m.n_symbols, [ir.AffineDimExpr.get(i + 1) for i in range(m.n_dims)])
    moved = [e.compose(shift) for e in m.results]
    return ir.AffineMap.get(m.n_dims + 1, m.n_symbols, ([ir.AffineDimExpr.get(0)] if batched else []) + moved)


class _Batcher:
    def __init__(self, old: ir.Block, new: ir.Block, batched: Sequence[bool], values: Sequence[ir.Value] | None = None):
        """Batches `old`'s ops into `new`, `old`'s arguments standing for `values` (by default
        `new`'s arguments), batched where marked."""
        values = list(new.arguments) if values is None else list(values)
        self.body = new
        self.ip = ir.InsertionPoint(new)
        self.map: dict = dict(zip(old.arguments, values))
        self.batched: set = {v for v, b in zip(values, batched) if b}
        first = next(v for v, b in zip(values, batched) if b)
        with self.ip:
            zero = arith.ConstantOp(ir.IndexType.get(), 0).result
            self.n = tensor.DimOp(first, zero).result  # N, for every batched tensor.empty

    def run(self, old: ir.Block) -> list:
        """Batch `old`'s ops (its arguments already mapped); the new values it yields."""
        for op in old.operations:
            if op.operation.name in _TERMINATORS:
                return [self.map[v] for v in op.operands]
            self.visit(op)
        raise ValueError("block has no terminator")

    def erase_unused(self):
        """The shared inits the batched ops replaced."""
        for op in reversed(list(self.body.operations)):
            if op.operation.name in _PURE and not any(list(r.uses) for r in op.results):
                op.operation.erase()

    # -- helpers ---------------------------------------------------------------------------------

    def is_batched(self, new_value) -> bool:
        return new_value in self.batched

    def _new(self, op, results, operands, attributes=None):
        attrs = {k: op.attributes[k] for k in op.attributes} if attributes is None else attributes
        with self.ip, op.location:
            new = ir.Operation.create(op.name, results=results, operands=operands, attributes=attrs)
        self._took(op, new)
        return new

    def _took(self, old, new, batched_results=True):
        for o, n in zip(old.results, new.results):
            self.map[o] = n
            if batched_results:
                self.batched.add(n)

    def _empty(self, t: ir.RankedTensorType, sizes) -> ir.Value:
        """tensor.empty of `t` with the batch dim in front; `sizes` its dynamic sizes (new values)."""
        with self.ip:
            empty = ir.Operation.create("tensor.empty", results=[_batched_type(t)], operands=[self.n, *sizes]).result
        self.batched.add(empty)
        return empty

    def _sizes_of(self, value: ir.Value) -> list:
        """The dynamic sizes of a slice of a new value (shared or batched), read with tensor.dim."""
        skip = 1 if self.is_batched(value) else 0
        sizes = []
        with self.ip:
            for i, s in enumerate(ir.RankedTensorType(value.type).shape[skip:]):
                if s == DYNAMIC:
                    sizes.append(tensor.DimOp(value, arith.ConstantOp(ir.IndexType.get(), i + skip).result).result)
        return sizes

    def broadcast(self, value: ir.Value) -> ir.Value:
        """A shared value as a batched one (every slice the same)."""
        if self.is_batched(value):
            return value
        t = ir.RankedTensorType(value.type)
        init = self._empty(t, self._sizes_of(value))
        with self.ip:
            out = ir.Operation.create(
                "linalg.broadcast", results=[init.type], operands=[value, init],
                attributes={"dimensions": _i64_array([0])}, regions=1)
            block = out.regions[0].blocks.append(t.element_type, t.element_type)
            with ir.InsertionPoint(block):
                ir.Operation.create("linalg.yield", operands=[block.arguments[0]])
        self.batched.add(out.result)
        return out.result

    def batched_init(self, old_out: ir.Value) -> ir.Value:
        """The batched version of a shared output init: a fresh batched tensor.empty, a fill of
        one (reductions fold a filled literal), or a broadcast of anything else."""
        new = self.map[old_out]
        if self.is_batched(new):
            return new
        owner = old_out.owner if isinstance(old_out, ir.OpResult) else None
        name = owner.name if owner is not None else None
        t = ir.RankedTensorType(old_out.type)
        if name == "tensor.empty":
            return self._empty(t, [self.map[v] for v in owner.operands])
        if name == "linalg.fill" and isinstance(owner.operands[1], ir.OpResult) and owner.operands[1].owner.name == "tensor.empty":
            init = self._empty(t, [self.map[v] for v in owner.operands[1].owner.operands])
            fill = self._clone_remapped(owner)
            fill.operands[1] = init
            fill.results[0].set_type(init.type)
            self.batched.add(fill.results[0])
            return fill.results[0]
        return self.broadcast(new)

    def _batched_reads_inside(self, op) -> list:
        """(op, operand number) of each read of a batched value inside `op`'s regions."""
        found = []

        def visit(inner):
            for i, v in enumerate(inner.operands):
                if v in self.map and self.is_batched(self.map[v]):
                    found.append((inner, i))
            return ir.WalkResult.ADVANCE

        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    inner.operation.walk(visit)
        return found

    # -- ops ---------------------------------------------------------------------------------------

    def _clone_remapped(self, op):
        """`op` cloned here, its operands and the values its regions capture read through the map."""
        new = op.clone(ip=self.ip)

        def remap(inner):
            for i, v in enumerate(list(inner.operands)):
                if v in self.map:
                    inner.operands[i] = self.map[v]
            return ir.WalkResult.ADVANCE

        new.walk(remap)
        return new

    def clone(self, op):
        self._took(op, self._clone_remapped(op), batched_results=False)

    def visit(self, op):
        op = op.operation
        operands = [self.map[v] for v in op.operands]
        reads = self._batched_reads_inside(op)
        # a gather-style generic (torch-mlir's broadcast of a dynamic size) reads its source with
        # tensor.extract: each slice's body reads its own slice (_op_linalg_generic)
        gathers = op.name == "linalg.generic" and all(r.name == "tensor.extract" and i == 0 for r, i in reads)
        if reads and not gathers:
            raise Unbatchable(op, "reads a batched value inside its region")
        if not reads and not any(self.is_batched(v) for v in operands):
            return self.clone(op)
        rule = getattr(self, "_op_" + op.name.replace(".", "_"), None)
        if rule is None:
            raise Unbatchable(op, "has no batching rule")
        rule(op, operands)

    def _op_linalg_generic(self, op, operands):
        g = op.opview
        n_in = len(g.inputs)
        new_operands = operands[:n_in] + [self.batched_init(o) for o in g.outputs]
        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        new_maps = [_shifted_map(m, self.is_batched(v)) for m, v in zip(maps, new_operands)]
        parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
        new = self._clone_remapped(op)
        for i, v in enumerate(new_operands):
            new.operands[i] = v
        new.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
        new.attributes["iterator_types"] = ir.ArrayAttr.get([parallel, *ir.ArrayAttr(op.attributes["iterator_types"])])

        def shift_index(inner):
            if inner.name == "linalg.index":
                inner.attributes["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                                             ir.IntegerAttr(inner.attributes["dim"]).value + 1)
            return ir.WalkResult.ADVANCE

        new.walk(shift_index)
        gathers = []

        def find_gathers(inner):
            if inner.name == "tensor.extract" and self.is_batched(inner.operands[0]):
                gathers.append(inner)
            return ir.WalkResult.ADVANCE

        new.walk(find_gathers)
        for extract in gathers:
            with ir.InsertionPoint(extract), extract.location:
                row = ir.Operation.create("linalg.index", results=[ir.IndexType.get()],
                                          attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)}).result
                read = tensor.ExtractOp(extract.operands[0], [row, *list(extract.operands)[1:]]).result
            extract.results[0].replace_all_uses_with(read)
            extract.erase()
        for r, o in zip(new.results, new_operands[n_in:]):
            r.set_type(o.type)
        self._took(op, new)

    def _op_linalg_fill(self, op, operands):
        raise Unbatchable(op, "fills a batched value")  # a fill's operands are a scalar and a fresh init

    def _named_with_init(self, op, operands, attributes=None):
        """A named linalg op of one init (the last operand), batched like its init."""
        ins = [self.broadcast(v) for v in operands[:-1]]
        init = self.batched_init(list(op.operands)[-1])
        new = self._clone_remapped(op)
        for i, v in enumerate([*ins, init]):
            new.operands[i] = v
        for k, v in (attributes or {}).items():
            new.attributes[k] = v
        for r in new.results:
            r.set_type(init.type)
        self._took(op, new)

    def _op_linalg_matmul(self, op, operands):
        a, b = self.broadcast(operands[0]), self.broadcast(operands[1])
        init = self.batched_init(op.operands[2])
        with self.ip, op.location:
            result = linalg.batch_matmul(a, b, outs=[init])
        self.map[op.results[0]] = result
        self.batched.add(result)

    def _op_linalg_copy(self, op, operands):
        self._named_with_init(op, operands)

    def _op_linalg_transpose(self, op, operands):
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        self._named_with_init(op, operands, {"permutation": _i64_array([0, *(p + 1 for p in perm)])})

    def _op_linalg_broadcast(self, op, operands):
        dims = list(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        self._named_with_init(op, operands, {"dimensions": _i64_array([d + 1 for d in dims])})

    def _reassociated(self, op, operands, extra_operands=(), attrs_update=None):
        """collapse/expand_shape: the batch dim a group of its own, or, where the unbatched op
        reshapes a 0-d tensor (no groups), in the one group with every dim."""
        groups = [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]
        if groups:
            groups = [[0]] + [[i + 1 for i in g] for g in groups]
        else:
            larger = max(ir.RankedTensorType(op.operands[0].type).rank, ir.RankedTensorType(op.results[0].type).rank)
            groups = [list(range(larger + 1))]
        i64 = ir.IntegerType.get_signless(64)
        attrs = {k: op.attributes[k] for k in op.attributes}
        attrs["reassociation"] = ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g]) for g in groups])
        attrs.update(attrs_update or {})
        self._new(op, [_batched_type(op.results[0].type)], [operands[0], *extra_operands, *operands[1:]], attrs)

    def _op_tensor_collapse_shape(self, op, operands):
        self._reassociated(op, operands)

    def _op_tensor_expand_shape(self, op, operands):
        static = list(ir.DenseI64ArrayAttr(op.attributes["static_output_shape"]))
        self._reassociated(op, operands, [self.n], {"static_output_shape": _i64_array([DYNAMIC, *static])})

    def _op_tensor_cast(self, op, operands):
        self._new(op, [_batched_type(op.results[0].type)], operands)

    def _sliced(self, op, operands, fixed: int):
        """extract_slice / insert_slice: offset 0, size N (a dynamic size), stride 1 on the batch dim."""
        segments = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        offsets_at = fixed
        sizes_at = offsets_at + segments[fixed]
        new_operands = operands[:sizes_at] + [self.n] + operands[sizes_at:]
        segments[fixed + 1] += 1
        attrs = {k: op.attributes[k] for k in op.attributes}
        static = {k: list(ir.DenseI64ArrayAttr(op.attributes[k])) for k in ("static_offsets", "static_sizes", "static_strides")}
        attrs["static_offsets"] = _i64_array([0, *static["static_offsets"]])
        attrs["static_sizes"] = _i64_array([DYNAMIC, *static["static_sizes"]])
        attrs["static_strides"] = _i64_array([1, *static["static_strides"]])
        attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(segments)
        return new_operands, attrs

    def _op_tensor_extract_slice(self, op, operands):
        new_operands, attrs = self._sliced(op, operands, 1)
        self._new(op, [_batched_type(op.results[0].type)], new_operands, attrs)

    def _op_tensor_insert_slice(self, op, operands):
        operands = [self.broadcast(operands[0]), self.batched_init(op.operands[1]), *operands[2:]]
        new_operands, attrs = self._sliced(op, operands, 2)
        self._new(op, [operands[1].type], new_operands, attrs)

    def _op_tensor_concat(self, op, operands):
        attrs = {k: op.attributes[k] for k in op.attributes}
        attrs["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ir.IntegerAttr(op.attributes["dim"]).value + 1)
        self._new(op, [_batched_type(op.results[0].type)], [self.broadcast(v) for v in operands], attrs)

    def _op_tensor_dim(self, op, operands):
        """The size of a dim of a batched tensor: the same for every slice, one dim on."""
        index = op.operands[1]
        if not (isinstance(index, ir.OpResult) and index.owner.name == "arith.constant"):
            raise Unbatchable(op, "reads a dim chosen at run time")
        with self.ip, op.location:
            at = arith.ConstantOp(ir.IndexType.get(), ir.IntegerAttr(index.owner.attributes["value"]).value + 1).result
            dim = tensor.DimOp(operands[0], at).result
        self.map[op.results[0]] = dim  # shared: a size, not a slice's value

    def _op_tidal_cond(self, op, operands):
        """Both branches batched inline, each result selected per slice by the (batched) predicate.
        Branches are pure; one whose untaken side would fail an assertion is not run for nothing."""
        results = []
        for region in op.regions:
            block = region.blocks[0]
            for arg, v in zip(block.arguments, operands[1:]):
                self.map[arg] = v
            for inner in block.operations:
                if inner.operation.name == "tidal.yield":
                    results.append([self.map[v] for v in inner.operands])
                    break
                if inner.operation.name == "cf.assert":
                    raise Unbatchable(op, "has a branch that asserts")
                self.visit(inner)
        pred = operands[0]
        for r, then_v, else_v in zip(op.results, *results):
            self.map[r] = self._select(pred, then_v, else_v, ir.RankedTensorType(r.type), op.location)
            self.batched.add(self.map[r])

    def _select(self, pred, then_v, else_v, t: ir.RankedTensorType, loc) -> ir.Value:
        """linalg.generic selecting, per slice, `then_v` where the 0-d (per slice) `pred` holds."""
        rank = t.rank + 1
        dims = [ir.AffineDimExpr.get(i) for i in range(rank)]
        maps = [ir.AffineMap.get(rank, 0, dims[:1] if self.is_batched(pred) else [])]
        maps += [ir.AffineMap.get(rank, 0, dims if self.is_batched(v) else dims[1:]) for v in (then_v, else_v)]
        maps.append(ir.AffineMap.get(rank, 0, dims))
        init = self._empty(t, self._sizes_of(then_v))
        parallel = ir.Attribute.parse("#linalg.iterator_type<parallel>")
        with self.ip, loc:
            g = ir.Operation.create(
                "linalg.generic", results=[init.type], operands=[pred, then_v, else_v, init],
                attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                            "iterator_types": ir.ArrayAttr.get([parallel] * rank),
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([3, 1])}, regions=1)
            body = g.regions[0].blocks.append(ir.IntegerType.get_signless(1), t.element_type, t.element_type, t.element_type)
            with ir.InsertionPoint(body):
                chosen = arith.SelectOp(body.arguments[0], body.arguments[1], body.arguments[2]).result
                ir.Operation.create("linalg.yield", operands=[chosen])
        return g.result

    def _op_tidal_while(self, op, operands):
        """Every slice's loop in one: carries batched, the loop runs while any slice's predicate
        holds, and a slice whose predicate is false keeps its carries (the body's are dropped by a
        select), so each slice ends where its own loop would."""
        if "stack_outputs" in op.attributes and ir.BoolAttr(op.attributes["stack_outputs"]).value:
            raise Unbatchable(op, "stacks its iterations (rows per slice would differ)")
        from tidal.dialects.build import build_yield, create_region_op

        n = ir.IntegerAttr(op.attributes["num_carries"]).value
        new_operands = [self.broadcast(v) for v in operands[:n]] + operands[n:]
        flags = [self.is_batched(v) for v in new_operands]
        types = [v.type for v in new_operands]
        with self.ip, op.location:
            loop = create_region_op("tidal.while", results=types[:n], operands=new_operands,
                                    attributes={"num_carries": op.attributes["num_carries"]}, region_arg_types=[types, types])
        cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]

        inner = _Batcher(cond, loop.regions[0].blocks[0], flags)
        (pred,) = inner.run(cond)
        with inner.ip, op.location:
            build_yield([inner.any(pred)])
        inner.erase_unused()

        inner = _Batcher(cond, loop.regions[1].blocks[0], flags)
        (pred,) = inner.run(cond)  # this iteration's predicate, per slice
        inner.map.update(zip(body.arguments, loop.regions[1].blocks[0].arguments))
        stepped = inner.run(body)
        kept = [inner._select(pred, new, old, ir.RankedTensorType(r.type), op.location)
                for new, old, r in zip(stepped, loop.regions[1].blocks[0].arguments, op.results)]
        with inner.ip, op.location:
            build_yield(kept)
        inner.erase_unused()
        self._took(op, loop)

    def _op_tidal_scan(self, op, operands):
        """The same scan one dim further in: carries and xs batched (a shared one broadcast), each
        step's slices batched, the stacked outputs batched in front of their scan dim."""
        from tidal.dialects.build import build_yield, create_region_op

        n, k = (ir.IntegerAttr(op.attributes[a]).value for a in ("num_carries", "num_xs"))
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        new_operands = [self.broadcast(v) for v in operands[:n + k]] + operands[n + k:]
        body = op.regions[0].blocks[0]
        arg_types = [_batched_type(a.type) if i < n + k else new_operands[i].type for i, a in enumerate(body.arguments)]
        flags = [i < n + k or self.is_batched(v) for i, v in enumerate(new_operands)]
        attrs = {a: op.attributes[a] for a in op.attributes}
        attrs["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim + 1)
        with self.ip, op.location:
            loop = create_region_op("tidal.scan", results=[_batched_type(r.type) for r in op.results], operands=new_operands,
                                    attributes=attrs, region_arg_types=[arg_types])
        block = loop.regions[0].blocks[0]
        inner = _Batcher(body, block, flags)
        stepped = [inner.broadcast(v) for v in inner.run(body)]
        with inner.ip, op.location:
            build_yield(stepped)
        inner.erase_unused()
        self._took(op, loop)

    def _op_tidal_map(self, op, operands):
        """A map inside: its body batched over both dims at once, the N slices' M rows flattened
        to N·M (batched captured values repeated M times), its results unflattened."""
        k = ir.IntegerAttr(op.attributes["num_xs"]).value
        xs = [self.broadcast(v) for v in operands[:k]]
        with self.ip, op.location:
            one = arith.ConstantOp(ir.IndexType.get(), 1).result
            rows = tensor.DimOp(xs[0], one).result
        flat = [self._flattened(x) for x in xs]
        consts = [self._flattened(self._repeated(v, rows)) if self.is_batched(v) else v for v in operands[k:]]
        body = op.regions[0].blocks[0]
        inner = _Batcher(body, self.body, [True] * k + [self.is_batched(v) for v in operands[k:]], flat + consts)
        results = [inner.broadcast(v) for v in inner.run(body)]
        for r, v in zip(op.results, results):
            t = _batched_type(r.type)  # [N, M, ...]
            i64 = ir.IntegerType.get_signless(64)
            groups = [[0, 1]] + [[i] for i in range(2, t.rank)]
            sizes = [self.n] + ([rows] if t.shape[1] == DYNAMIC else [])
            with self.ip, op.location:
                unflat = ir.Operation.create(
                    "tensor.expand_shape", results=[t], operands=[v, *sizes],
                    attributes={"reassociation": ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g]) for g in groups]),
                                "static_output_shape": _i64_array(t.shape)}).result
            self.map[r] = unflat
            self.batched.add(unflat)

    def _flattened(self, value: ir.Value) -> ir.Value:
        """[N, M, ...] as [N·M, ...]."""
        t = ir.RankedTensorType(value.type)
        i64 = ir.IntegerType.get_signless(64)
        groups = [[0, 1]] + [[i] for i in range(2, t.rank)]
        with self.ip:
            return ir.Operation.create(
                "tensor.collapse_shape", results=[ir.RankedTensorType.get([DYNAMIC, *t.shape[2:]], t.element_type)],
                operands=[value],
                attributes={"reassociation": ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g]) for g in groups])}).result

    def _repeated(self, value: ir.Value, rows: ir.Value) -> ir.Value:
        """A batched [N, ...] as [N, M, ...], each slice's value in its M rows."""
        t = ir.RankedTensorType(value.type)
        out_type = ir.RankedTensorType.get([DYNAMIC, DYNAMIC, *t.shape[1:]], t.element_type)
        with self.ip:
            init = ir.Operation.create("tensor.empty", results=[out_type],
                                       operands=[self.n, rows, *self._sizes_of(value)]).result
            out = ir.Operation.create("linalg.broadcast", results=[out_type], operands=[value, init],
                                      attributes={"dimensions": _i64_array([1])}, regions=1)
            block = out.regions[0].blocks.append(t.element_type, t.element_type)
            with ir.InsertionPoint(block):
                ir.Operation.create("linalg.yield", operands=[block.arguments[0]])
        return out.result

    def any(self, pred: ir.Value) -> ir.Value:
        """A 0-d i1: whether any slice's predicate holds."""
        if not self.is_batched(pred):
            return pred
        i1 = ir.IntegerType.get_signless(1)
        with self.ip:
            false = arith.ConstantOp(i1, 0).result
            init = ir.Operation.create("tensor.empty", results=[ir.RankedTensorType.get([], i1)]).result
            fill = ir.Operation.create("linalg.fill", results=[init.type], operands=[false, init],
                                       attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])}, regions=1)
            fb = fill.regions[0].blocks.append(i1, i1)
            with ir.InsertionPoint(fb):
                ir.Operation.create("linalg.yield", operands=[fb.arguments[0]])
            g = ir.Operation.create(
                "linalg.generic", results=[init.type], operands=[pred, fill.result],
                attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get(1, 0, [ir.AffineDimExpr.get(0)])),
                                                               ir.AffineMapAttr.get(ir.AffineMap.get(1, 0, []))]),
                            "iterator_types": ir.ArrayAttr.get([ir.Attribute.parse("#linalg.iterator_type<reduction>")]),
                            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])}, regions=1)
            body = g.regions[0].blocks.append(i1, i1)
            with ir.InsertionPoint(body):
                ir.Operation.create("linalg.yield", operands=[arith.OrIOp(body.arguments[0], body.arguments[1]).result])
        return g.result

    def _op_tidal_aten_call(self, op, operands):
        callee = ir.StringAttr(op.attributes["callee"]).value
        if callee not in _MATMUL_CALLS or any(ir.RankedTensorType(v.type).rank < 2 for v in op.operands):
            raise Unbatchable(op, f"calls {callee}, which has no batching rule")
        attrs = {k: op.attributes[k] for k in op.attributes}
        attrs["callee"], attrs["overload"] = ir.StringAttr.get("aten::matmul"), ir.StringAttr.get("")
        self._new(op, [_batched_type(r.type) for r in op.results], operands, attrs)

def batched_function(block: ir.Block, batched: Sequence[bool], name: str = "batched") -> func.FuncOp:
    """`block`'s body over a leading batch dim of the arguments marked in `batched` (see the module
    docstring); raises `Unbatchable` for an op it cannot batch. Needs the block's context and a
    location as the current ones; the function is detached (the caller keeps it alive)."""
    if not any(batched):
        raise ValueError("nothing to batch over")
    arg_types = [_batched_type(a.type) if b else a.type for a, b in zip(block.arguments, batched)]
    fn = func.FuncOp(name, (arg_types, []), visibility="private")
    b = _Batcher(block, fn.add_entry_block(), batched)
    try:
        results = [b.broadcast(v) for v in b.run(block)]
        with b.ip:
            func.ReturnOp(results)
        b.erase_unused()
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(arg_types, [r.type for r in results]))
        fn.verify()
    except ir.MLIRError as exc:  # a rule's mistake: the per-slice form still serves
        raise Unbatchable(fn.operation, f"could not be batched ({exc})") from exc
    return fn
