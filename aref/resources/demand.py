"""A warp group's register demand: the most registers per thread its tiles take at once, where, and what is live
there (`register_demand`, walking `aref.resources.registers.Liveness` over the group's program in emission
order), plus `ROLE_OVERHEAD` rounded to the setmaxnreg step (`RegisterDemand.need`). On Blackwell the walk also
counts what ptxas computes before a group's loop and keeps for all of it (`hoisted_over_loop`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from aref.ir import DType, Op, OpKind, Space, TileType, Value
from aref.target import DEFAULT_ARCH
from aref.resources.registers import (COMPUTING, ELEMENTWISE, FUSABLE_USERS, MAX_REGS, MIN_REGS, ROLE_OVERHEAD,
                                      _DEBUG, Liveness, _round_up, tile_registers)
from aref.ops import MMA_KINDS, VIEWS

# ------------------------------------------------------------------------------------------------ demand
@dataclass
class RegisterDemand:
    """The most registers per thread a group's tiles take at once, where, and what is live there."""

    group: str
    peak: int
    at: Op | None = None
    live: list[tuple[str, int]] = field(default_factory=list)
    computes: bool = True        # holds register tiles / does math (False: a pure data-movement role)

    @property
    def need(self) -> int:
        """The smallest setmaxnreg budget that holds the tiles and the role's own state."""
        return max(MIN_REGS, _round_up(self.peak + ROLE_OVERHEAD)) if self.computes else MIN_REGS

    def describe(self) -> str:
        live = sorted(self.live, key=lambda x: -x[1])
        parts = ", ".join(f"{n} {r}" for n, r in live[:6]) + (f", {len(live) - 6} more" if len(live) > 6 else "")
        line = getattr(getattr(self.at, "loc", None), "line", 0)
        return (f"warp group '{self.group}' holds up to {self.peak} registers per thread of tiles at once"
                + (f" (at line {line})" if line else "") + (f" ({parts})" if parts else "")
                + f" plus about {ROLE_OVERHEAD} for addresses and loop state")

    def remedy(self) -> str:
        """What a user can change: the tiles that take the most, and how to make them smaller."""
        live = sorted(self.live, key=lambda x: -x[1])
        big = [n for n, r in live if live and r == live[0][1]]
        over = self.need - MAX_REGS
        return (f"the largest live tiles ({', '.join(big[:3])}{', ...' if len(big) > 3 else ''}: {live[0][1]} "
                f"registers each) must shrink by about {max(over, 0)} registers per thread: use smaller blocks "
                f"(halve the rows or columns of those tiles), keep fewer of them live at once (store or reduce "
                f"a tile before computing the next), or split the rows over cooperative consumer groups"
                if live else "use smaller tiles")


def _materializes(op: Op, lv: Liveness, v: Value) -> bool:
    """Does the code generator give value `v` (a result of `op`) its own register storage? (A tensor-memory
    slot's tile read by CUDA cores is loaded where it is taken: tcgen05.ld into registers.)"""
    t = v.type
    if not isinstance(t, TileType):
        return False
    if t.space is Space.TMEM:
        return op.kind in (OpKind.SLOT_READ, OpKind.GET) and lv.target.has_tensor_memory and lv.cuda_core_read(v) \
            and not all(u is not None and u.kind is OpKind.SLICE for _, u in lv.use_at.get(id(v), []))
    if t.space is not Space.RMEM:
        return False
    if op.kind in VIEWS or op.kind is OpKind.FULL or id(v) in lv.fused:
        return False
    if op.kind is OpKind.SELECT and id(v) in lv.alias:
        return False
    # an MMA writes its accumulator whether or not anything reads it (until the wait that retires it)
    return bool(lv.use_at.get(id(v))) or op.kind in MMA_KINDS


