"""Register layouts of a warp group's tiles, and where values must cross threads.

Every register tile of a consumer or compute warp group is held in the accumulator layout of a Hopper
wgmma m64nNk16 with N = the tile's columns (PTX ISA, "wgmma D matrix fragment"): thread t of the group
(warp w = t // 32, lane l = t % 32) holds, for register index r in [0, R/32) and c in [0, C/4),

    row(r) = 64·(r // 2) + 8·(r % 2) + 16·w + l // 4        col(c) = 8·(c // 2) + 2·(l % 4) + c % 2

so a row is spread over the 4 threads of a quad and a column over 8 lanes of each of the 4 warps.
`support.row_index` / `col_index` compute exactly these (tests check them against CuTe's own layout).

The layouts a value can have (the registry's layout keys, `aref.ops.LAYOUTS`):
  acc     a 2-D tile with both extents > 1: element (r, c) as above;
  row     a vector along the tile rows, one value per row this thread holds (index r): a row reduction's
          result, `x[:, None]`'s operand, an (R, 1) tile;
  col     a vector along the columns (index c): an axis-0 reduction's result, `x[None, :]`'s operand, a
          rank-1 tile beside a 2-D one (numpy aligns it with the last axis), a (1, C) tile;
  scalar  one value in every thread: rank-0 tiles, (1,) and (1, 1) tiles.

A rank-1 tile is a row or a column vector depending on how the program uses it; `orientations` decides
that once per group (union-find over the values that must agree). Values used both ways, reductions
across warps and transposes of register tiles move through the group's shared exchange tile
(`exchange_elements` sizes it).
"""
from __future__ import annotations

from dataclasses import dataclass

from aref import ops
from aref.ir import OpKind, Space, TileType, Value
from aref.ir.ws import GroupProgram

ACC, ROW, COL, SCALAR = "acc", "row", "col", "scalar"
WARPS = 4
ROWS_PER_ATOM = 64
COLS_PER_ATOM = 8


def rank1(v: Value) -> bool:
    t = v.type
    return isinstance(t, TileType) and len(t.shape) == 1 and t.shape[0] > 1


def tile_layout(t, orient: str = ROW) -> str:
    """The layout of a value of type `t` (a rank-1 tile takes `orient`)."""
    if not isinstance(t, TileType):
        return SCALAR
    s = t.shape
    if len(s) == 2:
        r, c = s
        return ACC if r > 1 and c > 1 else ROW if r > 1 else COL if c > 1 else SCALAR
    if len(s) == 1 and s[0] > 1:
        return orient
    return SCALAR


def extent(t: TileType, layout: str) -> int:
    """The tile extent a layout distributes: rows for `row`/`acc`, columns for `col`."""
    s = t.shape
    if layout == COL:
        return s[-1]
    return s[0]


