"""Runtime support called by the AST-transformed kernel function while it is traced.

The transform (`aref.lang.frontend`) turns `for k in aref.range(n): body` into

    h = loop_begin(<aref.range(n)>, names, locals())   # carried values become the loop's block arguments
    k = h.iv; acc = h.entry["acc"]; ...
    body
    r = loop_end(h, locals())                          # yields; the results replace the variables
    acc = r["acc"]; ...

so loop-carried values come from plain reassignment, exactly as the Python source says.
"""
from __future__ import annotations

from aref.errors import ArefSyntaxError, ArefTypeError, SrcInfo
from aref.ir import ChannelAttrs, DType, Loop, ScalarType, Value
from aref.lang.arefs import Channel, range as aref_range
from aref.lang.tiles import Scalar, _Proxy, _const, wrap
from aref.lang.trace import UNDEF, Poison, UnrolledLoop, current, user_loc


def unrolled(iterable, file: str, line: int, col: int, col_end: int, shape_dependent: bool, suggestion: str,
             kernel_loop: int | None):
    """The iterator of a Python `for` loop (or comprehension) of the kernel: the loop runs as Python runs it,
    and while it does the tracer knows it is inside it (`Tracer.unrolled`), so that loads and channel
    operations in its body can tell a static unroll from a pipelined loop written the Triton way."""
    tracer = current()
    loop = UnrolledLoop(SrcInfo(file, line, col, col_end), shape_dependent, suggestion, kernel_loop)
    try:
        loop.trips = len(iterable)
    except TypeError:
        pass
    tracer.unrolled.append(loop)
    try:
        yield from iterable
    finally:
        tracer.unrolled.remove(loop)


def named(value, names):
    """Give the values assigned by `x = ...` / `a, b = ...` readable names in the IR."""
    if isinstance(names, tuple):
        if isinstance(value, tuple) and len(value) == len(names):
            for v, n in zip(value, names):
                named(v, n)
        return value
    if isinstance(value, _Proxy) and value.value.name is None:
        value.value.name = names
    elif isinstance(value, Channel) and value.name is None:
        value.name = value.value.name = names
        for ch, op in current().channels:
            if ch is value:
                op.attrs = ChannelAttrs(names, op.attrs.depth, op.attrs.user)
    return value


# ------------------------------------------------------------------------- pytree of carried values
def _flatten(obj, loc, name):
    """Leaves (Values) and a rebuild function for tiles, scalars, numbers and tuples/lists of them."""
    if isinstance(obj, _Proxy):
        return [obj.value], lambda leaves: wrap(leaves[0])
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        v = _const(obj, DType.float32 if isinstance(obj, float) else DType.int32, loc)
        return [v], lambda leaves: wrap(leaves[0])
    if isinstance(obj, (tuple, list)):
        parts = [_flatten(x, loc, name) for x in obj]
        sizes = [len(p[0]) for p in parts]
        kind = type(obj)

        def rebuild(leaves):
            out, i = [], 0
            for (_, rb), n in zip(parts, sizes):
                out.append(rb(leaves[i:i + n]))
                i += n
            return kind(out)
        return [v for p in parts for v in p[0]], rebuild
    raise ArefTypeError(
        f"'{name}' holds a {type(obj).__name__} before the loop and is reassigned in it; only tiles, scalars "
        f"and tuples or lists of them can be carried across iterations", loc)


class LoopHandle:
    def __init__(self, rng, names, loc):
        self.rng = rng
        self.names = names
        self.loc = loc
        self.entry: dict[str, object] = {}
        self.carried_names: list[str] = []
        self.rebuild = {}
        self.sizes = {}
        self.inits: list[Value] = []
        self.carried: list[Value] = []
        self.iv = None


