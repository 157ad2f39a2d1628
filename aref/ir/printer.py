"""Readable text for Tile IR (one op per line, source line at the right)."""
from __future__ import annotations

from aref.ir import Kernel, Op, OpKind, ScalarType, Value

LOC_COLUMN = 78


class Namer:
    """Unique printable names: the user's variable name where known, else a number."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def __call__(self, v: Value) -> str:
        n = self.names.get(id(v))
        if n is None:
            if v.name:
                base, i = v.name, 1
                n = base
                while n in self.used:
                    n = f"{base}.{i}"
                    i += 1
            else:
                while str(self.counter) in self.used:
                    self.counter += 1
                n = str(self.counter)
                self.counter += 1
            self.used.add(n)
            self.names[id(v)] = n
        return "%" + n


def _attrs(op: Op) -> str:
    a, k = op.attrs, op.kind
    if k is OpKind.CONST:
        return repr(a.value)
    if k is OpKind.PROGRAM_ID:
        return str(a.axis)
    if k in (OpKind.SCALAR_BINARY, OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE):
        return a.fn
    if k is OpKind.REDUCE:
        return f"{a.fn} axis={a.axis}"
    if k is OpKind.LOAD:
        return f"tile={a.tile_shape}"
    if k is OpKind.STORE:
        return f"tile={a.tile_shape}" + (f" reduce={a.reduce}" if a.reduce else "")
    if k is OpKind.FULL:
        return f"{a.value!r}"
    if k is OpKind.ARANGE:
        return str(a.n)
    if k is OpKind.TRANSPOSE:
        return f"perm={a.perm}"
    if k is OpKind.EXPAND_DIMS:
        return f"axis={a.axis}"
    if k is OpKind.SLICE:
        return f"axis={a.axis} [{a.start}:{a.start + a.size}]"
    if k is OpKind.CAST:
        return f"to {a.dtype.value}"
    if k is OpKind.CHANNEL:
        return f'"{a.name}" depth={a.depth}' + ("" if a.user else " (compiler)")
    if k in (OpKind.MBAR_ARRIVE, OpKind.MMA_COMMIT):
        return f"count={a.count}" if a.count != 1 else ""
    if k is OpKind.MBAR_EXPECT_TX:
        return f"tx={a.bytes}B"
    if k is OpKind.TMA_LOAD:
        return f"tile={a.tile_shape}"
    if k is OpKind.SLOT_STORE and a.cols:
        return f"cols [{a.cols[0]}:{a.cols[0] + a.cols[1]}]"
    if k is OpKind.MMA_WAIT:
        return f"pending={a.pending}"
    if k is OpKind.MMA_ASYNC:
        return f"-> tmem {a.tmem}" if a.tmem else ""
    if k in (OpKind.TMEM_ALLOC, OpKind.TMEM_DEALLOC):
        return f"columns={a.columns}"
    if k in (OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE):
        return f"id={a.id} threads={a.threads}"
    if k is OpKind.SETMAXNREG:
        return f"{'inc' if a.increase else 'dec'} {a.regs}"
    return ""


def _args(op: Op, name) -> str:
    """Operands, in a form that reads like the hardware operation for memory and barrier ops."""
    k, o = op.kind, op.operands
    if k is OpKind.LOAD:
        return f"{name(o[0])}[{', '.join(name(v) for v in o[1:])}]"
    if k is OpKind.STORE:
        return f"{name(o[0])}[{', '.join(name(v) for v in o[1:-1])}] = {name(o[-1])}"
    if k is OpKind.PUT:
        if len(o) > 1 and isinstance(o[1].type, ScalarType):     # warp-specialized levels carry the item
            return f"{name(o[0])}[item {name(o[1])}]({', '.join(name(v) for v in o[2:])})"
        return f"{name(o[0])}({', '.join(name(v) for v in o[1:])})"
    if k in (OpKind.GET, OpKind.CONSUMED) and len(o) == 2:
        return f"{name(o[0])}[item {name(o[1])}]"
    if k is OpKind.MBAR_WAIT:
        return f"{name(o[0])}[{name(o[1])}] parity {name(o[2])}"
    if k in (OpKind.MBAR_ARRIVE, OpKind.MMA_COMMIT):
        return f"{name(o[0])}[{name(o[1])}]" + (f" item {name(o[2])}" if len(o) > 2 else "")
    if k is OpKind.MBAR_EXPECT_TX:
        return f"{name(o[0])}[{name(o[1])}]"
    if k is OpKind.TMA_LOAD:
        ring, slot, bar, item = o[-4:]
        return (f"{name(o[0])}[{', '.join(name(v) for v in o[1:-4])}] -> {name(ring)}[{name(slot)}] "
                f"bar {name(bar)}[{name(slot)}] item {name(item)}")
    if k is OpKind.SLOT_STORE:
        return f"{name(o[3])} -> {name(o[0])}[{name(o[1])}] item {name(o[2])}"
    if k is OpKind.SLOT_READ:
        return f"{name(o[0])}[{name(o[1])}] item {name(o[2])}"
    return ", ".join(name(v) for v in o)


def format_op(op: Op, name, extra: str = "") -> str:
    """One op as `%r = kind attrs %operands : types`, with `extra` annotations before the type."""
    res = ", ".join(name(r) for r in op.results)
    args = _args(op, name)
    attrs = _attrs(op)
    body = " ".join(x for x in (op.kind.value, args, attrs, extra) if x)
    types = ", ".join(str(r.type) for r in op.results)
    text = (f"{res} = " if res else "") + body + (f" : {types}" if types else "")
    return text


def with_loc(text: str, op_loc, indent: str) -> str:
    line = indent + text
    if op_loc is not None and op_loc.line > 0:
        line = line.ljust(LOC_COLUMN) + f"  # {op_loc.short()}"
    return line


def print_kernel(kernel: Kernel, annotate=None) -> str:
    """The kernel's IR as text. `annotate(op) -> str` adds per-op annotations (later stages use it)."""
    name = Namer()
    out = []
    consts = " ".join(f"{k}={v!r}" if not hasattr(v, "value") else f"{k}={v.value}"
                      for k, v in kernel.constexprs.items())
    params = ", ".join(f"{name(p.value)}: {p.value.type}" for p in kernel.params)
    out.append(f"kernel @{kernel.name}({params}) grid={kernel.grid}" + (f" {{{consts}}}" if consts else ""))

    def emit_block(ops, indent):
        for op in ops:
            extra = annotate(op) if annotate else ""
            out.append(with_loc(format_op(op, name, extra), op.loc, indent))

    emit_block(kernel.pre.ops, "  ")
    loop = kernel.loop
    if loop is not None:
        iters = ", ".join(f"{name(c)} = {name(i)}" for c, i in zip(loop.carried, loop.inits))
        head = f"for {name(loop.iv)} in range({name(loop.trip_count)})"
        head += f" iter_args({iters})" if iters else ""
        out.append(with_loc(head + " {", loop.loc, "  "))
        emit_block(loop.body.ops, "    ")
        if loop.yields:
            out.append(f"    yield {', '.join(name(y) for y in loop.yields)}")
        results = ", ".join(name(r) for r in loop.results)
        out.append("  }" + (f" -> {results}" if results else ""))
    emit_block(kernel.post.ops, "  ")
    return "\n".join(out) + "\n"