def per_thread(t: TileType, layout: str) -> tuple[int, ...]:
    """Elements one thread holds: (rows, cols) for acc, (rows,) / (cols,) for vectors, (1,) for scalars."""
    if layout == ACC:
        return (t.shape[0] // 32, t.shape[1] // 4)
    if layout == ROW:
        return (extent(t, ROW) // 32,)
    if layout == COL:
        return (extent(t, COL) // 4,)
    return (1,)


def fits(t: TileType, layout: str) -> bool:
    """Whether the accumulator layout can hold `t` this way (whole 64-row atoms, 8-column groups)."""
    if layout in (ACC, ROW) and extent(t, ROW) % ROWS_PER_ATOM:
        return False
    if layout in (ACC, COL) and (t.shape[-1] % COLS_PER_ATOM or t.shape[-1] > 256 and layout == ACC):
        return False
    return True


@dataclass
class Orientations:
    """Orientation (ROW or COL) of every rank-1 tile of a group, and the classes used both ways."""

    of: dict[int, str]
    both_ways: dict[int, int]           # class representative -> vector length (needs an exchange)

    def __call__(self, v: Value) -> str:
        return self.of.get(id(v), ROW)


def orientations(gp: GroupProgram) -> Orientations:
    """Union-find over rank-1 tiles that must share an orientation; demands and fixed producers decide."""
    parent: dict[int, int] = {}
    vals: dict[int, Value] = {}

    def find(i: int) -> int:
        while parent.setdefault(i, i) != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: Value, b: Value) -> None:
        if rank1(a) and rank1(b):
            vals[id(a)], vals[id(b)] = a, b
            parent[find(id(a))] = find(id(b))

    fixed: dict[int, list[str]] = {}     # value id -> orientations its producer gives it
    wants: dict[int, list[str]] = {}     # value id -> orientations its users read it in

    def want(v: Value, o: str, table) -> None:
        if rank1(v):
            vals[id(v)] = v
            table.setdefault(id(v), []).append(o)

    for op in gp.all_ops():
        k = op.kind
        if not op.results:
            continue
        res = op.results[0]
        if k is OpKind.EXPAND_DIMS:
            want(op.operands[0], COL if op.attrs.axis == 0 else ROW, wants)
        elif k is OpKind.REDUCE:
            x = op.operands[0].type
            if len(x.shape) == 2:
                want(res, COL if op.attrs.axis == 0 else ROW, fixed)
        elif k is OpKind.SLICE or ops.has_trait(op, ops.ELEMENTWISE):
            for o in op.operands:
                if rank1(res):
                    union(o, res)
                elif isinstance(res.type, TileType) and len(res.type.shape) == 2:
                    want(o, COL, wants)             # numpy: a vector beside a 2-D tile is a row of columns
    lp = gp.loop
    if lp is not None:
        for i, c, y, r in zip(lp.inits, lp.carried, lp.yields, lp.results):
            union(i, c), union(c, y), union(c, r)
    classes: dict[int, list[Value]] = {}
    for i, v in vals.items():
        classes.setdefault(find(i), []).append(v)
    of: dict[int, str] = {}
    both: dict[int, int] = {}
    for root, members in classes.items():
        made = [o for v in members for o in fixed.get(id(v), [])]
        used = [o for v in members for o in wants.get(id(v), [])]
        # a vector nothing orients (loaded or made, then only stored) is a row vector when its extent fills
        # whole 64-row atoms, else a column vector (8-column groups): either layout holds it equally well
        free = ROW if fits(members[0].type, ROW) else COL
        choice = made[0] if made else (max((ROW, COL), key=used.count) if used else free)
        if len(set(made + used)) > 1:
            both[root] = members[0].type.shape[0]
        for v in members:
            of[id(v)] = choice
    return Orientations(of, both)


def feeds_mma_only(gp: GroupProgram, v: Value) -> bool:
    """Whether every use of `v` (through casts and pipeline selects) is a wgmma operand: a transposed
    register tile used so is staged for the wgmma; one read by register math needs an exchange."""
    users: dict[int, list] = {}
    for op in gp.all_ops():
        for o in op.operands:
            users.setdefault(id(o), []).append(op)
    lp = gp.loop
    carried = {id(x): c for c, i, y in zip(lp.carried, lp.inits, lp.yields) for x in (i, y)} if lp is not None else {}
    stack, seen = [v], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if id(x) in carried:
            stack.append(carried[id(x)])
        for u in users.get(id(x), []):
            if u.kind is OpKind.MMA_ASYNC and any(u.operands[i] is x for i in (0, 1)):
                continue
            if u.kind in (OpKind.CAST, OpKind.SELECT):
                stack.append(u.result)
                continue
            return False
    return True


def exchange_elements(gp: GroupProgram, orient: Orientations | None = None) -> int:
    """32-bit elements of shared exchange tile the group needs (0: none): cross-warp reductions, vectors
    read in both orientations, and transposes of register tiles that feed register math."""
    orient = orient or orientations(gp)
    need = max(orient.both_ways.values(), default=0)
    for op in gp.all_ops():
        if op.kind is OpKind.REDUCE:
            x = op.operands[0]
            src = tile_layout(x.type, orient(x))
            if src == ACC and op.attrs.axis == 0:
                need = max(need, WARPS * x.type.shape[1])          # one partial row per warp
            elif src == ROW and tile_layout(op.result.type, orient(op.result)) == SCALAR:
                need = max(need, WARPS)
        elif op.kind is OpKind.TRANSPOSE and op.operands[0].type.space is not Space.SMEM:
            if not feeds_mma_only(gp, op.result):
                need = max(need, op.result.type.numel)
    return need


def column_reads(v: Value, users_of) -> tuple[set[int], list] | None:
    """A vector along the columns in a row layout (Blackwell's tcgen05.ld layout, a row per thread): every
    thread would hold all of it, a register per column, so it is read from the shared-memory slot it arrived
    in wherever it is used. Given a rank-1 tile `v` and `users_of(value) -> ops reading it`: the ids of `v`
    and of the rank-1 (and (1, C)) values computed from it by elementwise ops and views alone, and every op
    that reads one of them (the slot must stay held until the last). None when the chain is not read as a
    vector along the columns (no broadcast over rows, or a read along the rows, or a loop-carried value)."""
    members, readers, column = {id(v)}, [], False
    stack = [v]
    while stack:
        x = stack.pop()
        for u in users_of(x):
            if u is None:
                return None                  # carried to the next iteration: it would live in registers
            readers.append(u)
            if not u.results or not isinstance(u.results[0].type, TileType):
                continue
            r = u.results[0]
            s = r.type.shape
            if u.kind is OpKind.EXPAND_DIMS:
                if u.attrs.axis != 0:
                    return None              # x[:, None]: a vector along the rows
                column = True
            elif u.kind is OpKind.REDUCE or not ops.has_trait(u, ops.ELEMENTWISE):
                continue
            elif len(s) == 2 and s[0] > 1 and s[1] > 1:
                column = True                # broadcast over the rows (numpy aligns a vector with the last axis)
                continue
            if id(r) not in members and (rank1(r) or len(s) == 2 and s[0] == 1):
                members.add(id(r))
                stack.append(r)
    return (members, readers) if column else None
