"""Tile IR: the op kinds, their typed attributes, SSA values and the kernel structure.

One IR is lowered progressively (docs/architecture.md): Tile IR after tracing, then passes add warp groups, stages and,
finally, mbarrier operations. This module holds only data; printing is in `aref.ir.printer`, checking in
`aref.verify`.

A `Kernel` is: parameters (global tensors), a pre-loop block, at most one loop (singly nested, the class the
Twill solver handles) and a post-loop block. Loop-carried values are explicit: the loop has `inits` (values
from the pre-loop block), `carried` (the values seen inside the body), `yields` (the body's next values) and
`results` (the values seen after the loop).
"""
from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Union

from aref.errors import SrcInfo, UNKNOWN_LOC


# ----------------------------------------------------------------------------------------------- types
class DType(enum.Enum):
    """Element types of tiles and scalars; the value is the short name printed in IR."""

    float16 = "f16"
    bfloat16 = "bf16"
    float8_e4m3 = "f8e4m3"
    float8_e5m2 = "f8e5m2"
    float32 = "f32"
    int32 = "i32"
    bool_ = "i1"

    @property
    def bits(self) -> int:
        return {"f16": 16, "bf16": 16, "f8e4m3": 8, "f8e5m2": 8, "f32": 32, "i32": 32, "i1": 8}[self.value]

    @property
    def nbytes(self) -> int:
        return self.bits // 8

    @property
    def is_float(self) -> bool:
        return self.value.startswith(("f", "bf"))

    def __repr__(self) -> str:
        return f"aref.{self.name}"


# Types a tensor-core MMA accepts as operands (fp32 accumulate is implied).
MMA_OPERAND_DTYPES = (DType.float16, DType.bfloat16, DType.float8_e4m3, DType.float8_e5m2)
FLOAT8 = (DType.float8_e4m3, DType.float8_e5m2)


class Space(enum.Enum):
    """Memory space of a tile: global, shared, registers, or Blackwell tensor memory."""

    GMEM = "gmem"
    SMEM = "smem"
    RMEM = "rmem"
    TMEM = "tmem"


@dataclass(frozen=True)
class TileType:
    shape: tuple[int, ...]
    dtype: DType
    space: Space = Space.RMEM

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.nbytes

    def with_space(self, space: Space) -> "TileType":
        return TileType(self.shape, self.dtype, space)

    def __str__(self) -> str:
        dims = "x".join(str(s) for s in self.shape)
        return f"tile<{dims}x{self.dtype.value}, {self.space.value}>"


@dataclass(frozen=True)
class ScalarType:
    dtype: DType

    def __str__(self) -> str:
        return self.dtype.value


@dataclass(frozen=True)
class TensorType:
    """A kernel argument in global memory; shapes are static per specialization."""

    shape: tuple[int, ...]
    dtype: DType

    def __str__(self) -> str:
        return f"tensor<{'x'.join(str(s) for s in self.shape)}x{self.dtype.value}>"


@dataclass(frozen=True)
class ArefType:
    """An aref: a ring of `depth` slots, each holding one payload tuple."""

    payload: tuple[TileType, ...]
    depth: int

    @property
    def slot_bytes(self) -> int:
        return sum(t.nbytes for t in self.payload)

    def __str__(self) -> str:
        return f"aref<[{', '.join(str(t) for t in self.payload)}], depth={self.depth}>"


@dataclass(frozen=True)
class RingType:
    """The shared-memory buffers of one payload tile of a channel: `depth` slots of `tile`."""

    tile: TileType
    depth: int

    def __str__(self) -> str:
        return f"ring<{self.tile}, depth={self.depth}>"


@dataclass(frozen=True)
class BarrierType:
    """An array of `count` mbarriers (one per slot of a ring)."""

    count: int

    def __str__(self) -> str:
        return f"mbarrier[{self.count}]"


Type = Union[TileType, ScalarType, TensorType, ArefType, RingType, BarrierType]

_value_ids = itertools.count()


class Value:
    """An SSA value. Identity is the object; `name` is a readable hint for printing."""

    __slots__ = ("type", "name", "id")

    def __init__(self, type: Type, name: str | None = None):
        self.type = type
        self.name = name
        self.id = next(_value_ids)

    def __repr__(self) -> str:
        return f"Value(%{self.name or self.id}: {self.type})"