def loop_begin(rng, names: tuple[str, ...], scope: dict, iv_name: str) -> LoopHandle:
    tracer = current("aref.range")
    loc = getattr(rng, "loc", None) or user_loc()
    if not isinstance(rng, aref_range):
        raise ArefSyntaxError("the kernel loop must iterate over aref.range(n)", loc,
                              hint="write `for k in aref.range(n):`")
    if tracer.loop_done or tracer.loop_state is not None:
        raise ArefSyntaxError("a kernel has a single aref.range loop; this is a second one", loc,
                              hint="fuse the loops, or write a second kernel")
    h = LoopHandle(rng, names, loc)
    h.trip = rng.n.value if isinstance(rng.n, Scalar) else _const(rng.n, DType.int32, loc, tracer)
    for name in names:
        obj = scope.get(name, UNDEF)
        if obj is UNDEF:
            continue
        leaves, rebuild = _flatten(obj, loc, name)
        for i, leaf in enumerate(leaves):
            leaf.name = leaf.name or (name if len(leaves) == 1 else f"{name}{i}")
        h.carried_names.append(name)
        h.rebuild[name], h.sizes[name] = rebuild, len(leaves)
        h.inits.extend(leaves)
    tracer.loop_state = _begin_body(tracer, loc)
    h.carried = [Value(v.type, v.name) for v in h.inits]
    i = 0
    for name in h.carried_names:
        n = h.sizes[name]
        h.entry[name] = h.rebuild[name](h.carried[i:i + n])
        i += n
    h.iv = Scalar(Value(ScalarType(DType.int32), iv_name))
    return h


def _begin_body(tracer, loc):
    from aref.lang.trace import LoopState
    state = LoopState(loc)
    tracer.block = state.body
    return state


def loop_end(h: LoopHandle, scope: dict) -> dict[str, object]:
    tracer = current()
    yields: list[Value] = []
    for name in h.carried_names:
        obj = scope.get(name, UNDEF)
        leaves = _flatten(obj, h.loc, name)[0] if obj is not UNDEF else []
        if len(leaves) != h.sizes[name]:
            raise ArefTypeError(f"'{name}' changes structure inside the loop", h.loc,
                                hint=f"keep '{name}' the same kind of value (tile, or a list of the same length) "
                                     f"in every iteration")
        yields.extend(leaves)
    start = len(yields) - sum(h.sizes.values())
    for before, after, cv in zip(h.inits, yields[start:], h.carried):
        if before.type != after.type:
            same_data = (getattr(before.type, "shape", None) == getattr(after.type, "shape", None)
                         and getattr(before.type, "dtype", None) == getattr(after.type, "dtype", None))
            hint = (f"a loaded tile lives in shared memory and computed ones in registers: copy it into "
                    f"registers before the loop (`{_name_of(h, cv)} = aref.load(...) * 1`)" if same_data else
                    "cast inside the loop so the value keeps one dtype and shape")
            raise ArefTypeError(
                f"'{_name_of(h, cv)}' is {before.type} before the loop but {after.type} at the end of an "
                f"iteration; a carried value must keep its type", h.loc, hint=hint)
    results = [Value(v.type, v.name) for v in h.carried]
    tracer.loop = Loop(iv=h.iv.value, trip_count=h.trip, inits=tuple(h.inits), carried=tuple(h.carried),
                       body=tracer.loop_state.body, yields=tuple(yields), results=tuple(results), loc=h.loc)
    tracer.loop_done = True
    tracer.block = tracer.post
    out: dict[str, object] = {}
    i = 0
    for name in h.carried_names:
        n = h.sizes[name]
        out[name] = h.rebuild[name](results[i:i + n])
        i += n
    for name in h.names:
        if name not in out:
            out[name] = Poison(name, h.loc)
    return out


def _name_of(h: LoopHandle, v: Value) -> str:
    i = 0
    for name in h.carried_names:
        if any(v is c for c in h.carried[i:i + h.sizes[name]]):
            return name
        i += h.sizes[name]
    return v.name or "?"
