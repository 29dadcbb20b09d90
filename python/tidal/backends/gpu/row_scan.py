"""A scan whose step treats each batch row on its own (an RNN cell) as ONE persistent kernel.

Each program owns a block of ROWS batch rows (32 or 64 where a split would otherwise need more
programs than may run: `_split`) and runs the whole time loop (`scf.for`) inside: its
carries stay in registers from step to step, the weights (the step's matmul right-hand sides and
its broadcast vectors) are loaded once before the loop, each step loads its rows of the xs slices,
multiplies with `tt.dot` (fp32-accurate, see DOT_PRECISION) and stores its rows of
the stacked outputs. No host work and no launch per step. Where the weights fit the registers the
kernel is written at TTGIR level, with the weights held there (`_Layouts`).

A step qualifies when every value in it is a [B, W] tile of the same B rows: carries [B, W], xs
[T, B, W] scanned along dim 0, elementwise generics over [B, W] (a const vector [W] broadcast
along the rows), matmuls of a tile by a const matrix, column slices (an LSTM's or GRU's `chunk` of
its gates: see `_Analysis`), concats of tiles along the columns (an adjoint's gate cotangents) and
reductions along the columns into [B, 1] statistics (a LayerNorm's). Rows never mix (a matmul contracts along the columns), so programs of different rows need no communication. A
weight transposed in the step (an adjoint's Uᵀ) is loaded transposed. Tile widths are powers of
two of at least 16 (`tt.dot`'s smallest tile), f32 only; a width of a power of two times a small
odd factor (384 = 3·128) is split among a multiple of that factor of programs, each holding a
power of two of its columns (`MOST_ODD_FACTOR`). Weights that fit in shared memory
(`WEIGHT_BYTES_ON_CHIP`) stay on chip for the whole loop; bigger ones are split by columns among
programs sharing the rows, which exchange each matmul's left-hand side through L2 at a barrier
(`_split`; each keeps its slice of the weights in shared memory and reads it a K chunk at a
time), or, where a step cannot be split so (a LayerNorm), up to
`STREAMED_WEIGHT_BYTES` are streamed from L2 at every step, a K chunk at a time; anything else
runs as the host loop.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from torch_mlir import ir

from tidal.backends.gpu.kernels import GenericBody, _map_dims, split_combiners
from tidal.backends.gpu.ttir import Kernel, KernelBuilder, round_to_tf32, tensor_type

ROWS = 16  # batch rows per program: tt.dot's smallest M (32 rows ran 2.5x slower: half the programs)
NUM_WARPS = 8  # 4 warps: 0.61 ms instead of 0.50 for the RNN of bench/ (B=32, H=128, T=128)
# fp32 products as three TF32 tensor-core products (hi·hi + hi·lo + lo·hi): 2.3e-6 from eager's
# fp32 matmul on that RNN (IEEE FMA dot: 1.8e-6, but 16x slower; one TF32 product: 2.7e-3).
DOT_PRECISION = "tf32x3"
# Where the user allows TF32 for fp32 matmuls (torch.set_float32_matmul_precision("high") or
# "medium", as cuBLAS then computes them, and as cuDNN's RNNs do by default), one TF32 product of
# the rounded operands: a third of the tensor-core work, and weights of half the bytes.
# The weights stay in shared memory for the whole loop, each as its TF32 high and low parts: an
# [H, H] matrix takes 8·H² bytes (H = 128: 128 KiB). H100 and H200 have 227 KiB per SM, and
# Triton needs some for layout conversions; an RNN with H = 256 (512 KiB) asked for 544 KiB and
# failed to compile. Bigger weights are streamed (below).
WEIGHT_BYTES_ON_CHIP = 192 * 1024
# Weights past shared memory are streamed from L2 at every step (`streamed_products`), in chunks
# of STREAM_K rows. H200, B=32 H=128 T=128 (U 256 KiB): LSTM forward 1.19 ms with chunks of 16
# rows, 1.47 with 32; whole [128, 128] gate blocks through Triton's own conversions 2.11 (255
# registers and spills); the host loop 2.39. With 1 MiB (LSTM H=256, B=64 T=512) streaming took
# 24.2 ms (cuDNN 9.0), where the host loop took 5.86 ms for half the steps (T=256, issue #43):
# past STREAMED_WEIGHT_BYTES (f32) the scan takes the host loop.
STREAM_K = 16
STREAMED_WEIGHT_BYTES = 256 * 1024
# A chunked product's three TF32 products each accumulate in chains of their own (a chain of mma
# waits for each link), and where the products have fewer than CHAINED_BLOCKS column blocks (an
# RNN's one; an LSTM has four gates) each product in CHAINED_BLOCKS // blocks chains, its chunks
# taken in turn, summed after the last. H200, same process each: RNN B=64 H=256 T=512 1.94 -> 1.88
# ms forward (4.61 -> 4.22 forward+backward); LSTM B=32 H=128 T=128 forward+backward 1.82 -> 1.63
# (runs of one day). Only for resident weights (a program's few columns), where the accumulators
# take at most CHAIN_REGISTERS f32 a thread; else the two small products share one chain: the
# LayerNorm-LSTM's streamed [16, 128] gate blocks spilled (1.6 KiB; 2.97 ms forward, 1.56 before).
CHAINED_BLOCKS = 4
CHAIN_REGISTERS = 64
# Weights past shared memory are first split among programs instead (`_split`): P programs
# share a block of rows, each computing 1/P of the columns of every tile (its slice of each gate:
# the cell's elementwise update needs no other program's columns) with 1/P of each weight's
# columns on chip. Only a matmul's left-hand side is needed whole: each program stores its columns
# to global memory (L2), the P programs meet at a barrier (a counter in global memory) and each
# reads the whole tile back (`exchange`). The P programs of a block spin on each other, so all of
# them must run at once: the grid is kept to half the SMs (COLUMN_PROGRAMS_PER_SM), one program an SM.
# Tried instead of the counter: each f32 stored with its step's tag in one 64-bit word and read
# until every tag is the step's (no barrier, no counter). No faster, H200, one process, ms forward
# / forward+backward tags against counter: RNN B=64 H=256 T=512 2.15 / 4.86 vs 2.14 / 4.46, LSTM
# B=32 H=128 T=128 0.480 / 1.88 vs 0.465 / 1.58, LSTM B=64 H=256 T=512 3.51 / 11.1 vs 3.46 / 10.6.
COLUMN_PROGRAMS_PER_SM = 0.5
# A program's slice of the weights stays in shared memory for the whole loop, read back a K chunk
# of STREAM_K rows at a time every step, as a streamed weight is from L2; the left-hand side
# passes through shared memory a part at a time (a concat's parts: an adjoint's gate cotangents).
# Held in registers instead, a slice does not shrink per thread with more parts (each warp's 8
# columns of an mma tile span all of K: 8·H bytes a thread for an LSTM's U) and spilled. H200,
# fp32 (three TF32 products), ms forward / forward+backward against held slices: LSTM B=64 H=256
# T=512 4.22 / 11.4 (16 parts, TF32 parts) and 3.67 / 10.5 (8 parts, f32 values; held: the host
# loop, cuDNN 8.30 / 18.6); RNN B=64 H=512 T=256 1.64 / 3.95 (16 parts; held 2.92 / 17.3, cuDNN
# 5.06 / 9.34); GRU B=64 H=256 T=512 2.54 / 8.15 (16 parts; held 5.82 / 14.1, cuDNN 5.38 / 15.6);
# LSTM B=32 H=128 T=128 0.481 / 1.64 (8 parts), 0.498 / 1.63 (4; held 0.643 / 1.96, cuDNN 0.399 /
# 1.07); GRU B=32 H=128 T=128 0.424 / 1.44 (8 parts), 0.422 / 1.83 (4; held 0.614 / 1.87, cuDNN
# 0.207 / 1.13). Blocks of 32 rows were slower (RNN H=512: 2.21 / 5.15); they and 64 (BLOCK_ROWS,
# a warp for each 16 rows) serve where blocks of 16 would need more programs than may run.
PREFERRED_PARTS = 8
RESIDENT_SHARED_BYTES = 224 * 1024  # of 227 KiB an SM (H100, H200): a weights' slice, the lhs part
BLOCK_ROWS = (16, 32, 64)
# A width that is a power of two times an odd factor up to this (384 = 3·128, 320 = 5·64, 448 =
# 7·64) is shared among a multiple of that factor of programs, each holding a power of two of its
# columns: Triton's tensors are powers of two. Others take the host loop until tiles are masked.
MOST_ODD_FACTOR = 7
# tiles copied to shared memory and read back in column blocks: a streamed matmul's left-hand
# side (K chunks), a held tile's slices, a concat's parts
TILE_SHARED = "#tile_smem = #ttg.swizzled_shared<{vec = 4, perPhase = 1, maxPhase = 8, order = [1, 0]}>"
# Weights (both parts) that fit the registers per warp of the kernel (`_Layouts`): 16 KiB a warp
# is 128 registers a thread, half the register file with one program an SM.
REGISTER_WEIGHT_BYTES_PER_WARP = 16 * 1024


@dataclass
class RowScanLaunch:
    kernel: Kernel  # its last argument is T, the number of steps: one kernel serves every T
    operands: list  # the scan operands the kernel reads, in argument order
    rows: int  # B
    parts: int = 1  # programs sharing a block of rows, each computing 1/parts of every tile's columns
    exchange_floats: int = 0  # f32 scratch the parts exchange tiles through (`exchange`)
    arrivals: int = 0  # i32 counters (zeroed per launch) of the parts' arrivals at each exchange
    block_rows: int = ROWS  # batch rows a program computes
    weights: str = "held"  # "held" (loaded once before the loop), "streamed" or `_Split.weights`

    @property
    def blocks(self) -> int:
        return _blocks(self.rows, self.block_rows)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.blocks, self.parts, 1)


def _blocks(rows: int, block_rows: int = ROWS) -> int:
    """Blocks of `block_rows` batch rows (the last one partial)."""
    return -(-rows // block_rows)


def _shape(value, dynamic_first: bool = False) -> tuple[int, ...] | None:
    """A static f32 shape; with `dynamic_first`, its first dim may be dynamic (None): a scan's
    xs and stacked outputs over a dynamic number of steps."""
    if not isinstance(value.type, ir.RankedTensorType):
        return None
    t = ir.RankedTensorType(value.type)
    if str(t.element_type) != "f32":
        return None
    shape = [None if s == ir.ShapedType.get_dynamic_size() else s for s in t.shape]
    if any(s is None for s in shape[1 if dynamic_first else 0 :]):
        return None
    return tuple(shape)


def _width_ok(w: int) -> bool:
    return w >= 16 and w & (w - 1) == 0


def _odd_factor(w: int) -> int:
    """w without its factors of two: 3 for 384 = 3·128."""
    return w // (w & -w)


def _splittable_width(w: int) -> bool:
    """A width not a power of two that programs can still share out in power-of-two columns: a
    multiple of 16 whose odd factor is small (384 = 3·128, 320 = 5·64: 3 or 5 programs or a
    power of two times that each hold a power of two of its columns)."""
    return w >= 16 and w % 16 == 0 and _odd_factor(w) <= MOST_ODD_FACTOR


def _producer(value):
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner


F32_COMBINERS = ("arith.addf", "arith.mulf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf")


def _constant_fill(value):
    """The constant a linalg.fill of a constant fills `value` with (a reduction's initial value), else None."""
    fill = _producer(value)
    if fill is None or fill.operation.name != "linalg.fill":
        return None
    constant = _producer(fill.operands[0])
    return fill.operands[0] if constant is not None and constant.operation.name == "arith.constant" else None


def _scalar_constant(value) -> tuple[str, str] | None:
    """(value text, element type) of a 0-d tensor constant, else None."""
    op = _producer(value)
    if op is None or op.operation.name != "arith.constant" or not isinstance(value.type, ir.RankedTensorType):
        return None
    t = ir.RankedTensorType(value.type)
    if t.rank != 0:
        return None
    text = str(op.attributes["value"])  # dense<1> : tensor<i64>
    return text[len("dense<") : text.index(">")], str(t.element_type)


def _zero_constant(value) -> bool:
    op = _producer(value)
    return op is not None and op.operation.name == "arith.constant" and \
        str(op.attributes["value"]).split(" : ")[0] in ("0.000000e+00", "0.0")


def _zero_fill(value) -> bool:
    """`value` is a linalg.fill of +0.0."""
    constant = _constant_fill(value)
    return constant is not None and _zero_constant(constant)


class _Analysis:
    """Whether a scan's step is row-wise (`check`), and which consts its kernel loads how.

    A step may split a wide value into column slices (`chunk` of an LSTM's or a GRU's gates): a
    value read only through slices is never held whole (`virtual`); each slice is computed from
    the same slice of its operands (an xs tile's columns, a weight's columns, a bias vector's),
    so a [B, 4H] gate tile is four [B, H] tiles and its matmul four products by U's column blocks.
    Columns of a value held whole anyway (a carry; a tile a reduction reads) are read back through
    shared memory (`held_slices`), as a concat read whole is assembled there (`held_concats`).
    """

    def __init__(self, op):
        self.op = op
        attr = lambda n: ir.IntegerAttr(op.attributes[n]).value  # noqa: E731
        self.n, self.k, self.dim = attr("num_carries"), attr("num_xs"), attr("dim")
        self.reverse = ir.BoolAttr(op.attributes["reverse"]).value
        self.block = op.regions[0].blocks[0]
        self.args = list(self.block.arguments)
        self.operands = list(op.operands)
        self.matrices: set[int] = set()  # const indices used as a matmul's right-hand side
        self.vectors: set[int] = set()  # const indices broadcast along the rows
        self.transposed: dict = {}  # a linalg.transpose result in the body -> the const it reads
        # the blocks the kernel loads: (value, first row, rows, first column, width) of the
        # matmuls' right-hand sides (a const or its transpose) -> const index; (value, first
        # column, width) of the vectors and of the xs
        self.matrix_blocks: dict = {}
        self.vector_blocks: set = set()
        self.xs_blocks: set = set()  # (xs index, first column, width)
        self.virtual: set = set()
        self.slices: dict = {}  # an extract_slice result -> (source, first column, width)
        # a concat of tiles along the columns (an adjoint's gate cotangents) -> its parts (tile,
        # first column, width); never held whole: a matmul reads it part by part (the products
        # by the weight's row blocks, added), a stacked output stores it part by part
        self.concats: dict = {}
        self.reductions: set = set()  # the row reductions (generics into [B, 1])
        self.held_slices: set = set()  # held tiles some of whose column blocks are read
        self.held_concats: set = set()  # concats also held whole
        self.matmul_columns: dict = {}  # a matmul's result -> the column blocks (first, width) computed
        self.tf32_parts = 2  # each operand as TF32 high and low parts (three products), or 1 (one)
        self.refusal = ""  # why the step is not row-wise (`check`)
        # widths not powers of two (384): only programs sharing the columns hold them, each a
        # power of two of them (`_split`)
        self.odd_widths: set[int] = set()

    def const_index(self, value) -> int | None:
        for i, a in enumerate(self.args[self.n + self.k :]):
            if a == value:
                return i
        return None

    def xs_index(self, value) -> int | None:
        for j, a in enumerate(self.args[self.n : self.n + self.k]):
            if a == value:
                return j
        return None

    def check(self) -> bool:
        """Whether the step is row-wise; if not, `refusal` says why (a performance warning)."""
        if self.dim != 0 or not self.n:
            return self._refuse("it scans along a dim other than the first" if self.n else "it has no carries")
        shapes = [_shape(v, dynamic_first=self.n <= i < self.n + self.k) for i, v in enumerate(self.operands)]
        if any(s is None for s in shapes) or any(_shape(r, dynamic_first=True) is None for r in self.op.results):
            return self._refuse("its carries, xs or outputs are not float32 of static sizes")
        carries, xs = shapes[: self.n], shapes[self.n : self.n + self.k]
        if any(len(s) != 2 for s in carries) or any(len(s) != 3 for s in xs):
            return self._refuse("its carries are not [batch, width] matrices (or its xs not [steps, batch, width])")
        self.rows = carries[0][0]
        if any(s[0] != self.rows for s in carries) or any(s[1] != self.rows for s in xs):
            return self._refuse("its carries and xs differ in batch rows")
        if any(not self._width_ok(s[1]) for s in carries):
            return self._refuse(f"its carries' widths {sorted({s[1] for s in carries})} are neither powers of two of at "
                                f"least 16 nor multiples of 16 with an odd factor of at most {MOST_ODD_FACTOR} (other widths "
                                "are not masked yet)")
        rowed = set(self.args[: self.n + self.k])  # [B, w] values of any width
        ops = []
        for inner in self.block.operations:
            name = inner.operation.name
            if name in ("tensor.empty", "arith.constant"):
                if name == "arith.constant" and _scalar_constant(inner.results[0]) is None and \
                        isinstance(inner.results[0].type, ir.RankedTensorType):
                    return self._refuse("its step makes a constant tensor")
                continue
            if name == "tidal.yield":
                if all(v in rowed for v in inner.operands) and self._plan_slices(ops, inner):
                    return True
                return self._refuse("its step's results are not tiles of its batch rows the kernel can hold")
            ops.append(inner)
            if name == "linalg.fill":
                value = _producer(inner.operands[0])
                if value is None or value.operation.name != "arith.constant":
                    return self._refuse("its step fills a tensor with a computed value")
                if not self._row_shaped(inner.results[0]):
                    return self._refuse("its step makes a tensor that is not one row per batch row (a reduction over "
                                        "the batch, or another shape)")
            elif name == "linalg.transpose":
                c = self.const_index(inner.operands[0])
                if c is None or list(ir.DenseI64ArrayAttr(inner.attributes["permutation"])) != [1, 0]:
                    return self._refuse("its step transposes something other than a weight")
                self.transposed[inner.results[0]] = c  # Wᵀ of a weight (an adjoint's): read so once
                continue
            elif name == "linalg.matmul":
                a, m, init = inner.operands
                c = self.transposed.get(m, self.const_index(m))
                if a not in rowed or c is None or not (init in rowed or _zero_fill(init)):
                    return self._refuse("its step has a matmul other than a row tile times a weight the scan reads")
                if a not in self.concats and not self._width_ok(_shape(m)[0]):
                    return self._refuse(f"its step has a matmul over {_shape(m)[0]} columns, neither a power of two of "
                                        f"at least 16 nor a multiple of 16 with an odd factor of at most {MOST_ODD_FACTOR}")
                self.matrices.add(c)
            elif name == "linalg.generic":
                if not self._rowwise_generic(inner, rowed):
                    return self._refuse("its step has an elementwise op or reduction that mixes batch rows, indexes, "
                                        "or reads a value the kernel cannot hold")
            elif name == "tensor.extract_slice":
                if inner.operands[0] not in rowed or not self._column_slice(inner):
                    return self._refuse("its step slices other than whole rows and a tile of columns")
            elif name == "tensor.concat":
                if ir.IntegerAttr(inner.attributes["dim"]).value != 1 or not self._row_shaped(inner.results[0]) or \
                        not all(v in rowed and self._tile_shaped(v) for v in inner.operands):
                    return self._refuse("its step concatenates other than row tiles along the columns")
                parts, first = [], 0
                for v in inner.operands:
                    parts.append((v, first, _shape(v)[1]))
                    first += _shape(v)[1]
                self.concats[inner.results[0]] = parts
            else:
                return self._refuse(f"its step has `{name}`, which the row kernel does not take")
            rowed.update(inner.results)
        return self._refuse("its step has no terminator")

    def _refuse(self, reason: str) -> bool:
        self.refusal = reason
        return False


    def _column_slice(self, op) -> bool:
        """A static slice of whole rows and contiguous columns, a tile wide; recorded in `slices`."""
        if len(op.operands) != 1:  # dynamic offsets or sizes
            return False
        offsets, sizes, strides = (list(ir.DenseI64ArrayAttr(op.attributes[n])) for n in ("static_offsets", "static_sizes", "static_strides"))
        if offsets[0] != 0 or sizes[0] != self.rows or strides != [1, 1] or not self._tile_shaped(op.results[0]):
            return False
        self.slices[op.results[0]] = (op.operands[0], offsets[1], sizes[1])
        return True

    def _plan_slices(self, ops, terminator) -> bool:
        """Marks the values read only through column slices `virtual` (computed per slice, never
        whole), checks that every other value is a tile the kernel can hold, and records the
        column blocks of xs, weights and vectors the kernel loads."""
        for inner in reversed(ops):
            if inner.operation.name in ("linalg.generic", "linalg.matmul", "linalg.fill") and \
                    inner not in self.reductions and not any(self._statistic(r) for r in inner.results) and \
                    all(self._read_in_slices(r) for r in inner.results):
                self.virtual.update(inner.results)
        n_carries = self.n
        for inner in ops:
            if inner.operation.name == "linalg.transpose":
                continue
            if inner.operation.name == "tensor.concat":
                r = inner.results[0]
                if any(not ((u.owner.operation.name == "linalg.matmul" and u.operand_number == 0) or
                            (u.owner.operation.name == "tidal.yield" and u.operand_number >= n_carries)) for u in r.uses):
                    # read whole by other ops too: assembled in shared memory and held
                    if not self._tile_shaped(r):
                        return False
                    self.held_concats.add(r)
                continue
            for r in inner.results:
                if r not in self.virtual and not self._tile_shaped(r) and not self._statistic(r):
                    return False
            if inner.operation.name == "linalg.matmul" and inner.results[0] not in self.virtual:
                _, m, init = inner.operands
                if init in self.virtual:
                    return False
                self._matrix_blocks(inner, 0, _shape(m)[1])
            if inner.operation.name == "linalg.generic" and inner.results[0] not in self.virtual:
                g = GenericBody(inner, "probe")
                for v, mp in zip(g.ins, g.maps):
                    if v in self.virtual:
                        return False
                    if _map_dims(mp) == [1] and self.const_index(v) is not None:
                        self.vector_blocks.add((v, 0, _shape(v)[0]))
        for j, arg in enumerate(self.args[self.n : self.n + self.k]):
            if any(not self._slice_read(u) for u in arg.uses):
                width = _shape(self.operands[self.n + j], dynamic_first=True)[2]
                if not self._width_ok(width) and width != 1:  # 1: a statistic saved by the forward
                    return False
                self.xs_blocks.add((j, 0, _shape(self.operands[self.n + j], dynamic_first=True)[2]))
        if any(v in self.virtual for v in terminator.operands):
            return False
        return all(self._demand(src, c0, w) for src, c0, w in self.slices.values())

    def lhs_parts(self, matmul) -> list:
        """(tile, first row of the weight it multiplies, width) of a matmul's left-hand side: one
        part, or a concat's parts."""
        lhs = matmul.operands[0]
        return self.concats.get(lhs, [(lhs, 0, _shape(lhs)[1])])

    def _matrix_blocks(self, matmul, c0: int, w: int):
        m = matmul.operands[1]
        self.matmul_columns.setdefault(matmul.results[0], set()).add((c0, w))
        for _, k0, kk in self.lhs_parts(matmul):
            self.matrix_blocks[(m, k0, kk, c0, w)] = self.transposed.get(m, self.const_index(m))

    def _slice_read(self, use) -> bool:
        """`use` reads its value only in column slices: an extract_slice, or an operand of a
        virtual generic (an elementwise input) or matmul (its accumulator)."""
        owner = use.owner
        name = owner.operation.name if not isinstance(owner, ir.Block) else ""
        if name == "tensor.extract_slice":
            return True
        if name == "linalg.generic":
            return all(r in self.virtual for r in owner.results)
        if name == "linalg.matmul":
            return use.operand_number == 2 and owner.results[0] in self.virtual
        return False

    def _read_in_slices(self, value) -> bool:
        uses = list(value.uses)
        return bool(uses) and all(self._slice_read(u) for u in uses)

    def _demand(self, value, c0: int, w: int) -> bool:
        """Whether columns [c0, c0 + w) of `value` can be computed alone; records what they load."""
        j = self.xs_index(value)
        if j is not None:
            self.xs_blocks.add((j, c0, w))
            return True
        if value not in self.virtual:
            if c0 or _shape(value)[-1] != w:  # columns of a held tile: read back through shared memory
                self.held_slices.add(value)
            return True
        op = _producer(value)
        name = op.operation.name
        if name == "linalg.fill":
            return True
        if name == "linalg.matmul":
            _, m, init = op.operands
            self._matrix_blocks(op, c0, w)
            return _zero_fill(init) or self._demand(init, c0, w)
        g = GenericBody(op, "probe")
        for v, mp in zip(g.ins, g.maps):
            dims = _map_dims(mp)
            if dims == [1]:
                self.vector_blocks.add((v, c0, w))
            elif dims == [0, 1] and not self._demand(v, c0, w):
                return False
        return True

    def _row_shaped(self, value) -> bool:
        s = _shape(value)
        return s is not None and len(s) == 2 and s[0] == self.rows

    def _tile_shaped(self, value) -> bool:
        return self._row_shaped(value) and self._width_ok(_shape(value)[1])

    def _width_ok(self, w: int) -> bool:
        """A power of two of at least 16, or a width programs can share out (`odd_widths`)."""
        if _width_ok(w):
            return True
        if _splittable_width(w):
            self.odd_widths.add(w)
            return True
        return False

    def _statistic(self, value) -> bool:
        """A [B, 1] value: one number a row (a LayerNorm's mean), held as a [ROWS, 1] tile."""
        return self._row_shaped(value) and _shape(value)[1] == 1

    def _rowwise_generic(self, op, rowed) -> bool:
        g = GenericBody(op, "probe")
        if g.captured or len(g.iterators) != 2:
            return False
        if g.reduction:  # a row reduction (over the columns) into [B, 1], from a fill
            combiners = split_combiners(op)
            if "reduction" not in str(g.iterators[1]) or combiners is None or \
                    any(c.operation.name not in F32_COMBINERS for c in combiners) or \
                    any(_map_dims(m) != [0, None] for m in g.maps[len(g.ins):]) or \
                    not all(self._statistic(r) and _constant_fill(v) is not None for r, v in zip(op.results, g.outs)):
                return False
            self.reductions.add(op)
        elif any(_map_dims(m) != [0, 1] for m in g.maps[len(g.ins):]):
            return False
        if any(inner.operation.name in ("linalg.index", "tensor.extract") for inner in g.body.operations):
            return False
        n_in = len(g.ins)
        if not g.reduction and any(len(list(g.body.arguments[n_in + j].uses)) for j in range(len(g.outs))):
            return False
        if not all(self._row_shaped(r) for r in op.results):
            return False
        for v, m in zip(g.ins, g.maps):
            dims = _map_dims(m)
            if dims == [0, 1] and v in rowed:
                continue
            if dims == [0, None] and v in rowed and self._statistic(v):
                continue  # a row's statistic, broadcast along the columns
            if dims == [] and _scalar_constant(v) is not None:
                continue  # a 0-d constant (the 1 of `1 - h²`): splat
            c = self.const_index(v)
            if dims == [1] and c is not None:
                self.vectors.add(c)
                continue
            return False
        return True


def _three_products() -> bool:
    import torch

    return torch.get_float32_matmul_precision() == "highest"


def _weight_bytes(a: "_Analysis") -> int:
    """Bytes the step's matrices' column blocks take as their TF32 high and low parts (f32 each;
    the high part only with one product)."""
    return sum(a.tf32_parts * 4 * kk * w for _, _, kk, _, w in a.matrix_blocks)


def _sm_count() -> int:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132  # H100 / H200 SXM: kernels built on a machine without a GPU


@dataclass
class _Split:
    """Programs sharing a block of `block_rows` rows (`parts`), and how their weights stay in
    shared memory: "resident" (their TF32 parts) or "resident_f32" (the f32 values, split into TF32
    parts a chunk at a time)."""

    block_rows: int
    parts: int
    weights: str


def _largest_lhs_part(a: "_Analysis") -> int:
    """Columns of the widest part of a matmul's left-hand side: the tile a program holds in shared
    memory (besides its weights) while reading it a K chunk at a time."""
    matmuls = [op for op in a.block.operations if op.operation.name == "linalg.matmul"]
    return max((kk for mm in matmuls for _, _, kk in a.lhs_parts(mm)), default=0)


def _split(a: "_Analysis") -> _Split | None:
    """How programs share the rows' work where the weights pass one SM's shared memory
    (`COLUMN_PROGRAMS_PER_SM`, `RESIDENT_SHARED_BYTES`): blocks of 16 rows if they can be, each
    block's columns in PREFERRED_PARTS parts or the fewest more, fewer only where the tiles are
    too narrow (every slice of a tile at least 16 columns wide); the TF32 parts of the weights if
    they fit, else their f32 values. None where the step cannot be split so (a row reduction needs
    every column; columns read at other offsets than their own need another program's; an xs read
    whole) or no split fits."""
    if a.reductions or a.held_slices or a.held_concats:
        return None
    matmuls = [op for op in a.block.operations if op.operation.name == "linalg.matmul"]
    if any(a.xs_index(part) is not None for mm in matmuls for part, _, _ in a.lhs_parts(mm)):
        return None
    widths = _tile_widths(a) | {w for *_, w in a.matrix_blocks} | {w for *_, w in a.vector_blocks} | \
        {w for *_, w in a.xs_blocks} | {w for *_, w in a.slices.values()} | \
        {w for parts in a.concats.values() for *_, w in parts}
    lhs_bytes = 4 * _largest_lhs_part(a)  # a row of it
    for block_rows in BLOCK_ROWS:
        if block_rows > max(ROWS, a.rows):
            break  # no bigger blocks than the batch
        for parts in _part_counts(widths):
            if _blocks(a.rows, block_rows) * parts > _sm_count() * COLUMN_PROGRAMS_PER_SM:
                continue
            for weights, share in (("resident", _weight_bytes(a) // parts), ("resident_f32", _weight_bytes(a) // a.tf32_parts // parts)):
                if share + block_rows * lhs_bytes <= RESIDENT_SHARED_BYTES:
                    return _Split(block_rows, parts, weights)
    return None


def _part_counts(widths: set[int]) -> list[int]:
    """Numbers of programs that can share every width's columns, each a power of two of at least
    16 of them, in order of preference: PREFERRED_PARTS or the fewest more (up to four doublings),
    then fewer. Widths with an odd factor (384 = 3·128) take a multiple of it (3, 6, 12, 24...)."""
    odd = functools.reduce(math.lcm, (_odd_factor(w) for w in widths), 1)
    counts = [odd << i for i in range(12)]
    more = [p for p in counts if p >= PREFERRED_PARTS][:4]
    fewer = [p for p in reversed(counts) if 2 <= p < PREFERRED_PARTS]
    return [p for p in more + fewer if all(w % p == 0 and _width_ok(w // p) for w in widths)]


def _tile_widths(a: "_Analysis") -> set[int]:
    """Widths of the [ROWS, w] tiles the kernel holds (an xs the step never reads is not loaded;
    a value read only in column slices is held as its slices)."""
    widths = {_shape(v)[1] for v in a.operands[: a.n]} | {w for _, _, w in a.xs_blocks}
    for inner in a.block.operations:
        if inner.operation.name in ("linalg.transpose", "tensor.empty"):  # never a tile (an empty: an init, unread)
            continue
        widths |= {_shape(r)[1] for r in inner.results if r not in a.virtual and r not in a.concats and _shape(r) is not None
                   and len(_shape(r)) == 2}
    return widths - {1}  # a statistic's [ROWS, 1] tile repeats along the layout's columns


class _Layouts:
    """Where the row kernel's values live.

    In registers (`explicit`, a TTGIR kernel): every [ROWS, w] tile in one mma accumulator
    layout (warps side by side along the columns), each weight's TF32 high and low parts held
    as tt.dot B operands for the whole loop, and a matmul's left-hand side converted to the A
    operand once a step (through shared memory: the only traffic a step has there), then split.
    Otherwise (TTIR) Triton picks: it keeps the weights' parts in shared memory and reloads them,
    and the A operand's, every step. Bench RNN (B=32, H=128, T=128) on an H200: the kernel took
    372 us as TTIR (ncu: stalls on shared memory, MIO throttle and wait), 316 us in registers with
    libdevice's tanhf, 232-254 us with the branch-free tanh (ttir._tanh_f32), 207-212 us with the
    three products independent (each from zeros, then added; one chain through all three: 232,
    the two small ones chained: 236; error against eager 2.2e-6 in all three). Not kept: splitting
    h before the conversion (two conversions; 292 us) and accumulating the dots onto the tile the
    step adds to them (228 us, but twice the error against eager: 4.8e-6)."""

    def __init__(self, explicit: bool, warps: int, row_warps: int = 1):
        self.explicit, self.warps = explicit, warps * row_warps
        if not explicit:
            self.tile = self.rows = self.cols = self.lhs = self.lhs_m = self.lhs_k = self.rhs = self.rhs_k = self.rhs_n = ""
            return
        self.alias = (f"#mma = #ttg.nvidia_mma<{{versionMajor = 2, versionMinor = 0, warpsPerCTA = [{row_warps}, {warps}], "
                      f"instrShape = [16, 8]}}>")
        self.tile = "#mma"
        self.rows, self.cols = "#ttg.slice<{dim = 1, parent = #mma}>", "#ttg.slice<{dim = 0, parent = #mma}>"
        self.lhs = "#ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 2}>"
        self.lhs_m, self.lhs_k = f"#ttg.slice<{{dim = 1, parent = {self.lhs}}}>", f"#ttg.slice<{{dim = 0, parent = {self.lhs}}}>"
        self.rhs = "#ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 2}>"
        self.rhs_k, self.rhs_n = f"#ttg.slice<{{dim = 1, parent = {self.rhs}}}>", f"#ttg.slice<{{dim = 0, parent = {self.rhs}}}>"

    def parent(self, axis_encoding: str) -> str:
        """The 2-d encoding a 1-d one (a slice) expands into."""
        if axis_encoding in (self.rows, self.cols):
            return self.tile
        if axis_encoding in (self.lhs_m, self.lhs_k):
            return self.lhs
        return self.rhs


def _layouts(a: "_Analysis", chunked: bool, parts: int, block_rows: int) -> _Layouts:
    """Explicit layouts where the weights fit the registers: at most half the register file
    (128 KiB at 8 warps; the bench RNN's [128, 128] U takes 128 registers a thread of 247), and
    where they are read a chunk at a time (streamed or resident: each chunk loaded straight into
    its tt.dot operand layout). A program of `parts` holds 1/parts of each; a block of more than
    16 rows has a warp for each 16 (held weights would be copied in each)."""
    row_warps = block_rows // ROWS
    warps = max(1, min(NUM_WARPS // row_warps, min(_tile_widths(a)) // parts // 8))  # no mma tile wider than a value
    explicit = chunked or _weight_bytes(a) // parts <= warps * REGISTER_WEIGHT_BYTES_PER_WARP
    return _Layouts(explicit, warps if explicit else NUM_WARPS, row_warps)


def row_scan_kernel(op, new_name) -> RowScanLaunch | str:
    """The persistent kernel of a row-wise scan (named by `new_name()`), or why there is none."""
    a = _Analysis(op)
    if not a.check():
        return a.refusal
    a.tf32_parts = 2 if _three_products() else 1
    # Weights past shared memory are split among programs, or else read from global memory (L2)
    # at every step, chunk by chunk
    sp = _split(a) if _weight_bytes(a) > WEIGHT_BYTES_ON_CHIP or a.odd_widths else None
    if a.odd_widths and sp is None:
        return (f"its widths {sorted(a.odd_widths)} are not powers of two, and no split of its columns among programs "
                "(each a power of two of them, all in shared memory) fits: "
                + ("a row reduction needs every column" if a.reductions else "too many programs or too little shared memory"))
    parts, R = (sp.parts, sp.block_rows) if sp else (1, ROWS)
    resident = sp is not None
    streamed = sp is None and _weight_bytes(a) > WEIGHT_BYTES_ON_CHIP
    if streamed and _weight_bytes(a) // a.tf32_parts > STREAMED_WEIGHT_BYTES:
        return (f"its weights ({_weight_bytes(a) // a.tf32_parts >> 10} KiB) split among programs do not fit shared "
                f"memory with its {a.rows} batch rows, and are too large to read from L2 every step")
    n, k = a.n, a.k
    consts = sorted(a.matrices | a.vectors)
    lay = _layouts(a, streamed or resident, parts, R)
    if (a.held_slices or a.held_concats) and not lay.explicit:  # sliced and joined through shared memory: TTGIR only
        return "its step slices or joins tiles it also holds whole, and its weights are held in registers too large for that"
    b = KernelBuilder(new_name())
    b.warps = lay.warps
    if lay.explicit:
        b.encoding, b.aliases = lay.tile, [lay.alias, "#smem = #ttg.shared_memory", TILE_SHARED]
    init_ptrs = [b.pointer_arg(f"init{i}", "f32") for i in range(n)]
    xs_ptrs = [b.pointer_arg(f"xs{i}", "f32") for i in range(k)]
    const_ptrs = {c: b.pointer_arg(f"const{c}", "f32") for c in consts}
    out_ptrs = [b.pointer_arg(f"carry{i}", "f32") for i in range(n)]
    ys = list(list(a.block.operations)[-1].operands)[n:]
    ys_ptrs = [b.pointer_arg(f"ys{j}", "f32") for j in range(len(ys))]
    if parts > 1:
        exchange_ptr, arrivals_ptr = b.pointer_arg("exchange", "f32"), b.pointer_arg("arrivals", "i32")
    length = b.scalar_arg("T")  # at least 1: the launch runs no kernel for no steps

    i32 = "i32"
    vec = lambda size, elem, enc: tensor_type((size,), elem, enc)  # noqa: E731
    pid = b.op("tt.get_program_id x : i32")
    part = b.op("tt.get_program_id y : i32") if parts > 1 else None
    first_row = b.binary("arith.muli", pid, b.const(R, i32), i32)
    lanes = b.op(f"tt.make_range {{end = {R} : i32, start = 0 : i32}} : {vec(R, i32, lay.rows)}")
    rows = b.binary("arith.addi", b.splat(first_row, i32, (R,), lay.rows), lanes, vec(R, i32, lay.rows))
    row_mask = b.op(f"arith.cmpi slt, {rows}, {b.splat(b.const(a.rows, i32), i32, (R,), lay.rows)} : "
                    f"{vec(R, 'i32', lay.rows)}")
    cache: dict = {}

    def column_start(first, w):
        """The first column of this program's share of columns [first, first + w) (a scalar), or
        None for column 0."""
        if parts == 1:
            return b.const(first, i32) if first else None
        if ("start", first, w) not in cache:
            share = b.binary("arith.muli", part, b.const(w // parts, i32), i32)
            cache[("start", first, w)] = b.binary("arith.addi", share, b.const(first, i32), i32) if first else share
        return cache[("start", first, w)]

    def columns(w, first, enc):
        """This program's share of columns [first, first + w): a vector of w / parts indices."""
        cols, start = arange(w // parts, enc), column_start(first, w)
        if start is None:
            return cols
        return b.binary("arith.addi", cols, b.splat(start, i32, (w // parts,), enc), vec(w // parts, i32, enc))

    def arange(w, enc):
        if ("range", w, enc) not in cache:
            cache[("range", w, enc)] = b.op(f"tt.make_range {{end = {w} : i32, start = 0 : i32}} : {vec(w, i32, enc)}")
        return cache[("range", w, enc)]

    def grid2d(left, lsize, left_enc, right, w, right_enc, elem):
        """left[:, None] op right[None, :] broadcast to [lsize, w]"""
        enc = lay.parent(left_enc)
        l2 = b.op(f"tt.expand_dims {left} {{axis = 1 : i32}} : {vec(lsize, elem, left_enc)} -> {tensor_type((lsize, 1), elem, enc)}")
        r2 = b.op(f"tt.expand_dims {right} {{axis = 0 : i32}} : {vec(w, elem, right_enc)} -> {tensor_type((1, w), elem, enc)}")
        return (b.op(f"tt.broadcast {l2} : {tensor_type((lsize, 1), elem, enc)} -> {tensor_type((lsize, w), elem, enc)}"),
                b.op(f"tt.broadcast {r2} : {tensor_type((1, w), elem, enc)} -> {tensor_type((lsize, w), elem, enc)}"))

    def tile_offsets(w, row_width=None, first=0):
        """Offsets of this program's rows of columns [first, first + w) of a row-major [B,
        row_width] matrix (row_width = w: the whole of a [B, w] one), and their mask."""
        row_width = row_width or w
        if ("off", w, row_width, first) not in cache:
            share = w // parts
            ty = tensor_type((R, share), i32, lay.tile)
            r, c = grid2d(b.binary("arith.muli", rows, b.splat(b.const(row_width, i32), i32, (R,), lay.rows), vec(R, i32, lay.rows)),
                          R, lay.rows, columns(w, first, lay.cols), share, lay.cols, i32)
            m2 = b.op(f"tt.expand_dims {row_mask} {{axis = 1 : i32}} : {vec(R, 'i1', lay.rows)} -> "
                      f"{tensor_type((R, 1), 'i1', lay.tile)}")
            mask = b.op(f"tt.broadcast {m2} : {tensor_type((R, 1), 'i1', lay.tile)} -> {tensor_type((R, share), 'i1', lay.tile)}")
            cache[("off", w, row_width, first)] = (b.binary("arith.addi", r, c, ty), mask)
        return cache[("off", w, row_width, first)]

    def pointers(ptr, offsets, shape, enc):
        ptr_ty = tensor_type(shape, "!tt.ptr<f32>", enc)
        p = b.op(f"tt.splat {ptr} : !tt.ptr<f32> -> {ptr_ty}")
        return b.op(f"tt.addptr {p}, {offsets} : {ptr_ty}, {tensor_type(shape, i32, enc)}")

    def step_offsets(w, step_base, row_width=None, first=0):
        off, mask = tile_offsets(w, row_width, first)
        if step_base is not None:
            shape = (R, w // parts)
            off = b.binary("arith.addi", off, b.splat(step_base, i32, shape, lay.tile), tensor_type(shape, i32, lay.tile))
        return off, mask

    def load_tile(ptr, w, step_base=None, row_width=None, first=0):
        """This program's share of columns [first, first + w) of its rows."""
        off, mask = step_offsets(w, step_base, row_width, first)
        shape = (R, w // parts)
        zero = b.const("0.000000e+00", "f32", shape, lay.tile)
        return b.op(f"tt.load {pointers(ptr, off, shape, lay.tile)}, {mask}, {zero} : "
                    f"{tensor_type(shape, '!tt.ptr<f32>', lay.tile)}")

    def store_tile(ptr, value, w, step_base=None, row_width=None, first=0):
        off, mask = step_offsets(w, step_base, row_width, first)
        shape = (R, w // parts)
        b.emit(f"tt.store {pointers(ptr, off, shape, lay.tile)}, {value}, {mask} : "
               f"{tensor_type(shape, '!tt.ptr<f32>', lay.tile)}")

    def tf32(x, shape, encoding):
        """x rounded to TF32 (a tf32 `tt.dot` would truncate it: twice the error)."""
        return round_to_tf32(b, x, tensor_type(shape, "f32", encoding), shape, encoding)

    def split(x, shape, encoding):
        """x's TF32 high part and the rest (hi·hi + hi·lo + lo·hi: fp32-accurate products). The
        high part is rounded in two integer ops (`round_to_tf32`; cvt.rna is four on sm_90, and an
        RNN splits its A operand every step). The rest goes to the tensor cores unrounded, as
        Triton's own tf32x3 feeds it: an mma reads a TF32 operand's top 19 bits, so that is the
        rest truncated to TF32 (bench RNN on an H100: kernel 191.4 -> 182.0 us, the same error
        against eager). A NaN stays one: x - hi is the canonical NaN wherever x is NaN, and that
        NaN's top 19 bits are a NaN too.

        An infinite element of h or x_t gives its row NaN where eager's tanh gives ±1: its rest
        is inf - inf, and its high part meets the other operand's rest, of either sign. Carrying
        it as eager does was measured on the bench RNN (H100, kernel 184 us) and not kept: a
        zero rest and a third copy of h's high part (0 where infinite) for the cross product
        spilled (255 registers, 278 us); hi·hi chosen where it is infinite and lo·hi no NaN
        cost 232 us, on every step's critical path."""
        ty = tensor_type(shape, "f32", encoding)
        hi = round_to_tf32(b, x, ty, shape, encoding)
        return hi, (b.binary("arith.subf", x, hi, ty) if a.tf32_parts == 2 else None)

    const_args = a.args[n + k :]
    values: dict = {}  # the tiles held whole
    blocks = {}  # a key of `a.matrix_blocks` or `a.vector_blocks` -> the loaded block

    def shifted(v, size, first, enc):
        return v if not first else b.binary("arith.addi", v, b.splat(b.const(first, i32), i32, (size,), enc), vec(size, i32, enc))

    def load_matrix(key, block_key=None):
        """Rows [k0, k0 + kk) and columns [first, first + w) of a weight (of the block
        `block_key` of `a.matrix_blocks`: a streamed chunk of it)."""
        m, k0, kk, first, w = key
        c = a.matrix_blocks[block_key or key]
        # element (i, j) of a [K, N] const is at i·N + j; of the transpose of an [N, K] one at j·K + i
        row_stride, col_stride = (1, _shape(m)[0]) if m in a.transposed else (_shape(m)[1], 1)
        scaled = lambda v, size, s, enc: v if s == 1 else b.binary(  # noqa: E731
            "arith.muli", v, b.splat(b.const(s, i32), i32, (size,), enc), vec(size, i32, enc))
        weight_rows = shifted(arange(kk, lay.rhs_k), kk, k0, lay.rhs_k)
        if streamed:
            # A streamed chunk's addresses are made to depend on the step: loop-invariant, they
            # are hoisted out of the loop and held, 64-bit pointers, in registers for every chunk
            # at once
            weight_rows = b.binary("arith.addi", weight_rows, b.splat(b.binary("arith.muli", t, opaque_zero, i32), i32, (kk,), lay.rhs_k),
                                   vec(kk, i32, lay.rhs_k))
        w //= parts  # this program's share of the columns
        r, cc = grid2d(scaled(weight_rows, kk, row_stride, lay.rhs_k), kk, lay.rhs_k,
                       scaled(columns(w * parts, first, lay.rhs_n), w, col_stride, lay.rhs_n), w, lay.rhs_n, i32)
        off = b.binary("arith.addi", r, cc, tensor_type((kk, w), i32, lay.rhs))
        loaded = b.op(f"tt.load {pointers(const_ptrs[c], off, (kk, w), lay.rhs)} : {tensor_type((kk, w), '!tt.ptr<f32>', lay.rhs)}")
        if resident:
            return loaded
        if lay.explicit:
            return split(loaded, (kk, w), lay.rhs)
        return loaded if a.tf32_parts == 2 else tf32(loaded, (kk, w), lay.rhs)

    def resident_desc(rows, share, whole_rows=None):
        return f"!ttg.memdesc<{rows}x{share}xf32, #tile_smem, #smem" + (f", {whole_rows}x{share}>" if whole_rows else ">")

    if resident:  # each block's share in shared memory, as its TF32 parts or its f32 values
        for key in a.matrix_blocks:
            m, k0, kk, first, w = key
            share = w // parts
            blocks[key] = []  # (first row, rows, [a buffer per part]): K rows not a power of two (384)
            piece = kk & -kk  # are held in pieces of a power of two (Triton's shapes are)
            for p0 in range(0, kk, piece):
                loaded = load_matrix(key if piece == kk else (m, k0 + p0, piece, first, w), key)
                held = [loaded] if sp.weights == "resident_f32" else [p for p in split(loaded, (piece, share), lay.rhs) if p is not None]
                blocks[key].append((p0, piece, [b.op(f"ttg.local_alloc {p} : ({tensor_type((piece, share), 'f32', lay.rhs)}) -> "
                                                     f"{resident_desc(piece, share)}") for p in held]))
    elif not streamed:
        for key in a.matrix_blocks:  # once, before the loop (per step was 1.4x slower, IEEE dot)
            blocks[key] = load_matrix(key)

    def weight_chunk(key, block_key):
        """The TF32 parts of rows [k0, k0 + chunk) of a weight's column block (`block_key`):
        streamed from global memory or read back from shared memory."""
        if not resident:
            return load_matrix(key, block_key)
        _, k0, chunk, _, w = key
        share, row = w // parts, k0 - block_key[1]
        p0, piece, held_parts = next(blk for blk in blocks[block_key] if blk[0] <= row < blk[0] + blk[1])
        loaded = []
        for held in held_parts:
            sub = b.op(f"ttg.memdesc_subslice {held} [{row - p0}, 0] : {resident_desc(piece, share)} -> "
                       f"{resident_desc(chunk, share, piece)}")
            loaded.append(b.op(f"ttg.local_load {sub} : {resident_desc(chunk, share, piece)} -> "
                               f"{tensor_type((chunk, share), 'f32', lay.rhs)}"))
        if sp.weights == "resident_f32":
            return split(loaded[0], (chunk, share), lay.rhs)
        return loaded[0], (loaded[1] if len(loaded) > 1 else None)
    for v, first, w in sorted(a.vector_blocks, key=lambda blk: (a.const_index(blk[0]), blk[1])):
        c = a.const_index(v)
        cols, pw = columns(w, first, lay.cols), w // parts
        loaded = b.op(f"tt.load {pointers(const_ptrs[c], cols, (pw,), lay.cols)} : {vec(pw, '!tt.ptr<f32>', lay.cols)}")
        v2 = b.op(f"tt.expand_dims {loaded} {{axis = 0 : i32}} : {vec(pw, 'f32', lay.cols)} -> {tensor_type((1, pw), 'f32', lay.tile)}")
        blocks[(v, first, w)] = b.op(f"tt.broadcast {v2} : {tensor_type((1, pw), 'f32', lay.tile)} -> "
                                     f"{tensor_type((R, pw), 'f32', lay.tile)}")

    widths = [_shape(v)[1] for v in a.operands[:n]]
    xs_widths = [_shape(v, dynamic_first=True)[2] for v in a.operands[n : n + k]]
    carry_types = [tensor_type((R, w // parts), "f32", lay.tile) for w in widths]
    for w in widths:
        tile_offsets(w)  # before the loop: the stores after it use them too
    for v in ys:
        for _, first, w in a.concats.get(v, [(v, 0, _shape(v)[1])]):
            tile_offsets(w, _shape(v)[1], first)
    inits = [load_tile(p, w) for p, w in zip(init_ptrs, widths)]
    # Each step's blocks of the xs are loaded one step ahead and carried in: the load of step t+1
    # is in flight while step t's matmuls run (a step's x-projection is its matmul's accumulator,
    # which the dot waited for: a global load's latency on every step of the chain).
    prefetched = sorted(a.xs_blocks)

    def xs_tile(j, first, w, step_index):
        row_width = xs_widths[j]
        return load_tile(xs_ptrs[j], w, b.binary("arith.muli", step_index, b.const(a.rows * row_width, i32), i32), row_width, first)

    def step_of(i):
        return b.binary("arith.subi", last, i, i32) if a.reverse else i

    last = b.binary("arith.subi", length, b.const(1, i32), i32)
    opaque_zero = b.binary("arith.divsi", length, b.binary("arith.addi", length, b.const(1, i32), i32), i32)  # T / (T + 1), T >= 1
    firsts = [xs_tile(*blk, step_of(b.const(0, i32))) for blk in prefetched]
    loop_types = [*carry_types, *(tensor_type((R, w // parts), "f32", lay.tile) for _, _, w in prefetched)]
    t, iter_args, loop = b.fresh(), [b.fresh() for _ in loop_types], b.fresh()
    b.emit(f"{loop}:{len(loop_types)} = scf.for {t} = {b.const(0, i32)} to {length} step {b.const(1, i32)} "
           f"iter_args({', '.join(f'{x} = {v}' for x, v in zip(iter_args, [*inits, *firsts]))}) -> "
           f"({', '.join(loop_types)}) : i32 {{")
    b.indent += 1
    step = step_of(t)
    values.update(zip(a.args[:n], iter_args[:n]))
    xs_values = {(a.args[n + j], first, w): x for (j, first, w), x in zip(prefetched, iter_args[n:])}
    values.update((a.args[n + j], x) for (j, first, w), x in zip(prefetched, iter_args[n:]) if w == xs_widths[j])
    ahead = b.op(f"arith.minsi {b.binary('arith.addi', t, b.const(1, i32), i32)}, {last} : i32")
    nexts = [xs_tile(*blk, step_of(ahead)) for blk in prefetched]  # the last step loads its own slices again
    lhs_parts: dict = {}
    computed: dict = {}  # (virtual value, first column, width) -> its block this step
    chunked: dict = {}  # a chunked matmul's result (streamed or resident weights) -> {(first, width): its product this step}
    stored_tiles: dict = {}  # a held tile -> its copy in shared memory this step
    exchanged: dict = {}  # a tile other programs computed parts of -> its load from the exchange

    def columns_back(value, first, w, encoding):
        """Columns [first, first + w) of the held tile `value` in `encoding`, through a copy in
        shared memory (registers cannot be sliced), made once a step. An exchanged tile whose
        width is not a power of two (384) is copied in pieces of a power of two of columns, and
        read within one."""
        full = _shape(value)[1]
        if value not in stored_tiles:
            piece = full & -full
            stored_tiles[value] = []
            for p0 in range(0, full, piece):
                if value in exchanged:
                    whole = exchanged[value](p0, piece)
                else:  # held whole: a power of two wide (odd widths are only shared out, and exchanged)
                    whole = values[value]
                desc = f"!ttg.memdesc<{R}x{piece}xf32, #tile_smem, #smem>"
                stored_tiles[value].append((p0, piece, b.op(f"ttg.local_alloc {whole} : ({tensor_type((R, piece), 'f32', lay.tile)}) -> {desc}")))
        p0, piece, sub = next(blk for blk in stored_tiles[value] if blk[0] <= first < blk[0] + blk[1])
        desc = f"!ttg.memdesc<{R}x{piece}xf32, #tile_smem, #smem>"
        if w != piece:
            sub_desc = f"!ttg.memdesc<{R}x{w}xf32, #tile_smem, #smem, {R}x{piece}>"
            sub, desc = b.op(f"ttg.memdesc_subslice {sub} [0, {first - p0}] : {desc} -> {sub_desc}"), sub_desc
        return b.op(f"ttg.local_load {sub} : {desc} -> {tensor_type((R, w), 'f32', encoding)}")

    def streamed_products(matmul):
        """Every column block of a matmul by a streamed weight, K chunk by K chunk: the left-hand
        side passes through shared memory once and is read back a chunk at a time, each chunk
        meets the weight's [STREAM_K, w] blocks of every column block, loaded straight into the
        tt.dot operand layout. What a thread holds at once is a chunk, not the [16, K] operand
        and a [K, w] block (LSTM H = 128 held both, in three parts each: 255 registers and
        spills)."""
        m = matmul.operands[1]
        columns = sorted(a.matmul_columns[matmul.results[0]])
        per_thread = R * max(w for _, w in columns) // parts // (32 * lay.warps)  # f32 of an accumulator
        separate = resident and 3 * len(columns) * per_thread <= CHAIN_REGISTERS
        chains = max(1, CHAINED_BLOCKS // len(columns)) if separate else 1
        while chains > 1 and 3 * len(columns) * chains * per_thread > CHAIN_REGISTERS:
            chains //= 2
        sums: dict = {}  # (column block, product, chain) -> its partial sum
        position = 0  # of the chunk along K, over the parts
        for part, k0, kk in a.lhs_parts(matmul):
            chunk = min(STREAM_K, kk)
            for kc in range(0, kk, chunk):
                lhs_ty = tensor_type((R, chunk), "f32", lay.lhs)
                a_hi, a_lo = split(columns_back(part, kc, chunk, lay.lhs), (R, chunk), lay.lhs)
                chain, position = position % chains, position + 1
                for first, w in columns:
                    m_hi, m_lo = weight_chunk((m, k0 + kc, chunk, first, w), (m, k0, kk, first, w))
                    share = w // parts
                    out_ty = tensor_type((R, share), "f32", lay.tile)
                    rhs_ty = tensor_type((chunk, share), "f32", lay.rhs)
                    zero = b.const("0.000000e+00", "f32", (R, share), lay.tile)
                    products = [("hi", a_hi, m_hi)] + ([("lo_hi", a_lo, m_hi), ("hi_lo" if separate else "lo_hi", a_hi, m_lo)]
                                                       if a_lo is not None else [])
                    for name, x, y in products:
                        key = ((first, w), name, chain)
                        sums[key] = b.op(f"tt.dot {x}, {y}, {sums.get(key, zero)}, inputPrecision = tf32 : "
                                         f"{lhs_ty} * {rhs_ty} -> {out_ty}")
        out = {}
        for block in columns:
            ty = tensor_type((R, block[1] // parts), "f32", lay.tile)
            add = lambda x, y: b.binary("arith.addf", x, y, ty)  # noqa: E731

            def total(names):
                terms = [sums[(block, n, c)] for n in names for c in range(chains) if (block, n, c) in sums]
                return functools.reduce(add, terms) if terms else None

            big, small = total(["hi"]), total(["hi_lo", "lo_hi"])  # the small products summed before they meet the big one
            out[block] = big if small is None else add(big, small)
        return out

    exchanges: list = []  # per exchange point of a step: (its first float in the scratch, row width)

    def exchange(matmul):
        """The matmul's left-hand side whole, from the shares the `parts` programs of these rows
        computed: each stores its share to the scratch (two buffers, by the step's parity: a
        program one step ahead writes the other), the programs meet at a barrier (`arrivals`: the
        counter of this exchange and rows, (t + 1)·parts once all have stored step t's); then a
        function per part loading it whole from L2 (.cg: past the L1) in the tiles' layout, called
        where its chunks are read (one part in shared memory at a time)."""
        lhs = a.lhs_parts(matmul)
        width = sum(kk for _, _, kk in lhs)
        index, base = len(exchanges), sum(2 * a.rows * wd for _, wd in exchanges)
        exchanges.append((base, width))
        buffer = b.binary("arith.addi", b.const(base, i32), b.binary(
            "arith.muli", b.binary("arith.andi", t, b.const(1, i32), i32), b.const(a.rows * width, i32), i32), i32)
        for tile, k0, kk in lhs:
            off, mask = step_offsets(kk, buffer, width, k0)
            shape = (R, kk // parts)
            b.emit(f"tt.store {pointers(exchange_ptr, off, shape, lay.tile)}, {values[tile]}, {mask} : "
                   f"{tensor_type(shape, '!tt.ptr<f32>', lay.tile)}")
        b.emit("gpu.barrier")  # every thread's stores before the arrival (its release covers them)
        counter = b.op(f"tt.addptr {arrivals_ptr}, {b.binary('arith.addi', pid, b.const(index * _blocks(a.rows, R), i32), i32)} : "
                       f"!tt.ptr<i32>, i32")
        true, one, zero = b.op("arith.constant true"), b.const(1, i32), b.const(0, i32)
        target = b.binary("arith.muli", b.binary("arith.addi", t, one, i32), b.const(parts, i32), i32)
        arrived = b.op(f"tt.atomic_rmw add, acq_rel, gpu, {counter}, {one}, {true} : (!tt.ptr<i32>, i32, i1) -> i32")
        seen, waiting, polled = b.fresh(), b.fresh(), b.fresh()
        b.emit(f"scf.while ({seen} = {b.binary('arith.addi', arrived, one, i32)}) : (i32) -> () {{")
        b.emit(f"  {waiting} = arith.cmpi slt, {seen}, {target} : i32")
        b.emit(f"  scf.condition({waiting})")
        b.emit("} do {")
        b.emit(f"  {polled} = tt.atomic_rmw add, acquire, gpu, {counter}, {zero}, {true} : (!tt.ptr<i32>, i32, i1) -> i32")
        b.emit(f"  scf.yield {polled} : i32")
        b.emit("}")
        b.emit("gpu.barrier")
        enc_m, enc_k, enc = lay.rows, lay.cols, lay.tile
        lanes_m = b.op(f"tt.make_range {{end = {R} : i32, start = 0 : i32}} : {vec(R, i32, enc_m)}")
        rows_m = b.binary("arith.addi", b.splat(first_row, i32, (R,), enc_m), lanes_m, vec(R, i32, enc_m))
        mask_m = b.op(f"arith.cmpi slt, {rows_m}, {b.splat(b.const(a.rows, i32), i32, (R,), enc_m)} : {vec(R, i32, enc_m)}")
        row_base = b.binary("arith.addi", b.binary("arith.muli", rows_m, b.splat(b.const(width, i32), i32, (R,), enc_m), vec(R, i32, enc_m)),
                            b.splat(buffer, i32, (R,), enc_m), vec(R, i32, enc_m))

        def load(k0, kk):
            cols = b.binary("arith.addi", b.op(f"tt.make_range {{end = {kk} : i32, start = 0 : i32}} : {vec(kk, i32, enc_k)}"),
                            b.splat(b.const(k0, i32), i32, (kk,), enc_k), vec(kk, i32, enc_k))
            r, c = grid2d(row_base, R, enc_m, cols, kk, enc_k, i32)
            m2 = b.op(f"tt.expand_dims {mask_m} {{axis = 1 : i32}} : {vec(R, 'i1', enc_m)} -> {tensor_type((R, 1), 'i1', enc)}")
            mask = b.op(f"tt.broadcast {m2} : {tensor_type((R, 1), 'i1', enc)} -> {tensor_type((R, kk), 'i1', enc)}")
            ptrs = pointers(exchange_ptr, b.binary("arith.addi", r, c, tensor_type((R, kk), i32, enc)), (R, kk), enc)
            zero_tile = b.const("0.000000e+00", "f32", (R, kk), enc)
            return b.op(f"tt.load {ptrs}, {mask}, {zero_tile} cacheModifier = cg : {tensor_type((R, kk), '!tt.ptr<f32>', enc)}")

        return {tile: (lambda p0=0, width=None, k0=k0, kk=kk: load(k0 + p0, width or kk)) for tile, k0, kk in lhs}

    def block_of(value, first, w):
        """Columns [first, first + w) of `value` this step: a held tile's whole, an xs block, or
        a virtual value's block computed from its operands' blocks."""
        if (value, first, w) in xs_values:
            return xs_values[(value, first, w)]
        if value not in a.virtual:
            if first == 0 and _shape(value)[1] == w:
                return values[value]
            if (value, first, w) not in computed:
                computed[(value, first, w)] = columns_back(value, first, w, lay.tile)
            return computed[(value, first, w)]
        if (value, first, w) not in computed:
            op = _producer(value)
            results = emit(op, first, w)
            computed.update(((r, first, w), v) for r, v in zip(op.results, results))
        return computed[(value, first, w)]

    def emit(inner, first, w):
        """The results of `inner` (a fill, matmul or row-wise generic) over columns [first, first + w)."""
        name = inner.operation.name
        share = w // parts  # the columns this program computes
        if name == "linalg.fill":
            scalar = str(_producer(inner.operands[0]).attributes["value"]).split(" : ")[0]
            return [b.const(scalar, "f32", (R, share), lay.tile)]
        if name == "linalg.matmul":
            _, m, init = inner.operands
            out_ty = tensor_type((R, share), "f32", lay.tile)
            zero = b.const("0.000000e+00", "f32", (R, share), lay.tile)
            acc = zero if _zero_fill(init) else block_of(init, first, w)
            if streamed or resident:
                if parts > 1 and any(part not in stored_tiles and part not in exchanged for part, _, _ in a.lhs_parts(inner)):
                    exchanged.update(exchange(inner))
                if inner.results[0] not in chunked:
                    chunked[inner.results[0]] = streamed_products(inner)
                product = chunked[inner.results[0]][(first, w)]
                return [product if _zero_fill(init) else b.binary("arith.addf", acc, product, out_ty)]
            product = None
            for part, k0, kk in a.lhs_parts(inner):  # a concat's parts times the weight's row blocks
                weight = blocks[(m, k0, kk, first, w)]
                if not lay.explicit:
                    if a.tf32_parts == 1 and part not in lhs_parts:
                        lhs_parts[part] = tf32(values[part], (R, kk), "")
                    lhs = lhs_parts.get(part, values[part])
                    precision = DOT_PRECISION if a.tf32_parts == 2 else "tf32"
                    acc = b.op(f"tt.dot {lhs}, {weight}, {acc}, inputPrecision = {precision} : "
                               f"{tensor_type((R, kk), 'f32')} * {tensor_type((kk, share), 'f32')} -> {out_ty}")
                    continue
                lhs_ty = tensor_type((R, kk), "f32", lay.lhs)
                if part not in lhs_parts:
                    converted = b.op(f"ttg.convert_layout {values[part]} : {tensor_type((R, kk), 'f32', lay.tile)} -> {lhs_ty}")
                    lhs_parts[part] = split(converted, (R, kk), lay.lhs)
                (a_hi, a_lo), (m_hi, m_lo) = lhs_parts[part], weight
                rhs_ty = tensor_type((kk, share), "f32", lay.rhs)
                dot = lambda x, y, c: b.op(f"tt.dot {x}, {y}, {c}, inputPrecision = tf32 : {lhs_ty} * {rhs_ty} -> {out_ty}")  # noqa: E731
                # three independent products: mma chains a third as deep as one chain through all three
                if a_lo is None:
                    term = dot(a_hi, m_hi, zero)
                else:
                    small = b.binary("arith.addf", dot(a_lo, m_hi, zero), dot(a_hi, m_lo, zero), out_ty)
                    term = b.binary("arith.addf", dot(a_hi, m_hi, zero), small, out_ty)
                product = term if product is None else b.binary("arith.addf", product, term, out_ty)
            if not lay.explicit:
                return [acc]
            return [product if _zero_fill(init) else b.binary("arith.addf", acc, product, out_ty)]
        g = GenericBody(inner, "probe")  # a row-wise generic
        g.b = b
        reduction = inner in a.reductions
        if reduction:  # over the columns of its [B, W] inputs, into a [B, 1] statistic
            w = share = next(_shape(v)[1] for v, mp in zip(g.ins, g.maps) if _map_dims(mp) == [0, 1])  # one part
        body_values = {}
        for arg, v, mp in zip(g.body.arguments, g.ins, g.maps):
            scalar, dims = _scalar_constant(v), _map_dims(mp)
            if scalar is not None:
                body_values[arg] = b.const(scalar[0], scalar[1], (R, share), lay.tile)
            elif dims == [1]:
                body_values[arg] = blocks[(v, first, w)]
            elif dims == [0, None]:  # a statistic, along the columns
                body_values[arg] = b.op(f"tt.broadcast {values[v]} : {tensor_type((R, 1), 'f32', lay.tile)} -> "
                                        f"{tensor_type((R, w), 'f32', lay.tile)}")
            else:
                body_values[arg] = block_of(v, first, w)
        if not reduction:
            return g.run_body(None, body_values, {}, None, (R, share))
        combiners = split_combiners(inner)
        g.run_body(None, body_values, {}, None, (R, w), stop={c: None for c in combiners})
        statistics = []
        column_ty = tensor_type((R, 1), "f32", lay.tile)
        for j, c in enumerate(combiners):
            lhs, rhs = c.operands
            term = body_values[rhs if lhs == g.body.arguments[len(g.ins) + j] else lhs]
            red, p, q, folded = b.fresh(), b.fresh(), b.fresh(), b.fresh()
            b.emit(f'{red} = "tt.reduce"({term}) <{{axis = 1 : i32}}> ({{')
            b.emit(f"^bb0({p}: f32, {q}: f32):")
            b.emit(f"  {folded} = {c.operation.name} {p}, {q} : f32")
            b.emit(f"  tt.reduce.return {folded} : f32")
            b.emit(f"}}) : ({tensor_type((R, w), 'f32', lay.tile)}) -> {vec(R, 'f32', lay.rows)}")
            column = b.op(f"tt.expand_dims {red} {{axis = 1 : i32}} : {vec(R, 'f32', lay.rows)} -> {column_ty}")
            statistics.append(b.binary(c.operation.name, values[g.outs[j]], column, column_ty))
        return statistics

    for inner in a.block.operations:
        name = inner.operation.name
        if name in ("tensor.empty", "arith.constant", "linalg.transpose"):
            continue  # a transposed weight was loaded so before the loop
        if name == "tidal.yield":
            outs = [a.concats.get(v) or values[v] for v in inner.operands]  # a concat: its parts
            break
        if name == "tensor.extract_slice":
            values[inner.results[0]] = block_of(*a.slices[inner.results[0]])
        elif name == "tensor.concat":
            if inner.results[0] in a.held_concats:  # the parts stored side by side, read back whole
                full = _shape(inner.results[0])[1]
                desc = f"!ttg.memdesc<{R}x{full}xf32, #tile_smem, #smem, mutable>"
                buffer = b.op(f"ttg.local_alloc : () -> {desc}")
                for part, first, w in a.concats[inner.results[0]]:
                    sub_desc = f"!ttg.memdesc<{R}x{w}xf32, #tile_smem, #smem, mutable, {R}x{full}>"
                    sub = b.op(f"ttg.memdesc_subslice {buffer} [0, {first}] : {desc} -> {sub_desc}")
                    b.emit(f"ttg.local_store {values[part]}, {sub} : {tensor_type((R, w), 'f32', lay.tile)} -> {sub_desc}")
                values[inner.results[0]] = b.op(f"ttg.local_load {buffer} : {desc} -> {tensor_type((R, full), 'f32', lay.tile)}")
            continue  # else read in parts
        elif inner.results[0] not in a.virtual:  # a virtual value is computed where a slice reads it
            values.update(zip(inner.results, emit(inner, 0, _shape(inner.results[0])[1])))
    for j, (p, v) in enumerate(zip(ys_ptrs, outs[n:])):
        row_width = _shape(ys[j])[1]
        base = b.binary("arith.muli", step, b.const(a.rows * row_width, i32), i32)
        for part, first, w in v if isinstance(v, list) else [(v, 0, row_width)]:
            store_tile(p, values[part] if isinstance(v, list) else part, w, base, row_width, first)
    b.emit(f"scf.yield {', '.join([*outs[:n], *nexts])} : {', '.join(loop_types)}")
    b.indent -= 1
    b.emit("}")
    for i, (p, w) in enumerate(zip(out_ptrs, widths)):
        store_tile(p, f"{loop}#{i}", w)
    kernel = b.text()
    operands = a.operands[: n + k] + [a.operands[n + k + c] for c in consts]
    return RowScanLaunch(kernel, operands, a.rows, parts, exchange_floats=sum(2 * a.rows * w for _, w in exchanges),
                         arrivals=len(exchanges) * _blocks(a.rows, R), block_rows=R,
                         weights=sp.weights if sp else "streamed" if streamed else "held")