# ----------------------------------------------------------------------------------------------- ops
class OpKind(enum.Enum):
    # scalars
    CONST = "const"
    PROGRAM_ID = "program_id"
    SCALAR_BINARY = "scalar"
    # memory
    LOAD = "load"
    STORE = "store"
    # tile creation and views
    FULL = "full"
    ARANGE = "arange"
    TRANSPOSE = "transpose"
    EXPAND_DIMS = "expand_dims"
    SLICE = "slice"
    # compute
    MMA = "mma"
    UNARY = "unary"
    BINARY = "binary"
    COMPARE = "compare"
    WHERE = "where"
    REDUCE = "reduce"
    CAST = "cast"
    # arefs
    CHANNEL = "channel"
    PUT = "put"
    GET = "get"
    CONSUMED = "consumed"
    # pipelined level: choose between two values of a pipeline step (a skipped step passes state through)
    SELECT = "select"
    # Barrier IR (after aref lowering)
    MBAR_WAIT = "mbarrier_wait"
    MBAR_ARRIVE = "mbarrier_arrive"
    MBAR_EXPECT_TX = "mbarrier_arrive_expect_tx"
    TMA_LOAD = "tma_load"
    SLOT_STORE = "slot_store"
    SLOT_READ = "slot_read"
    FENCE_PROXY_ASYNC = "fence_proxy_async"
    TMEM_STORE_FENCE = "tmem_store_fence"
    MMA_ASYNC = "mma_async"
    MMA_WAIT = "mma_wait"
    MMA_COMMIT = "mma_commit"          # Blackwell: tcgen05.commit, an arrive once this group's MMAs complete
    TMEM_ALLOC = "tmem_alloc"          # Blackwell: allocate the kernel's tensor-memory columns
    TMEM_DEALLOC = "tmem_dealloc"      # ... and free them (relinquishing the allocation permit)
    NAMED_BAR_SYNC = "named_barrier_sync"
    NAMED_BAR_ARRIVE = "named_barrier_arrive"
    SETMAXNREG = "setmaxnreg"


@dataclass(frozen=True)
class NoAttrs:
    pass


@dataclass(frozen=True)
class ConstAttrs:
    value: Union[int, float, bool]


@dataclass(frozen=True)
class ProgramIdAttrs:
    axis: int


STORE_REDUCE = (None, "add")
# The functions of each function-carrying kind are the op registry's (`aref.ops.UNARY_FNS`, ...): one entry
# per (kind, fn).


@dataclass(frozen=True)
class FnAttrs:
    """The function of a SCALAR_BINARY, UNARY, BINARY, COMPARE or REDUCE op (and its axis for REDUCE)."""

    fn: str
    axis: int | None = None


@dataclass(frozen=True)
class LoadAttrs:
    """Tile box of a TMA-style load: the tensor's trailing dims are tiled; leading ones are indexed."""

    tile_shape: tuple[int, ...]


@dataclass(frozen=True)
class StoreAttrs:
    tile_shape: tuple[int, ...]
    reduce: str | None = None  # "add": accumulate into the tensor (a TMA reduce-add store)


@dataclass(frozen=True)
class FullAttrs:
    shape: tuple[int, ...]
    value: float
    dtype: DType


@dataclass(frozen=True)
class ArangeAttrs:
    n: int


@dataclass(frozen=True)
class TransposeAttrs:
    perm: tuple[int, ...]


@dataclass(frozen=True)
class ExpandDimsAttrs:
    axis: int


@dataclass(frozen=True)
class SliceAttrs:
    """A view of `size` elements starting at `start` along `axis` (cooperative groups' row halves)."""

    axis: int
    start: int
    size: int


@dataclass(frozen=True)
class CastAttrs:
    dtype: DType


@dataclass(frozen=True)
class ChannelAttrs:
    name: str
    depth: int
    user: bool = True  # False for compiler-inserted channels


@dataclass(frozen=True)
class BarrierAttrs:
    """Which mbarrier ring of which channel an op waits on or arrives at; `count` arrivals per arrive."""

    channel: str
    which: str            # "full" or "empty"
    count: int = 1


