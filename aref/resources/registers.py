"""Registers: what a warp group's tiles take, when they are live, and the setmaxnreg budgets that follow.

Layout (Hopper, sm_90a): a 2-D register tile (R, C) of a 128-thread warp group is held in a wgmma accumulator
layout, R·C/128 elements per thread; a row vector (R,) holds one value per row a thread touches, 2 per 64-row
slab, so every thread of the quad sharing a row keeps its own copy. 16-bit elements pack two to a register.
Blackwell (sm_100a) tiles come from tcgen05.ld, one row per thread (a (128, C) tile is C values per thread,
a row vector one value, a column vector (C,) the C values of a row, as a 128-row tile's thread holds them).

Liveness follows the code generator's storage rules, so the figure here is what the generated role holds:

  * an elementwise op whose single user is another elementwise op or a reduction in the same block, with no
    MMA issue or slot release in between, is fused into that user and takes no storage;
  * an elementwise result takes the storage of a same-typed operand that dies there (in place), an MMA
    accumulates in place; a 16-bit cast of a register tile is computed where it is used (its source lives
    until then); views (transpose, slice, expand_dims) and pipeline selects share their source's storage;
    a constant tile (`full`) is a literal until something materializes it (a loop-carried value);
  * a loop-carried tile keeps one storage for the whole loop (its init, every yield computed after the
    carried value's last read, and the loop result share it);
  * a value written or read by a wgmma stays allocated until the `mma_wait` that retires that wgmma;
  * Blackwell: a tensor-memory slot's tile read by CUDA cores is loaded into registers where it is taken
    (tcgen05.ld), and elementwise results may take its storage; a vector along the columns read from a
    shared-memory slot is read there by every user (`Liveness.slot_columns`) and takes no registers; a
    register tile of 32-bit elements written to shared memory is stored a register at a time, so it takes no
    registers beyond its own (`aref.backend.cute.sm100.support.copy_rows`: 16-byte vector stores, kept for
    packed 8- and 16-bit tiles, need aligned register quads that ptxas re-packs, beyond this count).

`RegisterDemand.need` (`aref.resources.demand`) adds `ROLE_OVERHEAD` (addresses, descriptors, loop state,
measured with ptxas) and rounds to the setmaxnreg step. `assign_budgets` gives every group its need and shares the rest of the
CTA's register pool; `check_budgets` is the launch rule (steps of 8 in 24..256, sum within the pool).
"""
from __future__ import annotations

from aref import ops
from aref.errors import ArefError
from aref.ir import DType, Op, OpKind, Space, TileType, Value
from aref.ops import MMA_KINDS, TILE_SOURCES, VIEWS
from aref.target import DEFAULT_ARCH, target_of, uniform

# the targets' register file and setmaxnreg range (every target's the same: `aref.target.uniform`)
REGISTERS_PER_SM = uniform("registers_per_sm")          # 32-bit registers per SM (and per CTA at one CTA per SM)
MIN_REGS, MAX_REGS, REG_STEP = uniform("setmaxnreg_min"), uniform("setmaxnreg_max"), uniform("setmaxnreg_step")
BUDGET_CAP = 240                  # the most a computing warp group is given (CUTLASS / FA3: ptxas keeps headroom)
LAUNCH_CAP = 248                  # registers per thread at launch, before setmaxnreg
ROLE_OVERHEAD = 32                # a computing role's registers beyond its tiles (ptxas-measured)
PRODUCER_MAX = 48                 # the most a pure data-movement group (TMA issue, no tiles) is given
PRODUCER_FLOOR = MIN_REGS          # what a producer keeps when it gives registers to tight computing groups (FA3)
PTXAS_HEADROOM = 40               # the model's need may fall short of ptxas's by this much (causal attention at
                                  # D=128 on sm_90a: 200 estimated, spilled at 232, fits at 240)
THREADS = 128
_DEBUG = False

# kinds the code generator computes lazily inside their user's element loop (the op registry's expression and
# view emissions), and the users such a chain may be fused into
LAZY = frozenset(k for k in OpKind if any(e.form in (ops.EXPR, ops.VIEWING) for d in ops.entries()
                                          if d.kind is k for e in d.cute)) - {OpKind.CONST, OpKind.TRANSPOSE}