def register_demand(gp, arch: str = DEFAULT_ARCH) -> RegisterDemand:
    """Peak registers per thread of `gp`'s register tiles (see the module docstring for the rules)."""
    lv = Liveness(gp, arch)
    computes = any(op.kind in COMPUTING for op in lv.ops)
    from aref.resources.layout import orientations, tile_layout
    orient = orientations(gp)

    def layout_of(v: Value) -> str:
        return tile_layout(v.type, orient(v))

    # storage classes: key -> [registers, first position, last position, name]
    spans: dict[int, list] = {}
    owner: dict[int, int] = {}                     # value id -> storage class it lives in

    def cls(v: Value) -> int | None:
        return owner.get(id(lv.root(v)))

    def new(v: Value, first: float, name: str | None = None) -> int:
        t = TileType(v.type.shape, DType.float32, v.type.space) if id(v) in lv.unpacked else v.type
        spans[id(v)] = [tile_registers(t, arch, layout=layout_of(v)), first, lv.last_use(v),
                        name or v.name or _label(v, lv)]
        owner[id(v)] = id(v)
        return id(v)

    def extend(c: int, last: float) -> None:
        spans[c][2] = max(spans[c][2], last)

    # the values computed over a storage class in place (a carried tile's storage is the loop's: a yield may
    # take it only once what was computed over it there is dead too, not its carried value alone)
    held: dict[int, list[Value]] = {}

    def vacated(c: int, pos: float) -> bool:
        return all(lv.last_use(v) <= pos for v in held.get(c, ()))

    def materialize(v: Value, pos: float) -> None:
        """A deferred value read here: a 16-bit cast takes registers from here on; a transposed register tile
        is staged in shared memory (no registers), which materializes what it transposes."""
        v = lv.root(v)
        if id(v) not in lv.deferred or id(v) in owner:
            return
        src = lv.prod.get(id(v))
        if src is not None and src.kind is OpKind.TRANSPOSE:
            materialize(src.operands[0], pos)
        elif isinstance(v.type, TileType) and v.type.space is Space.RMEM:
            c = carried_of_yield.get(id(v))
            if c is not None and lv.last_use(c) <= pos and vacated(carried_cls[id(c)], pos) \
                    and not _busy(carried_cls[id(c)], inflight):
                owner[id(v)] = carried_cls[id(c)]       # made straight into its carried storage
                extend(owner[id(v)], lv.last_use(v))
                held.setdefault(owner[id(v)], []).append(v)
            else:
                new(v, pos)

    lp = gp.loop
    carried_of_yield: dict[int, Value] = {}
    carried_cls: dict[int, int] = {}
    inflight: list[list[int]] = []
    for region, block in gp.regions():
        if region == "loop":
            _enter_loop(lv, lp, owner, carried_cls, new, extend)
            carried_of_yield = {id(y): c for c, y in zip(lp.carried, lp.yields) if id(c) in carried_cls}
        for op in block.ops:
            pos = lv.position[id(op)]
            if lv.skipped(op):
                continue
            k = op.kind
            if k is OpKind.MMA_WAIT:
                keep = op.attrs.pending
                done, inflight = (inflight[:len(inflight) - keep], inflight[len(inflight) - keep:]) if keep \
                    else (inflight, [])
                for group in done:
                    for c in group:
                        extend(c, pos)
                continue
            if k not in VIEWS:
                for o in op.operands:          # deferred casts and transposes are made where they are read
                    materialize(o, pos)
            v = lv.root(op.operands[-1]) if k is OpKind.STORE else None
            if v is not None and isinstance(v.type, TileType) and v.type.space is Space.SMEM and len(v.type.shape) > 1:
                # a slot's tile stored to global memory goes through registers (the store's staging copy)
                spans[(id(v), pos)] = [tile_registers(v.type, arch, layout=layout_of(v)), pos,
                                       max(pos, lv.last_use(v)), v.name or _label(v, lv)]
            if k not in FUSABLE_USERS and k not in VIEWS:
                # cheap index math an op reads whole is made for that read only (an MMA's constant accumulator
                # is its result's storage)
                for o in op.operands[:2] if k in MMA_KINDS else op.operands:
                    o = lv.root(o)
                    if id(o) in lv.cheap and isinstance(o.type, TileType) and o.type.space is Space.RMEM:
                        spans[(id(o), pos)] = [tile_registers(o.type, arch, layout=layout_of(o)), pos, pos,
                                             o.name or _label(o, lv)]
            for r in op.results:
                if id(r) in lv.deferred or not _materializes(op, lv, r):
                    continue
                placed = None
                if k in MMA_KINDS and len(op.operands) > 2:
                    placed = cls(op.operands[2])              # accumulates in place
                elif k in ELEMENTWISE or k is OpKind.SELECT:
                    placed = next((cls(o) for o in _leaves(op, lv) if cls(o) is not None
                                   and o.type.with_space(Space.RMEM) == r.type
                                   and (lv.last_use(o) <= pos or kept_by_select(op, o, lv))
                                   and not _busy(cls(o), inflight)), None)
                c = carried_of_yield.get(id(r))
                if placed is None and c is not None and lv.last_use(c) <= pos \
                        and vacated(carried_cls[id(c)], pos) and not _busy(carried_cls[id(c)], inflight):
                    placed = carried_cls[id(c)]               # a yield computed after its carried value's last read
                if placed is not None:
                    owner[id(r)] = placed
                    extend(placed, lv.last_use(r))
                    held.setdefault(placed, []).append(r)
                else:
                    new(r, pos)
            if k is OpKind.MMA_ASYNC:
                reads = () if id(op) in lv.staged_mmas else (cls(op.operands[0]),)
                inflight.append([c for c in (cls(op.result),) + reads if c is not None])
        if region == "loop":
            for y in lp.yields:                # a yield still deferred is made (or staged) at the loop's end
                materialize(y, lv.loop_span[1])
    if lv.target.has_tensor_memory:        # the row-per-thread code of the tensor-memory templates (ptxas-measured)
        for key, (regs, name) in hoisted_over_loop(lv, layout_of).items():
            spans[key] = [regs, lv.loop_span[0], lv.loop_span[1], name]
    if _DEBUG:
        for key, sp in spans.items():
            print("span", sp)
    peak, at, live = 0, None, []
    for op in lv.ops:
        pos = lv.position[id(op)]
        here = [s for s in spans.values() if s[1] <= pos <= s[2]]
        n = sum(s[0] for s in here)
        if n > peak:
            peak, at, live = n, op, [(s[3], s[0]) for s in here]
    return RegisterDemand(gp.group.name, peak, at, live, computes)