@dataclass(frozen=True)
class ExpectTxAttrs:
    channel: str
    bytes: int            # transaction bytes the TMA copies of one slot deliver


@dataclass(frozen=True)
class SlotAttrs:
    """A slot access: payload `index` of `channel`'s ring; TMA loads also carry their tile box. A `slot_store`
    with `cols` = (start, size) writes those columns of the payload only (Blackwell's column chunks,
    `aref.lower.chunk_sm100`); the item is whole once every chunk of it is stored."""

    channel: str
    index: int
    tile_shape: tuple[int, ...] = ()
    cols: tuple[int, ...] = ()


@dataclass(frozen=True)
class MmaAttrs:
    """An asynchronous MMA. On Blackwell `tmem` names the tensor-memory buffer it writes (the kernel's
    `TmemPlan`); empty on Hopper, where the accumulator lives in registers."""

    tmem: str = ""


@dataclass(frozen=True)
class TmemAttrs:
    """Tensor-memory allocation: `columns` 32-bit columns (a power of two, 32..512) of all 128 lanes."""

    columns: int


@dataclass(frozen=True)
class MmaWaitAttrs:
    pending: int          # wait until at most this many MMA groups of this warp group are in flight


@dataclass(frozen=True)
class NamedBarrierAttrs:
    id: int               # 1..15 (0 is __syncthreads)
    threads: int          # threads that take part: the syncing group's plus the arriving group's


@dataclass(frozen=True)
class SetMaxNRegAttrs:
    regs: int
    increase: bool


Attrs = Union[NoAttrs, ConstAttrs, ProgramIdAttrs, FnAttrs, LoadAttrs, StoreAttrs, FullAttrs, ArangeAttrs,
              TransposeAttrs, ExpandDimsAttrs, SliceAttrs, CastAttrs, ChannelAttrs, BarrierAttrs, ExpectTxAttrs, SlotAttrs,
              MmaAttrs, MmaWaitAttrs, NamedBarrierAttrs, SetMaxNRegAttrs, TmemAttrs]

# The attribute dataclass each kind must carry; the verifier checks it.
ATTRS_OF: dict[OpKind, type] = {
    OpKind.CONST: ConstAttrs, OpKind.PROGRAM_ID: ProgramIdAttrs, OpKind.SCALAR_BINARY: FnAttrs,
    OpKind.LOAD: LoadAttrs, OpKind.STORE: StoreAttrs, OpKind.FULL: FullAttrs, OpKind.ARANGE: ArangeAttrs,
    OpKind.TRANSPOSE: TransposeAttrs, OpKind.EXPAND_DIMS: ExpandDimsAttrs, OpKind.SLICE: SliceAttrs,
    OpKind.MMA: NoAttrs,
    OpKind.UNARY: FnAttrs, OpKind.BINARY: FnAttrs, OpKind.COMPARE: FnAttrs, OpKind.WHERE: NoAttrs,
    OpKind.REDUCE: FnAttrs, OpKind.CAST: CastAttrs, OpKind.CHANNEL: ChannelAttrs, OpKind.PUT: NoAttrs,
    OpKind.GET: NoAttrs, OpKind.CONSUMED: NoAttrs, OpKind.SELECT: NoAttrs,
    OpKind.MBAR_WAIT: BarrierAttrs, OpKind.MBAR_ARRIVE: BarrierAttrs, OpKind.MBAR_EXPECT_TX: ExpectTxAttrs,
    OpKind.TMA_LOAD: SlotAttrs, OpKind.SLOT_STORE: SlotAttrs, OpKind.SLOT_READ: SlotAttrs,
    OpKind.FENCE_PROXY_ASYNC: NoAttrs, OpKind.TMEM_STORE_FENCE: NoAttrs, OpKind.MMA_ASYNC: MmaAttrs, OpKind.MMA_WAIT: MmaWaitAttrs,
    OpKind.MMA_COMMIT: BarrierAttrs, OpKind.TMEM_ALLOC: TmemAttrs, OpKind.TMEM_DEALLOC: TmemAttrs,
    OpKind.NAMED_BAR_SYNC: NamedBarrierAttrs, OpKind.NAMED_BAR_ARRIVE: NamedBarrierAttrs,
    OpKind.SETMAXNREG: SetMaxNRegAttrs,
}