ELEMENTWISE = tuple(sorted(LAZY - {OpKind.FULL, OpKind.ARANGE, OpKind.SLICE}, key=lambda k: k.value))
FUSABLE_USERS = ELEMENTWISE + (OpKind.REDUCE,)
MAX_FUSED_LEAVES = 4           # stored tiles one fused expression may read (their registers stay live)
# ops that make a group a computing role (anything beyond TMA issue, barriers and index math)
COMPUTING = frozenset({OpKind.MMA, OpKind.MMA_ASYNC, OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE, OpKind.WHERE,
                       OpKind.REDUCE, OpKind.CAST, OpKind.STORE, OpKind.SLOT_STORE, OpKind.SLOT_READ,
                       OpKind.GET, OpKind.ARANGE, OpKind.FULL})


class ResourceError(ArefError):
    """A kernel needs more registers, shared memory or tensor memory than the SM has; `excess` says by how many
    registers per thread a group is over, `smem_excess` by how many bytes shared memory is (when that is the
    problem)."""

    kind = "resources"

    def __init__(self, message: str, loc=None, hint: str | None = None, excess: int = 0, smem_excess: int = 0,
                 register_file: bool = False):
        super().__init__(message, loc, hint)
        self.excess = excess
        self.smem_excess = smem_excess
        self.register_file = register_file      # the groups' budgets together exceed the SM's register file