def kept_by_select(op: Op, o: Value, lv: Liveness) -> bool:
    """Does `op`, a step of a pipeline fill or drain that runs only where its predicate holds, leave `o` read
    afterwards only by selects between a new value and `o` under that same predicate or one it implies
    (`guard_implies`: a later drain step's)? Then it may compute over `o`'s storage: where the step runs the
    selects pick the new value, where it does not `o` is untouched (a drain's `o · α` rescaling the carried
    output in place, as an MMA's `keeps_state`)."""
    if op.pred is None or lv.skipped(op):
        return False
    pos = lv.position[id(op)]
    later = [u for at, u in lv.use_at.get(id(lv.root(o)), []) if at > pos]
    return bool(later) and all(u is not None and u.kind is OpKind.SELECT and guard_implies(op.pred, u.operands[0], lv)
                               and lv.root(u.operands[2]) is lv.root(o) for u in later)


def guard_implies(g: Value, h: Value, lv: Liveness) -> bool:
    """Does run-time predicate `h` hold wherever `g` holds? `g` itself, a `h` that folds to true, or two bounds
    of one value, `x + a >= c` ⇒ `x + b >= d` where d - b <= c - a. A drain step's select falls back to the
    state the drain began with under its own, weaker guard (`pipeline.expand`: `N + e >= S` grows weaker step
    by step), so an earlier, stronger step may still compute over that state: where it runs, every later step
    runs too and its select picks the new value (causal attention's drain: O·α in O's storage, else O was held
    beside O·α, 64 registers a thread, 262 in all at the row split's consumers)."""
    if g is h or id(h) in lv.static and bool(lv.static[id(h)]):
        return True
    a, b = _lower_bound(g, lv), _lower_bound(h, lv)
    return a is not None and b is not None and a[0] is b[0] and b[1] <= a[1]


