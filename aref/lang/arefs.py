"""The tile language's arefs and loop: `aref.channel` (explicit put / get / consumed rings) and `aref.range`
(the kernel's single pipelined loop). Split from `aref.lang`, which re-exports them."""
from __future__ import annotations

import builtins

from aref.errors import ArefSyntaxError, ArefTypeError, ChannelError
from aref.ir import ArefType, ChannelAttrs, DType, NoAttrs, OpKind, Space, TileType, Value
from aref.lang.tiles import Scalar, Tile, _check_operand
from aref.lang.trace import current, user_loc


# --------------------------------------------------------------------------------------------- arefs
class Channel:
    """An explicit aref: a ring of `depth` slots handing tiles from a producer to a consumer.

    In the loop, `put(*tiles)` publishes a payload into the next free slot, `get()` borrows the oldest
    published payload (returned as shared-memory tiles) and `consumed()` releases it. Sequentially the
    program means exactly what it says; the compiler makes the hand-off asynchronous across warp groups.
    """

    def __init__(self, value: Value, depth: int, name: str | None, loc):
        self.value = value
        self.depth = depth
        self.name = name
        self.loc = loc
        self.payload: tuple[TileType, ...] | None = None
        self.put_loc = None

    def _check_region(self, what: str, loc) -> None:
        tracer = current(f"{self.name}.{what}")
        unrolled = tracer.unrolled_outside_loop()
        if unrolled is not None:
            raise unrolled.error(f"uses channel '{self.name}' ({self.name}.{what} on line {loc.line})")
        if tracer.region != "loop":
            raise ChannelError(
                f"channel '{self.name}' is used {'before' if tracer.region == 'pre' else 'after'} the loop; "
                f"an aref hands values from one iteration's producer to its consumer", loc,
                hint="use the tile directly outside the loop; use channels inside the `aref.range` loop")

    def put(self, *tiles: Tile) -> None:
        loc = user_loc()
        self._check_region("put", loc)
        if not tiles:
            raise ChannelError(f"put on channel '{self.name}' needs at least one tile", loc,
                               hint=f"e.g. {self.name}.put(aref.load(A, coords, tile_shape))")
        for t in tiles:
            _check_operand(t, f"{self.name}.put", loc)
            if not isinstance(t, Tile):
                raise ChannelError(f"channel '{self.name}' carries tiles, got {type(t).__name__}", loc,
                                   hint="put tiles (loaded or computed); scalars and numbers need no channel")
        payload = tuple(t.value.type.with_space(Space.SMEM) for t in tiles)
        if self.payload is None:
            self.payload, self.put_loc = payload, loc
            self.value.type = ArefType(payload, self.depth)
        elif payload != self.payload:
            raise ChannelError(
                f"channel '{self.name}' was first given [{', '.join(map(str, self.payload))}] "
                f"(line {self.put_loc.line}) and now [{', '.join(map(str, payload))}]", loc,
                hint="every put to a channel must carry the same tile types")
        current().emit(OpKind.PUT, [self.value] + [t.value for t in tiles], [], NoAttrs(), loc)

    def get(self):
        """The oldest published payload: one tile, or a tuple of tiles if the put carried several."""
        loc = user_loc()
        self._check_region("get", loc)
        if self.payload is None:
            raise ChannelError(f"get on channel '{self.name}' before any put", loc,
                               hint=f"call `{self.name}.put(...)` earlier in the loop body")
        op = current().emit(OpKind.GET, [self.value], list(self.payload), NoAttrs(), loc)
        tiles = tuple(Tile(v) for v in op.results)
        return tiles[0] if len(tiles) == 1 else tiles

    def consumed(self) -> None:
        """Release the oldest borrowed slot so the producer may refill it."""
        loc = user_loc()
        self._check_region("consumed", loc)
        current().emit(OpKind.CONSUMED, [self.value], [], NoAttrs(), loc)

    def __repr__(self) -> str:
        return f"Channel({self.name}, depth={self.depth})"


def channel(depth: int = 2, name: str | None = None) -> Channel:
    """Create an aref channel with a ring of `depth` slots (create it before the loop)."""
    loc = user_loc()
    tracer = current("aref.channel")
    if not isinstance(depth, int) or isinstance(depth, builtins.bool) or depth < 1:
        raise ChannelError(f"channel depth must be a positive integer, got {depth!r}", loc,
                           hint="the depth is the number of ring slots: an integer ≥ 1, e.g. "
                                "aref.channel(depth=2)")
    if tracer.region != "pre":
        raise ChannelError("create channels before the loop", loc,
                           hint="move `aref.channel(...)` above the `for ... in aref.range(...)` line")
    op = tracer.emit(OpKind.CHANNEL, [], [ArefType((), depth)], ChannelAttrs(name or "", depth), loc,
                     names=[name])
    ch = Channel(op.result, depth, name, loc)
    tracer.channels.append((ch, op))
    return ch


class range:  # noqa: A001 - deliberately mirrors Python's range in the kernel's loop header
    """The kernel's single pipelined loop: `for k in aref.range(n):` with `n` an integer or runtime scalar."""

    def __init__(self, n):
        loc = user_loc()
        if isinstance(n, Scalar):
            if n.dtype is not DType.int32:
                raise ArefTypeError("the loop bound must be an integer", loc,
                                    hint="compute it from tensor shapes and integer constants with `//`")
        elif not isinstance(n, int) or isinstance(n, builtins.bool):
            hint = None
            if isinstance(n, float):
                hint = ("a float entered the bound: `/` gives a float, and so does `//` when either side is a "
                        "float (e.g. a compile-time constant like BK=32.5): use integers and `//`")
            raise ArefTypeError(f"the loop bound must be an integer, got {type(n).__name__} {n!r}", loc,
                                hint=hint or "the trip count is an integer computed from tensor shapes and "
                                             "constants, e.g. aref.range(A.shape[1] // BK)")
        elif n < 0:
            raise ArefTypeError(f"the loop bound must be non-negative, got {n}", loc,
                                hint="the loop runs n times for aref.range(n): n ≥ 0")
        self.n = n
        self.loc = loc

    def __iter__(self):
        raise ArefSyntaxError("aref.range must be the iterator of the kernel's `for` statement itself",
                              user_loc(), hint="write `for k in aref.range(n):` in the kernel body")