def _round_up(n: int, step: int = REG_STEP) -> int:
    return -(-n // step) * step


def tile_registers(t: TileType, arch: str = DEFAULT_ARCH, threads: int = THREADS, layout: str | None = None) -> int:
    """32-bit registers per thread that register tile `t` takes in a warp group of `threads`; `layout`: the
    register layout the code generator gives it (`aref.resources.layout`: a column vector holds a quarter of
    its columns per thread), by default the accumulator layout (rank-1 tiles: one value per row)."""
    if not isinstance(t, TileType):
        return 0
    bits = 32 if t.dtype is DType.bool_ else t.dtype.bits      # a boolean takes a whole register
    row_per_thread = target_of(arch).has_tensor_memory         # tiles as tcgen05.ld gives them: a row per thread
    if layout is not None and not row_per_thread and threads == THREADS:
        from aref.resources.layout import per_thread
        elems = 1
        for n in per_thread(t, layout):
            elems *= n
        return max(1, -(-elems * bits // 32))
    if row_per_thread:
        per_thread = max(1, t.numel * 32 // (threads * 32)) if len(t.shape) > 1 else 1
        if layout == "col":
            per_thread = t.shape[-1]      # a column vector, (C,) or (1, C): the columns of a 128-row tile's row (at most)
        return max(1, -(-per_thread * bits // 32))
    if len(t.shape) >= 2:
        rows = 1
        for s in t.shape[:-1]:
            rows *= s
        elems = max(1, rows * t.shape[-1] // threads)
        return max(1, -(-elems * bits // 32))
    rows = max(2, 2 * t.shape[0] // 64) if t.shape else 1
    return max(1, -(-rows * bits // 32))


# ---------------------------------------------------------------------------------------------- liveness
class Liveness:
    """Definitions, uses and last uses of a group program's values in emission order, with the code
    generator's fusion and deferral rules (see the module docstring). Works at every warp-specialized level.

    Positions count ops in region order (pre, prologue, loop body, epilogue, post) from 1; ops under a
    predicate that folds to false at generation time are skipped but keep their position.
    """

    def __init__(self, gp, arch: str = DEFAULT_ARCH):
        self.gp = gp
        self.arch = arch
        self.target = target_of(arch)
        self.uses: dict[int, int] = {}
        self.use_at: dict[int, list[tuple[float, Op | None]]] = {}
        self.def_at: dict[int, float] = {}
        self.block_of: dict[int, int] = {}
        self.loop_span = (0, 0)
        self.alias: dict[int, Value] = {}          # static select result -> the value it picks
        self.static: dict[int, object] = {}        # generation-time constants (predicates fold)
        self.position: dict[int, int] = {}         # id(op) -> position
        self.ops: list[Op] = []                    # every op, in position order
        self.prod = gp.producers()                 # value id -> defining op (loop-carried: its yield's)
        from aref.resources.memory import staged_reads
        self.staged_mmas = staged_reads(gp)        # MMAs reading a register operand from its staged copy
        pos = 0
        for b, (region, block) in enumerate(gp.regions()):
            if region == "loop":
                lp = gp.loop
                for v in lp.inits:
                    self._use(v, pos, None)
                start = pos
                for c in lp.carried:
                    self.def_at[id(c)] = pos + 0.5       # inside the loop, before its first op
            for op in block.ops:
                pos += 1
                self.ops.append(op)
                self.position[id(op)] = pos
                self.block_of[id(op)] = b
                self._fold(op)
                if self.skipped(op):
                    continue                         # a pipeline step this specialization does not run
                if op.kind is OpKind.SELECT and id(op.operands[0]) in self.static:
                    chosen = op.operands[1 if self.static[id(op.operands[0])] else 2]
                    self.alias[id(op.result)] = self.root(chosen)
                    self.def_at[id(op.result)] = pos
                    continue
                for i, v in enumerate(op.operands):
                    if i == 0 and id(op) in self.staged_mmas:
                        continue            # read from the shared-memory copy an earlier wgmma staged
                    self._use(v, pos, op)
                if op.pred is not None:
                    self._use(op.pred, pos, op)
                for r in op.results:
                    self.def_at[id(r)] = pos
            if region == "loop":
                end = pos + 1
                self.loop_span = (start, end)
                for y in gp.loop.yields:
                    self._use(y, end, None)
                for r in gp.loop.results:
                    self.def_at[id(r)] = end
        self.end = pos + 1
        # a loop-carried value read neither in the body nor after the loop needs no storage and no yield
        self.dead_carried: set[int] = set()
        if gp.loop is not None:
            lp = gp.loop
            for c, y, r in zip(lp.carried, lp.yields, lp.results):
                if not self.use_at.get(id(c)) and not self.use_at.get(id(self.root(r))):
                    self.dead_carried.add(id(c))
                    ys = self.use_at.get(id(self.root(y)), [])
                    end = self.loop_span[1]
                    if (end, None) in ys:
                        ys.remove((end, None))
                        self.uses[id(self.root(y))] -= 1
        ops_ = self.ops
        # 16-bit casts and transposes of register tiles are computed where they are needed (an MMA, a store,
        # the next iteration), so their sources stay live until then — except a cast read only by register math
        # (rounded inside its users' expressions), a cast of an MMA accumulator, which a later MMA may update in
        # place before the cast's use, and a cast of a slot's tile (the slot may be released before): those are
        # computed where the IR puts them; and a cast that rounds an elementwise expression nothing else reads:
        # computed where the IR puts it, the expression is fused into it (deferred, the wider expression would
        # be stored until the use, beside the narrow copy)
        casts = [op for op in ops_ if op.results and op.kind is OpKind.CAST and op.result.type.dtype.bits < 32
                 and op.result.type.dtype.is_float
                 and not all(u is not None and u.kind in FUSABLE_USERS for _, u in self.use_at.get(id(op.result), []))
                 and not self.from_mma(op.operands[0]) and not self.reads_slot(op.operands[0])]
        # (casts made where the IR puts them, whole, as the loop takes them in: `_only_carried`)
        self.carried_casts = {id(op.result) for op in casts if self._only_carried(op)}
        casts = [op for op in casts if id(op.result) not in self.carried_casts]
        rounded = [op for op in casts if self._rounds_expression(op)]
        # A rounded expression is written element by element into 16-bit registers; read by an MMA from
        # registers, it is packed into the wgmma's 32-bit operand registers only where the wgmma reads it
        # (after its fence and the waits before it, which ptxas does not move the packing above), so until
        # then each 16-bit element takes a register of its own: it is counted at a float32 tile's registers.
        # (No input of its type dies there, by the rule, so nothing shrinks as it grows. Counted at 16 bits,
        # a P rounded beside an in-flight wgmma's register operand and accumulator spilled 1100 bytes.)
        # (a tile carried into the next iteration, a yield's read, is read there by its MMA or store: counted so)
        self.unpacked = {id(op.result) for op in rounded if any(
            u is None or u.kind in MMA_KINDS and self.root(u.operands[0]) is op.result
            for _, u in self.use_at.get(id(op.result), []))}
        self.deferred = {id(op.result) for op in casts} - {id(op.result) for op in rounded} | {
            id(op.result) for op in ops_ if op.results and op.kind is OpKind.TRANSPOSE
            and op.operands[0].type.space is not Space.SMEM}
        # cheap index math (arange, constants, program ids and what is computed from them alone) is recomputed
        # at each use rather than stored
        self.cheap: set[int] = set(self.slot_columns() if self.target.has_tensor_memory else ())
        for op in ops_:
            if op.kind in TILE_SOURCES or op.kind in LAZY and op.results and all(
                    not isinstance(o.type, TileType) or id(o) in self.cheap for o in op.operands):
                self.cheap.update(id(r) for r in op.results if isinstance(r.type, TileType))
        self.fused: set[int] = set(self.cheap)
        index = {id(op): i + 1 for i, op in enumerate(ops_)}
        # a fused chain keeps every stored tile it reads live until its user: bound that, so a long
        # accumulation (t = t + f(x_i), ...) is stored every few steps rather than holding every x_i
        leaves: dict[int, int] = {}
        for op in ops_:
            if op.kind not in ELEMENTWISE or not op.results:
                continue
            n = sum(leaves.get(id(o), 1) if id(o) in self.fused else 1 for o in op.operands
                    if isinstance(o.type, TileType) and id(o) not in self.cheap)
            leaves[id(op.result)] = n
            if n > MAX_FUSED_LEAVES or id(op.result) in self.cheap or not self.use_at.get(id(op.result)):
                continue
            if id(op.result) in self.deferred or self.skipped(op):
                continue
            users = {id(u) for _, u in self.use_at[id(op.result)]}
            if len(users) != 1:                      # one user op (it may read the value twice: a*a)
                continue
            p, user = self.use_at[id(op.result)][0]
            if user is None or user.kind not in FUSABLE_USERS or self.block_of[id(user)] != self.block_of[id(op)]:
                continue
            if user.results and id(user.results[0]) in self.deferred:
                continue                             # a deferred user is computed later: inputs would stay live
            between = ops_[index[id(op)]:index[id(user)] - 1]
            # (a slot's release: the lowered `empty` arrive, or the `consumed` it comes from)
            if any(o.kind in (OpKind.MMA_ASYNC, OpKind.MMA, OpKind.CONSUMED) or (o.kind is OpKind.MBAR_ARRIVE
                                                                and o.attrs.which == "empty") for o in between):
                continue
            self.fused.add(id(op.result))
        self._last: dict[int, float] = {}
        self._made: dict[int, float] = {}
        for op in reversed(ops_):        # users first: the recursions below stop at memoized values
            for r in op.results:
                self.made_at(r)
        for op in reversed(ops_):
            for r in op.results:
                self.last_use(r)

    def staged(self, v: Value) -> bool:
        """A transposed register tile: wgmma reads it from a shared-memory scratch tile, not registers."""
        op = self.prod.get(id(self.root(v)))
        while op is not None and op.kind in (OpKind.CAST, OpKind.SELECT):
            op = self.prod.get(id(op.operands[0 if op.kind is OpKind.CAST else 1]))
        return op is not None and op.kind is OpKind.TRANSPOSE and op.operands[0].type.space is not Space.SMEM

    def from_mma(self, v: Value) -> bool:
        """Is register tile `v` an MMA's accumulator (through views and pipeline selects)?"""
        op = self.prod.get(id(self.root(v)))
        for _ in range(64):
            if op is None or op.kind not in VIEWS | {OpKind.SELECT}:
                break
            op = self.prod.get(id(op.operands[0 if op.kind is not OpKind.SELECT else 1]))
        return op is not None and op.kind in MMA_KINDS

    def reads_slot(self, v: Value, depth: int = 0) -> bool:
        """Is `v` a channel slot's tile (through views)? A cast of it is computed where the IR puts it, before
        the slot may be released. (Elementwise results a narrowing cast reads are never fused into it, so they
        are in registers by then.)"""
        op = self.prod.get(id(self.root(v)))
        if op is None or depth > 32:
            return False
        if op.kind is OpKind.SLOT_READ:
            return True
        if op.kind in VIEWS | {OpKind.SELECT}:
            return any(self.reads_slot(x, depth + 1) for x in op.operands if isinstance(x.type, TileType))
        return False

    def slot_columns(self) -> set[int]:
        """Blackwell's row layout: vectors along the columns read from their slot wherever they are used
        (`aref.resources.layout.column_reads`) — a slot's rank-1 tile and what elementwise ops make of it
        alone — when the slot is released after every read (the partition holds it so). They take no
        registers: like index math, they are recomputed in their users' element loops."""
        from aref.resources.layout import COL, column_reads, orientations
        orient = orientations(self.gp)
        out: set[int] = set()
        for op in self.ops:
            if op.kind is not OpKind.SLOT_READ or self.skipped(op) or orient(op.result) != COL \
                    or op.result.type.space is not Space.SMEM or len(op.result.type.shape) != 1:
                continue
            chain = column_reads(op.result, lambda x: [u for _, u in self.use_at.get(id(x), [])])
            if chain is None:
                continue
            members, readers = chain
            at = self.position[id(op)]
            release = min((self.position[id(o)] for o in self.ops if self.position[id(o)] > at
                           and o.kind is OpKind.MBAR_ARRIVE and o.attrs.which == "empty"
                           and o.attrs.channel == op.attrs.channel), default=None)
            if release is not None and all(self.position[id(u)] < release for u in readers) and all(
                    all(isinstance(x.type, TileType) is False or id(x) in members or self._index_math(x)
                        for x in self.prod[m].operands) for m in members - {id(op.result)}):
                out |= members
        return out

    def cuda_core_read(self, v: Value, depth: int = 0) -> bool:
        """Is tensor-memory tile `v` read by CUDA cores (through views and selects), not only by MMAs, slot
        stores into tensor memory and column slices (each loaded where it is sliced)? Such a tile is loaded
        into registers (tcgen05.ld)."""
        for _, user in self.use_at.get(id(self.root(v)), []):
            if user is None:
                return True
            if user.kind in (OpKind.TRANSPOSE, OpKind.SELECT):
                if depth < 16 and user.results and self.cuda_core_read(user.results[0], depth + 1):
                    return True
            elif user.kind not in (OpKind.MMA_ASYNC, OpKind.MMA, OpKind.SLICE, OpKind.PUT) and not (
                    user.kind is OpKind.SLOT_STORE and user.operands[0].type.tile.space is Space.TMEM):
                return True
        return False

    def _index_math(self, v: Value, depth: int = 0) -> bool:
        """Is tile `v` recomputed wherever it is used (arange, constants and elementwise math on them)?"""
        op = self.prod.get(id(self.root(v)))
        if op is None or depth > 32:
            return False
        if op.kind in TILE_SOURCES:
            return True
        return op.kind in LAZY and all(not isinstance(x.type, TileType) or self._index_math(x, depth + 1)
                                       for x in op.operands)

    def _rounds_expression(self, cast: Op) -> bool:
        """Is `cast`'s operand an elementwise expression read by nothing else (in the same block) that cannot be
        computed in place over a same-typed input dying there? Then rounding it where the IR puts it holds the
        narrow result only; else (an input dies there) the wide result takes that input's storage and is
        rounded at its use."""
        src = self.prod.get(id(self.root(cast.operands[0])))
        if not (src is not None and src.kind in ELEMENTWISE and src.kind is not OpKind.SELECT
                and self._only_user(src.result, cast) and self.block_of.get(id(src)) == self.block_of.get(id(cast))):
            return False
        at, (start, end) = self.position[id(src)], self.loop_span
        stack, seen = list(src.operands), set()
        while stack:
            o = self.root(stack.pop())
            if id(o) in seen or not isinstance(o.type, TileType):
                continue
            seen.add(id(o))
            p = self.prod.get(id(o))
            if p is not None and p.kind in ELEMENTWISE and p.kind is not OpKind.SELECT and p.results \
                    and self._only_user(o, None) and self.block_of.get(id(p)) == self.block_of.get(id(src)):
                stack += p.operands              # fused into the expression: its inputs are the expression's
                continue
            last = max((q for q, _ in self.use_at.get(id(o), [])), default=0)
            outside = self.def_at.get(id(o), 0) <= start < at <= end      # read in the loop, defined before it
            if o.type == src.result.type and last <= at and not outside:
                return False
        return True

    def _only_user(self, v: Value, user: Op | None) -> bool:
        """Is `v` read by exactly one op (`user`, when given)?"""
        users = {id(u) for _, u in self.use_at.get(id(self.root(v)), [])}
        return len(users) == 1 and (user is None or users == {id(user)})

    def skipped(self, op: Op) -> bool:
        return op.pred is not None and self.static.get(id(op.pred)) is False

    def _fold(self, op: Op) -> None:
        """Constants of the specialization: scalar constants and scalar math on them (predicates fold)."""
        static = self.static
        if op.kind is OpKind.CONST and not isinstance(op.result.type, TileType):
            static[id(op.result)] = op.attrs.value
        elif op.kind is OpKind.SCALAR_BINARY and all(id(o) in static for o in op.operands):
            from aref.interp.tile import evaluate
            static[id(op.result)] = evaluate(op, [static[id(o)] for o in op.operands], ())

    def root(self, v: Value) -> Value:
        while id(v) in self.alias:
            v = self.alias[id(v)]
        return v

    def _only_carried(self, op: Op) -> bool:
        """Is `op`'s result read only where the loop takes it in (an init), or where it hands it on (a yield)
        with an MMA issued after it in the body? Deferred to there, the cast would fuse into nothing and keep
        its wider source live beside an MMA's accumulator (the next iteration's scores issued after the last P
        of a pipeline fill, or after this iteration's P): it is made where the IR puts it. (A yield's cast with no MMA after it
        stays deferred to the loop's end: made there, after the waits before it, it goes straight into the
        carried storage that an in-flight MMA still reads where the IR puts it.)"""
        uses = self.use_at.get(id(op.result), [])
        if not uses or any(u is not None for _, u in uses):
            return False
        start, end = self.loop_span
        at = self.position[id(op)]
        issued_after = any(o.kind in MMA_KINDS and at < self.position[id(o)] < end
                           for o in self.ops)
        return all(p == start or p == end and start < at and issued_after for p, _ in uses)

    def _use(self, v: Value, pos: float, op: Op | None) -> None:
        v = self.root(v)
        self.uses[id(v)] = self.uses.get(id(v), 0) + 1
        self.use_at.setdefault(id(v), []).append((pos, op))

    def made_at(self, v: Value) -> float:
        """Where the code computes `v`: its op's position, or for a value fused into its user or deferred to
        its use, where that happens (a deferred value is computed once, at its first use that is not a view)."""
        v = self.root(v)
        key = id(v)
        if key in self._made:
            return self._made[key]
        self._made[key] = self.def_at.get(key, 0)        # guards cycles through loop-carried chains
        at = self.def_at.get(key, 0)
        uses = self.use_at.get(key, [])
        if key in self.fused and uses and uses[0][1] is not None and uses[0][1].results:
            at = self.made_at(uses[0][1].results[0])
        elif key in self.deferred and uses:
            at = min(self._read_at(p, user) if user is None or user.kind not in VIEWS
                     else self.made_at(user.results[0]) for p, user in uses)
        self._made[key] = at
        return at

    def _read_at(self, p: float, user: Op | None) -> float:
        """When a read by `user` at position `p` happens: where `user`'s result is computed if it is fused or
        deferred (the read moves there), else at `p`."""
        if user is not None and user.results and (id(user.results[0]) in self.fused
                                                  or id(user.results[0]) in self.deferred):
            return self.made_at(user.results[0])
        return p

    def last_use(self, v: Value) -> float:
        """The last position at which `v` is read, counting reads moved into fused and deferred users (they
        read when they are computed) and reads through views; a value defined before the loop and read in it
        lives to the loop's end."""
        v = self.root(v)
        key = id(v)
        if key in self._last:
            return self._last[key]
        self._last[key] = self.def_at.get(key, 0)        # guards cycles through loop-carried chains
        last = self.def_at.get(key, 0)
        for p, user in self.use_at.get(key, []):
            if user is not None and user.kind in VIEWS and user.results and id(user.results[0]) not in self.fused \
                    and id(user.results[0]) not in self.deferred:
                p = max(p, self.last_use(user.results[0]))
            else:
                p = self._read_at(p, user)
            last = max(last, p)
        start, end = self.loop_span
        if self.def_at.get(key, 0) <= start and any(start < p <= end for p, _ in self.use_at.get(key, [])):
            last = max(last, end)
        self._last[key] = last
        return last