def _lower_bound(v: Value, lv: Liveness):
    """(x, t) where scalar predicate `v` is `x >= t` for an integer value `x` and a generation-time constant
    `t` (`x + c >= d`, `x + c > d`, `d <= x + c`, `d < x + c`, with `x + c` any chain of constant additions and
    subtractions); else None."""
    op = lv.prod.get(id(v))
    if op is None or op.kind is not OpKind.SCALAR_BINARY or not any(r is v for r in op.results):
        return None
    fn, (a, b) = op.attrs.fn, op.operands
    if fn in ("le", "lt"):
        a, b, fn = b, a, {"le": "ge", "lt": "gt"}[fn]
    if fn not in ("ge", "gt") or not isinstance(lv.static.get(id(b)), int) \
            or isinstance(a.type, TileType) or getattr(a.type, "dtype", None) is not DType.int32:
        return None
    x, c = _offset(a, lv)
    return x, lv.static[id(b)] - c + (1 if fn == "gt" else 0)


def _offset(v: Value, lv: Liveness) -> tuple[Value, int]:
    """(x, c) with `v` = `x + c`, following scalar additions and subtractions of generation-time constants."""
    c = 0
    for _ in range(16):
        op = lv.prod.get(id(v))
        if op is None or op.kind is not OpKind.SCALAR_BINARY or op.attrs.fn not in ("add", "sub") \
                or not any(r is v for r in op.results):
            break
        a, b = op.operands
        if isinstance(lv.static.get(id(b)), int):
            c, v = c + (lv.static[id(b)] if op.attrs.fn == "add" else -lv.static[id(b)]), a
        elif op.attrs.fn == "add" and isinstance(lv.static.get(id(a)), int):
            c, v = c + lv.static[id(a)], b
        else:
            break
    return v, c


HOISTED_ADDRESSES = 32      # elements per thread of the largest written tile whose addresses ptxas was seen to hoist
# ops after which ptxas may not reuse a shared-memory value loaded before them (memory barriers; a column
# reduction exchanges partial sums through shared memory between warp-group barriers)
_SYNC = (OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE, OpKind.MMA_WAIT)


