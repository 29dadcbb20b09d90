"""Which kernel variant a step launches: the flat (vector-load) or strided variant of a generic
for its operands' layout (`_layout`), the block sizes of a split reduction, a scan's form and tile
(`_ScanPlan`), each made once per key by `_Variants`. The numbers were measured on the H100/H200.
"""

from __future__ import annotations


class _Variants:
    """The kernels of one op, one per variant key (block sizes, layout): made when first asked for
    (and then listed for --emit), compiled at their first launch."""

    def __init__(self, builder, op, make):  # builder: a plan.PlanBuilder
        self.builder, self.op, self.make, self.entries = builder, op, make, {}

    def kernel(self, key: tuple):
        if key not in self.entries:
            self.entries[key] = self.builder.take(self.make(*key), self.op)
        return self.entries[key]

    def compiled(self, key: tuple):
        return self.builder.compiled(self.kernel(key))


def _layout(flat_reads, tensors, count: int, any_dense_order: bool = False) -> tuple[bool, bool]:
    """(flat, aligned) kernel variant for these operands: flat when the op has a flat variant and
    every operand it reads at flat positions is contiguous and 16-byte aligned (vector loads);
    aligned when the flat loop's length `count` is also a multiple of 16. No tensors (--emit at
    static shapes): as if contiguous. `any_dense_order` (an elementwise kernel): operands of one
    shape and one dense layout, whatever its dim order ([T, B, D] views of [B, T, D] buffers),
    are flat too, since element i of each lies at offset i alike."""
    reads = [t for t, r in zip(tensors, flat_reads or ()) if r]
    if flat_reads is None or not all(t.data_ptr() % 16 == 0 for t in reads):
        return False, False
    if any_dense_order and reads:
        flat = all(t.shape == reads[0].shape and t.stride() == reads[0].stride() for t in reads) and _dense(reads[0])
    else:
        flat = all(t.is_contiguous() for t in reads)
    return flat, flat and count % 16 == 0


def _dense(t) -> bool:
    """Every element of `t`'s memory span [data_ptr, data_ptr + numel) is one element of `t`:
    strides a permutation of a contiguous tensor's (sizes 1 aside)."""
    expected = 1
    for stride, size in sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def dense_like(shape, dtype, device, tensors):
    """An empty tensor of `shape` in the dim order of the first of `tensors` of that shape laid out
    densely but not contiguously (a transposed view): an elementwise kernel then reads and writes
    all of them flat. Contiguous where one of them is (a parameter's gradient stays contiguous)
    or none is dense."""
    import torch

    if any(tuple(t.shape) == tuple(shape) and t.is_contiguous() for t in tensors):
        return torch.empty(shape, dtype=dtype, device=device)
    for t in tensors:
        if tuple(t.shape) == tuple(shape) and not t.is_contiguous() and _dense(t):
            return torch.empty_strided(shape, t.stride(), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _variant_name(name: str, flat: bool, aligned: bool) -> str:
    return name + ("_flat" if flat else "") + ("16" if aligned else "")


# A look-back chunk: a register tile of at most this many bytes of the scan's inputs (and at most
# 8192 elements: past that the registers ran out). [1M, 16] f32 linear recurrence on the H100
# (copy 2.97 TB/s): 64 KiB (512 rows) 127-135 us, 32 KiB 143-164 us; the three-kernel
# reduce-then-scan it replaced 155-175 us. With each thread scanning runs of 16 rows
# (`_GroupedTile`), on an H200 (copy 4.0 TB/s): 64 KiB 88.6 us of kernel time against 114.7
# for the [512, 16] tt.scan; 32 KiB (256 rows, prototype) 122 us, 128 KiB 102 us.
LOOKBACK_TILE_BYTES = 1 << 16


# Columns from which a scan walks its rows in one program per column block (`wide_scan_kernel`)
# rather than looking back: the gated linear recurrence forward over [B, T, D] f32 on an H200 (one
# process, median ms, look-back / wide): [2, 4096, 1024] 0.084 / 0.085, [4, 4096, 1024] 0.161 /
# 0.121, [8, 4096, 1024] 0.188-0.243 / 0.153-0.184, [32, 2048, 2048] 0.650-0.760 / 0.436-0.443
# (86-90% of the roofline op; accelerated-scan 0.417-0.487). Tiles of 4096 elements, a thread a
# run of 16 rows: [256, 16] until the 64-column blocks alone number 512, then [64, 64]; of the
# [64-512, 16-64] tiles with 4 or 8 warps swept, none was faster at every width. bf16 pairs in
# tiles of as many bytes (8192 elements) ran slower: [32, 2048, 2048] 0.48-0.50 ms against 0.397
# for [64, 64] (roofline op 0.197, accelerated-scan 0.251; H200, 2026-11-29).
WIDE_SCAN_COLUMNS = 4096
WIDE_TILE = 4096


class _ScanPlan:
    """How an associative_scan of [length, width] rows runs: `form` "scan" (one program per
    column block walks every row: too few rows to fill the GPU with chunks), "wide" (the same in
    look-back-sized tiles: columns enough to fill the GPU) or "lookback" (one pass over chunks of
    `block_t` rows)."""

    def __init__(self, length: int, width: int, elem_sizes: list[int]):
        self.block_c, walk_t = _scan_blocks(width)
        elements = min(8192, LOOKBACK_TILE_BYTES // sum(elem_sizes))
        tile_t = max(16, (1 << (elements.bit_length() - 1)) // self.block_c)
        # a walk of at most 4 tiles: a look-back's chunk would be the whole scan
        self.form = "scan" if length <= 4 * walk_t else "wide" if width >= WIDE_SCAN_COLUMNS else "lookback"
        if self.form == "wide":
            self.block_c = 64 if width >= 512 * 64 else 16
            self.block_t = WIDE_TILE // self.block_c
        else:
            self.block_t = walk_t if self.form == "scan" else tile_t
        self.col_blocks = _cdiv(width, self.block_c)
        self.key = (self.form, self.block_t, self.block_c)  # the kernel variant it launches


def _lookback_window(block_c: int) -> int:
    """Chunks looked back at per step: 32 for 16 columns, 16 for 64 (on the H100, [1M, 64] read
    with vector loads: 16 535 us, 32 564, 64 703)."""
    return max(8, min(32, 1024 // block_c))


# Split reductions: programs, elements of a row per tile, elements per tile, warps. Measured on the
# H100, a full reduction of 4096x4096 f32 (cond_clamp's predicate; 64 MB): 528 programs of
# 1024/2048 with 4 warps 44.8 us, 1056 programs of 2048/2048 with 8 warps 31.6 us (2.1 TB/s);
# larger tiles, 16 warps or 2112 programs were no faster.
REDUCE_PROGRAMS, REDUCE_BLOCK, REDUCE_TILE, REDUCE_WARPS = 8 * 132, 2048, 2048, 8


def _scan_blocks(width: int) -> tuple[int, int]:
    """(columns, rows) of a scan tile: about 1024 elements."""
    block_c = min(_next_pow2(max(width, 1)), 64)
    return block_c, max(1024 // block_c, 16)


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