# Ops whose effect is not captured by their results (never dead-code eliminated; the roots of partitioning).
SIDE_EFFECTS = frozenset({OpKind.STORE, OpKind.PUT, OpKind.GET, OpKind.CONSUMED, OpKind.CHANNEL,
                          OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.TMA_LOAD,
                          OpKind.SLOT_STORE, OpKind.SLOT_READ, OpKind.FENCE_PROXY_ASYNC,
                          OpKind.TMEM_STORE_FENCE, OpKind.MMA_ASYNC,
                          OpKind.MMA_WAIT, OpKind.MMA_COMMIT, OpKind.TMEM_ALLOC, OpKind.TMEM_DEALLOC,
                          OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE, OpKind.SETMAXNREG})
CHANNEL_OPS = frozenset({OpKind.PUT, OpKind.GET, OpKind.CONSUMED})
# index math: the sources of index values, and the elementwise ops and views that stay index math when every
# operand is (a scalar or) index math
INDEX_SOURCES = frozenset({OpKind.CONST, OpKind.PROGRAM_ID, OpKind.SCALAR_BINARY, OpKind.FULL, OpKind.ARANGE})
INDEX_MATH = frozenset({OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE, OpKind.WHERE, OpKind.CAST,
                        OpKind.TRANSPOSE, OpKind.EXPAND_DIMS, OpKind.SLICE})


@dataclass(eq=False)
class Op:
    """One operation. `loc` is the user's source line it came from.

    From the pipelined level on, an op may be predicated: it runs only when the i1 scalar `pred` is true
    (prologue and epilogue steps of a pipeline); `stage` records the pipeline stage it was scheduled in.
    """

    kind: OpKind
    operands: tuple[Value, ...]
    results: tuple[Value, ...]
    attrs: Attrs
    loc: SrcInfo = UNKNOWN_LOC
    pred: "Value | None" = None
    stage: int | None = None

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.kind} has {len(self.results)} results"
        return self.results[0]


@dataclass(eq=False)
class Block:
    ops: list[Op] = field(default_factory=list)

    def __iter__(self):
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)


@dataclass(eq=False)
class Loop:
    """The kernel's single loop `for iv in range(trip_count)` with explicit loop-carried values."""

    iv: Value
    trip_count: Value
    inits: tuple[Value, ...]
    carried: tuple[Value, ...]
    body: Block
    yields: tuple[Value, ...]
    results: tuple[Value, ...]
    loc: SrcInfo = UNKNOWN_LOC


@dataclass(frozen=True)
class Param:
    name: str
    value: Value


@dataclass(eq=False)
class Kernel:
    """A specialized tile program: one CTA's work, run for every point of `grid`."""

    name: str
    params: tuple[Param, ...]
    constexprs: dict[str, object]
    grid: tuple[int, ...]
    pre: Block
    loop: Loop | None
    post: Block
    loc: SrcInfo = UNKNOWN_LOC

    def blocks(self) -> list[tuple[str, Block]]:
        out = [("pre", self.pre)]
        if self.loop is not None:
            out.append(("loop", self.loop.body))
        out.append(("post", self.post))
        return out

    def all_ops(self):
        for _, block in self.blocks():
            yield from block.ops

    def channels(self) -> list[Op]:
        return [op for op in self.all_ops() if op.kind is OpKind.CHANNEL]


def index_math(ops) -> set:
    """Those of `ops` (in program order: producers first) that compute index values: constants, program ids,
    scalar math, `arange`/`full` tiles and the elementwise ops and views whose operands are all scalars (a loop
    index included) or index math — index tiles and masks (a causal mask, a ragged-edge mask). Every warp group
    that reads such a value recomputes it where it is read: it is never handed between groups nor carried
    between pipeline steps."""
    out: set = set()
    made: dict = {}
    for op in ops:
        if op.kind in INDEX_SOURCES or op.kind in INDEX_MATH and op.results and all(
                isinstance(v.type, ScalarType) or made.get(id(v)) in out for v in op.operands):
            out.add(op)
        for r in op.results:
            made[id(r)] = op
    return out