def hoisted_over_loop(lv: Liveness, layout_of) -> dict:
    """Blackwell: what ptxas hoists out of a group's loop and keeps in registers for the whole loop, beside its
    tiles (measured on random programs: compute groups at the tiles' need spilled these).

      * addresses: a row-layout write of a swizzled shared-memory tile computes one address per element (the
        swizzle is applied to the whole address, so ptxas cannot derive one element's address from another's);
        where the tile's address is the same every iteration (a depth-1 ring, a store's staging tile) ptxas
        computes them before the loop and keeps them. Counted at the tile's registers per tile the loop writes
        (a 16-bit tile's 32 addresses at 16), reads of fixed slots not counted, and only for tiles of at most
        `HOISTED_ADDRESSES` elements per thread: calibrated with ptxas (random program seed 1062: two 64x64
        tiles' 32 addresses each hoisted, the group needed 208 where the tiles' count gave 184; a count per
        element and per read tile refused seed 1107's heuristic partition, which ptxas compiles at the tiles'
        need alone; rowwise at N = 256 writes a 64x256 staging tile, 128 elements per thread, whose
        addresses ptxas computes in the loop: it compiles at the tiles' need);
      * values: in a loop body without memory barriers (no waits, arrives or column reductions), a shared-
        memory tile got before the loop is loaded once before it, its registers live for the whole loop (a
        column vector read in place is no longer free).

    Keys are span keys of `register_demand`; values (registers per thread, a name for `describe`)."""
    gp = lv.gp
    if gp.loop is None:
        return {}
    start, end = lv.loop_span
    body = [op for op in lv.ops if start < lv.position[id(op)] < end and not lv.skipped(op)]
    synced = any(op.kind in _SYNC or op.kind is OpKind.REDUCE and op.attrs.axis == 0 for op in body)
    out: dict = {}

    def fixed_slot(op: Op) -> bool:
        return op.operands[0].type.depth == 1 or id(op.operands[1]) in lv.static

    def address(ring: Value, t: TileType) -> None:
        if len(t.shape) == 2 and t.numel // 128 <= HOISTED_ADDRESSES:
            out[("addresses", id(ring))] = (tile_registers(t, lv.arch), f"addresses of {ring.name}")

    reads: dict[int, Op] = {}             # value id (through views) -> the slot read of a shared-memory tile
    for op in lv.ops:
        if lv.skipped(op):
            continue
        if op.kind is OpKind.SLOT_READ and op.result.type.space is Space.SMEM:
            reads[id(op.result)] = op
        elif op.kind in VIEWS | {OpKind.SELECT} and op.results and any(
                id(lv.root(o)) in reads for o in op.operands):
            reads[id(op.result)] = next(reads[id(lv.root(o))] for o in op.operands if id(lv.root(o)) in reads)
    for op in body:
        if op.kind is OpKind.SLOT_STORE and op.operands[0].type.tile.space is Space.SMEM \
                and isinstance(op.operands[3].type, TileType) and op.operands[3].type.space is not Space.SMEM:
            if fixed_slot(op):
                address(op.operands[0], op.operands[0].type.tile)
        elif op.kind is OpKind.STORE and isinstance(op.operands[-1].type, TileType) \
                and lv.root(op.operands[-1]).type.space is not Space.SMEM:
            address(op.operands[0], op.operands[-1].type)          # the store's staging tile
        if op.kind in (OpKind.MMA, OpKind.MMA_ASYNC, OpKind.STORE) or op.kind in VIEWS or op.kind is OpKind.SELECT:
            continue                          # read by the tensor core or a TMA store, or a view
        for o in op.operands:                 # CUDA-core reads of a shared-memory slot's tile
            src = reads.get(id(lv.root(o)))
            if src is not None and not synced and lv.position[id(src)] <= start:
                v = src.result
                out[("values", id(v))] = (tile_registers(v.type, lv.arch, layout=layout_of(v)),
                                          v.name or _label(v, lv))
    return out


def _label(v: Value, lv: Liveness) -> str:
    """An unnamed tile as a user finds it in the source: its shape, dtype and the line that computes it."""
    t = v.type
    op = lv.prod.get(id(v))
    line = f" of line {op.loc.line}" if op is not None and getattr(op.loc, "line", 0) else ""
    return f"{'x'.join(map(str, t.shape))} {t.dtype.value} tile{line}"


def _busy(c: int | None, inflight: list[list[int]]) -> bool:
    return c is not None and any(c in group for group in inflight)


def _enter_loop(lv, lp, owner, carried_cls, new, extend) -> None:
    """Carried tiles get one storage for the whole loop; the init's storage becomes it when the init dies
    entering the loop, the loop result keeps it."""
    start, end = lv.loop_span
    for init, c, y, r in zip(lp.inits, lp.carried, lp.yields, lp.results):
        if id(c) in lv.dead_carried or not isinstance(c.type, TileType) or c.type.space is not Space.RMEM \
                or lv.staged(init):
            continue
        ic = owner.get(id(lv.root(init)))
        if ic is not None and lv.last_use(init) <= start:
            key = ic
        else:
            key = new(c, start, c.name)
        owner[id(c)] = key
        owner[id(r)] = key
        extend(key, max(end, lv.last_use(r)))
        carried_cls[id(c)] = key


def _leaves(op: Op, lv: Liveness) -> list[Value]:
    """The materialized inputs of a (possibly fused) elementwise expression."""
    out = []
    prod = {id(r): o for o in lv.ops for r in o.results}
    stack = list(op.operands)
    while stack:
        v = lv.root(stack.pop(0))
        p = prod.get(id(v))
        if p is not None and id(v) in lv.fused:
            stack = list(p.operands) + stack
        else:
            out.append(v)
    return out
