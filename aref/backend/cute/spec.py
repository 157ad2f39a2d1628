"""Kernel specs: the CuTe DSL backend's input contract.

A spec says *what* a kernel template must instantiate, explicitly and with plain types, so that the project's
Barrier IR can later be translated into it field by field: the tensors, the CTA tile, the dtypes, how many
consumer warp groups there are and how they share work, the aref channels (each lowered to a ring of
`depth` slots with one `full` and one `empty` mbarrier per slot), the wgmma issue depth and the register
budget of each role. `KernelSpec.validate()` checks everything a template relies on and raises `SpecError`
with a message naming the field, the value and the limit.

Dtype names are the short names of `aref.ir.DType` ("f16", "bf16", "f8e4m3", "f8e5m2", "f32").
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

# Bytes per element of each dtype name the backend knows.
DTYPE_BYTES = {"f16": 2, "bf16": 2, "f8e4m3": 1, "f8e5m2": 1, "f32": 4}
# CuTe DSL class names (attributes of the `cutlass` module) used by generated sources.
CUTLASS_DTYPE = {
    "f16": "Float16", "bf16": "BFloat16", "f8e4m3": "Float8E4M3FN", "f8e5m2": "Float8E5M2", "f32": "Float32",
}
WGMMA_INPUT_DTYPES = ("f16", "bf16", "f8e4m3", "f8e5m2")
OUTPUT_DTYPES = ("f16", "bf16")  # the epilogue stores through stmatrix, a 16-bit instruction

THREADS_PER_WARP_GROUP = 128
REGISTERS_PER_SM = 64 * 1024
SMEM_PER_CTA_SM90 = 227 * 1024  # opt-in maximum dynamic shared memory per block on sm_90
MBARRIER_BYTES = 8
SWIZZLE_ALIGN = 1024  # 128B-swizzled tiles must start on a 1024-byte boundary
SMEM_RESERVED = 1024  # headroom the DSL's allocator may use for alignment of the barrier block


class SpecError(ValueError):
    """The spec cannot be instantiated; the message names the field, the value and the limit."""


class ConsumerMode(enum.Enum):
    """How consumer warp groups share the CTA's work.

    COOPERATIVE: the consumers split the rows of one tile; all wait on the same `full` barrier and each
    releases the slot (the `empty` count is the number of consumer groups).
    PINGPONG: the consumers work on different (sub-)tiles and take turns on the tensor cores, ordered by
    named barriers, so one group's softmax/epilogue overlaps the other's MMAs.
    """

    COOPERATIVE = "cooperative"
    PINGPONG = "pingpong"


class ProducerKind(enum.Enum):
    """Who fills a channel slot: the TMA unit (completion by transaction bytes) or threads (by arrivals)."""

    TMA = "tma"
    REGISTER = "register"


@dataclass(frozen=True)
class TensorSpec:
    """A global tensor parameter. `shape` entries are ints or None (dynamic); the last mode is contiguous."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class PayloadSpec:
    """One shared-memory tile carried by every slot of a channel."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class ChannelSpec:
    """An aref channel lowered to a ring of `depth` slots, each with a `full` and an `empty` mbarrier.

    Item k uses slot k % depth; consumers wait on full[slot] with parity (k // depth) % 2, producers wait
    on empty[slot] with the opposite parity so their first pass does not block.
    `full` is initialised with `producer_arrivals` (1 for TMA: one elected thread arrives with the expected
    transaction bytes; for register producers, the number of arriving threads/warps). `empty` is
    initialised with `consumer_arrivals` (the templates arrive once per consumer warp group, from an
    elected thread, after the group's last reader of the slot is known complete).
    """

    name: str
    depth: int
    payloads: tuple[PayloadSpec, ...]
    producer: ProducerKind = ProducerKind.TMA
    consumer_arrivals: int = 1
    producer_arrivals: int = 1

    @property
    def slot_bytes(self) -> int:
        """Bytes of one slot, payloads each aligned for the 128B swizzle."""
        return sum(_align(p.nbytes, SWIZZLE_ALIGN) for p in self.payloads)

    @property
    def tx_bytes(self) -> int:
        """Transaction bytes a TMA producer announces on `full` for one slot."""
        return sum(p.nbytes for p in self.payloads)


@dataclass(frozen=True)
class RegisterBudget:
    """Per-thread register counts set with setmaxnreg: producers decrease, consumers increase."""

    producer: int = 40
    consumer: int = 232


@dataclass(frozen=True)
class TileShape:
    """CTA tile: BM rows of the output, BN columns, BK of the reduction per pipeline item."""

    bm: int
    bn: int
    bk: int


@dataclass(frozen=True)
class KernelSpec:
    """Everything a role-based template needs to instantiate one kernel.

    kind: "gemm" (C = A·Bᵀ) or "attention" (forward, O = softmax(Q·Kᵀ·scale)·V).
    tensors: global parameters in call order (gemm: A, B, C; attention: Q, K, V, O).
    tile: CTA tile. For attention BM is the Q rows per consumer group, BN the K/V rows per item, BK the head
    dim. a/b/acc/out dtypes: MMA operand, accumulator and stored output dtypes.
    num_consumers / mode: consumer warp groups and how they share work (see `ConsumerMode`).
    channels: the aref rings (depth, payloads, arrival counts); their mbarriers are the kernel's only ones.
    mma_depth: P, the number of wgmma groups left in flight (wgmma.wait_group(P)); a slot is released only
    after the wgmma that read it is known complete, so P must be < the depth of the ring it reads.
    registers: setmaxnreg budgets. persistent: whether CTAs loop over tiles (grid = #SMs).
    """

    kind: str
    tensors: tuple[TensorSpec, ...]
    tile: TileShape
    a_dtype: str
    b_dtype: str
    acc_dtype: str
    out_dtype: str
    num_consumers: int
    mode: ConsumerMode
    channels: tuple[ChannelSpec, ...]
    mma_depth: int = 1
    registers: RegisterBudget = field(default_factory=RegisterBudget)
    persistent: bool = False

    # ----------------------------------------------------------------------------------- derived values
    @property
    def num_threads(self) -> int:
        """One producer warp group plus the consumer groups."""
        return THREADS_PER_WARP_GROUP * (1 + self.num_consumers)

    @property
    def num_mbarriers(self) -> int:
        return sum(2 * ch.depth for ch in self.channels)

    @property
    def mbarrier_bytes(self) -> int:
        return self.num_mbarriers * MBARRIER_BYTES

    @property
    def epilogue_bytes(self) -> int:
        """Output staging tile; it aliases the first ring when that ring is large enough (non-persistent)."""
        if self.kind == "gemm":
            staging = self.tile.bm * self.tile.bn * DTYPE_BYTES[self.out_dtype]
        else:
            staging = self.num_consumers * self.tile.bm * self.tile.bk * DTYPE_BYTES[self.out_dtype]
        return 0 if self.epilogue_aliases_ring else _align(staging, SWIZZLE_ALIGN)

    @property
    def epilogue_aliases_ring(self) -> bool:
        """Whether output staging reuses a ring: gemm's A/B ring when big enough, attention's Q slot."""
        if self.kind == "attention":
            return True  # each consumer stages O (BM×D, 16-bit) in its own Q sub-tile after its last Q·Kᵀ
        if self.persistent or not self.channels:
            return False
        ring = self.channels[0].depth * self.channels[0].slot_bytes
        return ring >= self.tile.bm * self.tile.bn * DTYPE_BYTES[self.out_dtype]

    @property
    def smem_bytes(self) -> int:
        """Shared memory the template allocates: rings + staging + mbarriers + alignment headroom."""
        rings = sum(ch.depth * ch.slot_bytes for ch in self.channels)
        return rings + self.epilogue_bytes + _align(self.mbarrier_bytes, 16) + SMEM_RESERVED

    @property
    def accumulator_registers(self) -> int:
        """fp32 accumulator registers per consumer thread (the dominant consumer register cost)."""
        if self.kind == "gemm":
            rows = self.tile.bm // self.num_consumers if self.mode is ConsumerMode.COOPERATIVE else self.tile.bm
            return rows * self.tile.bn // THREADS_PER_WARP_GROUP
        # attention: S (BM×BN fp32), O (BM×head_dim fp32) and P (BM×BN 16-bit, half the registers) are live
        # together while P·V of the previous tile overlaps Q·Kᵀ of the next.
        t = self.tile
        return (t.bm * t.bn + t.bm * t.bk + t.bm * t.bn // 2) // THREADS_PER_WARP_GROUP

    def tensor(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise SpecError(f"spec has no tensor named {name!r}; tensors are {[t.name for t in self.tensors]}")

    # ------------------------------------------------------------------------------------- validation
    def validate(self) -> "KernelSpec":
        """Raise `SpecError` on the first violated constraint; return self so calls can be chained."""
        if self.kind not in ("gemm", "attention"):
            raise SpecError(f"kind={self.kind!r} is not a known template; expected 'gemm' or 'attention'")
        self._validate_dtypes()
        self._validate_tile()
        self._validate_tensors()
        self._validate_channels()
        self._validate_registers()
        if self.smem_bytes > SMEM_PER_CTA_SM90:
            parts = ", ".join(f"{ch.name}: {ch.depth}×{ch.slot_bytes} B" for ch in self.channels)
            raise SpecError(
                f"shared memory {self.smem_bytes} B exceeds the {SMEM_PER_CTA_SM90} B (227 KB) per-CTA limit "
                f"(rings {parts}; staging {self.epilogue_bytes} B; {self.num_mbarriers} mbarriers "
                f"{self.mbarrier_bytes} B; {SMEM_RESERVED} B alignment headroom): lower a channel depth"
            )
        return self

    def _validate_dtypes(self) -> None:
        for fname in ("a_dtype", "b_dtype", "acc_dtype", "out_dtype"):
            value = getattr(self, fname)
            if value not in DTYPE_BYTES:
                raise SpecError(f"{fname}={value!r} is not a dtype name; expected one of {sorted(DTYPE_BYTES)}")
        for fname in ("a_dtype", "b_dtype"):
            if getattr(self, fname) not in WGMMA_INPUT_DTYPES:
                raise SpecError(
                    f"{fname}={getattr(self, fname)!r} is not a wgmma operand dtype; "
                    f"expected one of {WGMMA_INPUT_DTYPES}"
                )
        a_bytes, b_bytes = DTYPE_BYTES[self.a_dtype], DTYPE_BYTES[self.b_dtype]
        if self.kind == "attention" and a_bytes != 2:
            raise SpecError(f"attention supports 16-bit inputs only; got a_dtype={self.a_dtype!r}")
        if a_bytes == 2 and self.a_dtype != self.b_dtype or a_bytes != b_bytes:
            raise SpecError(
                f"wgmma needs matching 16-bit operands or two fp8 operands; got a_dtype={self.a_dtype!r}, "
                f"b_dtype={self.b_dtype!r}"
            )
        if self.acc_dtype != "f32":
            raise SpecError(f"acc_dtype={self.acc_dtype!r}: the templates accumulate in 'f32' only")
        if self.out_dtype not in OUTPUT_DTYPES:
            raise SpecError(f"out_dtype={self.out_dtype!r}: the epilogue stores one of {OUTPUT_DTYPES}")

    def _validate_tile(self) -> None:
        t = self.tile
        if min(t.bm, t.bn, t.bk) <= 0:
            raise SpecError(f"tile {t} must have positive extents")
        if not 1 <= self.num_consumers <= 2:
            raise SpecError(f"num_consumers={self.num_consumers}: the templates use 1 or 2 consumer warp groups")
        k_atom = 32 // DTYPE_BYTES[self.a_dtype]  # wgmma K: 16 for 16-bit, 32 for fp8
        if self.kind == "gemm":
            if self.mode is not ConsumerMode.COOPERATIVE:
                raise SpecError("mode=PINGPONG for gemm needs a persistent tile scheduler; use COOPERATIVE")
            if t.bm % (64 * self.num_consumers):
                raise SpecError(
                    f"tile.bm={t.bm} must be a multiple of 64 × num_consumers={self.num_consumers} "
                    f"(each consumer warp group issues m64 wgmmas on its own rows)"
                )
            if t.bn % 16 or not 16 <= t.bn <= 256:
                raise SpecError(f"tile.bn={t.bn} must be a multiple of 16 in 16..256 (wgmma N)")
        else:
            if self.mode is not ConsumerMode.PINGPONG or self.num_consumers != 2:
                raise SpecError("attention uses mode=PINGPONG with num_consumers=2 (FA3 structure)")
            if t.bm not in (64, 128) or t.bn != 128:
                raise SpecError(f"attention tile needs bm in (64, 128) Q rows per consumer and bn=128; got {t}")
            if t.bk not in (64, 128):
                raise SpecError(f"attention head dim (tile.bk) must be 64 or 128; got {t.bk}")
        if t.bk % k_atom:
            raise SpecError(f"tile.bk={t.bk} must be a multiple of the wgmma K ({k_atom}) for {self.a_dtype}")
        if self.accumulator_registers > self.registers.consumer - 24:
            raise SpecError(
                f"accumulators need {self.accumulator_registers} fp32 registers per consumer thread, over the "
                f"consumer budget {self.registers.consumer} minus 24 for addresses and loop state: use more "
                f"consumer warp groups or a smaller tile"
            )

    def _validate_tensors(self) -> None:
        t = self.tile
        if self.kind == "gemm":
            names, extents = ("A", "B", "C"), {"A": (t.bm, t.bk), "B": (t.bn, t.bk), "C": (t.bm, t.bn)}
        else:
            names = ("Q", "K", "V", "O")
            extents = {n: (t.bm * self.num_consumers if n in "QO" else t.bn, t.bk) for n in names}
            for ts in self.tensors:
                if len(ts.shape) == 2 and ts.shape[1] != t.bk:
                    raise SpecError(f"tensor {ts.name} has head dim {ts.shape[1]}, but tile.bk (the head dim) is "
                                    f"{t.bk}; the head dim must be static and equal")
        if tuple(x.name for x in self.tensors) != names:
            raise SpecError(f"{self.kind} tensors must be {names} in that order; got "
                            f"{tuple(x.name for x in self.tensors)}")
        for ts in self.tensors:
            if len(ts.shape) != 2:
                raise SpecError(f"tensor {ts.name} has shape {ts.shape}; the templates take rank-2 tensors")
            for dim, (extent, tile_extent) in enumerate(zip(ts.shape, extents[ts.name])):
                if extent is not None and (extent <= 0 or extent % tile_extent):
                    raise SpecError(
                        f"tensor {ts.name} mode {dim} has extent {extent}, not a positive multiple of the tile "
                        f"extent {tile_extent}: the templates do not predicate partial tiles"
                    )
        want = {"A": self.a_dtype, "B": self.b_dtype, "C": self.out_dtype,
                "Q": self.a_dtype, "K": self.a_dtype, "V": self.a_dtype, "O": self.out_dtype}
        for ts in self.tensors:
            if ts.dtype != want[ts.name]:
                raise SpecError(f"tensor {ts.name} has dtype {ts.dtype!r} but the spec says {want[ts.name]!r}")

    def _validate_channels(self) -> None:
        if not self.channels:
            raise SpecError("a kernel needs at least one channel")
        seen = set()
        for ch in self.channels:
            if ch.name in seen or not ch.name.isidentifier():
                raise SpecError(f"channel name {ch.name!r} must be a unique Python identifier")
            seen.add(ch.name)
            if ch.depth < 1:
                raise SpecError(f"channel {ch.name!r} has depth {ch.depth}; a ring needs depth >= 1")
            if ch.consumer_arrivals < 1 or ch.producer_arrivals < 1:
                raise SpecError(f"channel {ch.name!r}: arrival counts must be >= 1")
            if ch.producer is ProducerKind.TMA and ch.producer_arrivals != 1:
                raise SpecError(f"channel {ch.name!r}: a TMA channel's full barrier has exactly 1 arrival "
                                f"(the elected arrive_and_expect_tx); got {ch.producer_arrivals}")
            if not ch.payloads:
                raise SpecError(f"channel {ch.name!r} carries no payload")
            for p in ch.payloads:
                if p.dtype not in DTYPE_BYTES:
                    raise SpecError(f"payload {ch.name}.{p.name} dtype {p.dtype!r} is unknown")
        if self.kind == "attention":
            if self.mma_depth != 1:
                raise SpecError(f"attention: mma_depth={self.mma_depth}, but the template keeps exactly one wgmma "
                                f"group (P·V of the previous tile) in flight under Q·Kᵀ of the next: use 1")
            if tuple(ch.name for ch in self.channels) != ("q", "k", "v"):
                raise SpecError("attention channels must be ('q', 'k', 'v')")
            if self.channels[0].depth != 1:
                raise SpecError("attention: channel 'q' is loaded once per CTA and has depth 1")
            return
        ring = self.channels[0]
        if not 0 <= self.mma_depth < ring.depth:
            raise SpecError(
                f"mma_depth={self.mma_depth} must be in 0..depth-1={ring.depth - 1} of channel {ring.name!r}: "
                f"a consumer holds mma_depth+1 slots while its wgmmas are in flight"
            )

    def _validate_registers(self) -> None:
        r = self.registers
        for role, n in (("producer", r.producer), ("consumer", r.consumer)):
            if n % 8 or not 24 <= n <= 256:
                raise SpecError(f"registers.{role}={n}: setmaxnreg takes a multiple of 8 in 24..256")
        if r.producer > r.consumer:
            raise SpecError(f"registers.producer={r.producer} > registers.consumer={r.consumer}: producers "
                            f"give registers to consumers, not the reverse")
        total = THREADS_PER_WARP_GROUP * (r.producer + self.num_consumers * r.consumer)
        if total > REGISTERS_PER_SM:
            raise SpecError(
                f"register budget 128 × ({r.producer} + {self.num_consumers} × {r.consumer}) = {total} exceeds "
                f"the {REGISTERS_PER_SM} registers of an SM"
            )


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


# --------------------------------------------------------------------------------------------- builders
def gemm_spec(
    m: int | None,
    n: int | None,
    k: int | None,
    *,
    tile: tuple[int, int, int] = (128, 128, 64),
    in_dtype: str = "f16",
    out_dtype: str | None = None,
    num_consumers: int = 2,
    depth: int = 4,
    mma_depth: int = 1,
    registers: RegisterBudget | None = None,
) -> KernelSpec:
    """A validated cooperative GEMM spec C[m,n] = A[m,k]·B[n,k]ᵀ with one TMA channel `ab`.

    `out_dtype` defaults to the input dtype for 16-bit inputs and to "bf16" for fp8.
    """
    bm, bn, bk = tile
    out = out_dtype or (in_dtype if DTYPE_BYTES.get(in_dtype) == 2 else "bf16")
    ab = ChannelSpec(
        name="ab",
        depth=depth,
        payloads=(PayloadSpec("a", (bm, bk), in_dtype), PayloadSpec("b", (bn, bk), in_dtype)),
        producer=ProducerKind.TMA,
        consumer_arrivals=num_consumers,
    )
    if registers is None:
        registers = RegisterBudget(40, 232) if num_consumers == 2 else RegisterBudget(40, 240)
    return KernelSpec(
        kind="gemm",
        tensors=(TensorSpec("A", in_dtype, (m, k)), TensorSpec("B", in_dtype, (n, k)),
                 TensorSpec("C", out, (m, n))),
        tile=TileShape(bm, bn, bk),
        a_dtype=in_dtype, b_dtype=in_dtype, acc_dtype="f32", out_dtype=out,
        num_consumers=num_consumers, mode=ConsumerMode.COOPERATIVE,
        channels=(ab,), mma_depth=mma_depth, registers=registers,
    ).validate()


def attention_spec(
    seq_q: int | None,
    seq_k: int | None,
    *,
    head_dim: int = 128,
    dtype: str = "f16",
    bm: int = 64,
    bn: int = 128,
    kv_depth: int = 2,
    registers: RegisterBudget | None = None,
) -> KernelSpec:
    """A validated FA3-structure attention-forward spec: O = softmax(Q·Kᵀ·scale)·V, one head.

    Two consumer warp groups in ping-pong each own `bm` rows of a 2·bm-row Q tile; channels `q` (depth 1),
    `k` and `v` (depth `kv_depth`) are TMA-filled and released by both consumer groups.
    """
    both = 2
    q = ChannelSpec("q", 1, (PayloadSpec("q", (both * bm, head_dim), dtype),), consumer_arrivals=both)
    k = ChannelSpec("k", kv_depth, (PayloadSpec("k", (bn, head_dim), dtype),), consumer_arrivals=both)
    v = ChannelSpec("v", kv_depth, (PayloadSpec("v", (bn, head_dim), dtype),), consumer_arrivals=both)
    return KernelSpec(
        kind="attention",
        tensors=(TensorSpec("Q", dtype, (seq_q, head_dim)), TensorSpec("K", dtype, (seq_k, head_dim)),
                 TensorSpec("V", dtype, (seq_k, head_dim)), TensorSpec("O", dtype, (seq_q, head_dim))),
        tile=TileShape(bm, bn, head_dim),
        a_dtype=dtype, b_dtype=dtype, acc_dtype="f32", out_dtype=dtype,
        num_consumers=both, mode=ConsumerMode.PINGPONG, channels=(q, k, v), mma_depth=1,
        registers=registers or RegisterBudget(24, 240),
    ).validate()
