"""FP8 accumulator promotion (`CompileOptions.promote_every`): a Tile IR → Tile IR rewrite.

Hopper's wgmma with fp8 operands does not accumulate in full fp32: it keeps about 14 significant bits and
truncates each k-step's sum into the accumulator (`aref.precision`), so a long K loses accuracy. The fix
CUTLASS ("FP8 fast accumulation off") and DeepSeek-V3 (§3.3.2) use: the tensor core accumulates N K-steps into
a temporary accumulator, and every N K-steps the temporary is added into the main accumulator by the CUDA
cores in real fp32 and zeroed. This pass writes that program for the user. A loop

    acc = aref.zeros(...)
    for k in aref.range(T):
        acc = aref.mma(a, b, acc)          # a, b fp8
    ... acc ...

becomes exactly what a user could write in the DSL:

    acc = aref.zeros(...)
    part = aref.zeros(...)                 # the tensor core's partial sum, fp32 tile of acc's shape
    for k in aref.range(T):
        part = aref.mma(a, b, part)
        last = k % N == N - 1              # every N-th step: promote
        acc = aref.where(last, acc + part, acc)
        part = aref.where(last, 0.0, part)
    ... (acc + part) ...                   # the ragged tail (T not a multiple of N; T = 0 adds zeros)

so it goes through the interpreter, simulator, partitioners, pipelining and backends as any tile program
does (the promotion's add and select are CUDA-core work of the accumulator's warp group; the scalar
condition is index math every group recomputes). The rewrite applies to every MMA in the loop whose
operands are fp8 and whose accumulator is loop-carried by plain reassignment (`acc = aref.mma(a, b, acc)`)
and read nowhere else in the loop; a kernel without one is refused at its line.

Blackwell (sm_100a): tcgen05 accumulates fp8 products in full fp32 in tensor memory, so promotion would only
add tensor-memory round trips; there the option is checked (the same refusals) and the program is left as
written (`notes` says so).
"""
from __future__ import annotations

import copy

from aref import ops
from aref.errors import ArefError
from aref.ir import (FLOAT8, ConstAttrs, DType, FnAttrs, FullAttrs, Kernel, NoAttrs, Op, OpKind, ScalarType,
                     Value)
from aref.target import DEFAULT_ARCH, target_of


def promote_note(arch: str, every: int) -> list[str]:
    """What the compiler says about `promote_every` on `arch` (shown with the partition's notes)."""
    if every and not target_of(arch).reduced_fp8_accumulator:
        return [f"promote_every={every}: {arch}'s tensor core accumulates fp8 products in fp32 already, "
                f"the MMAs are left as written"]
    return []


def promote_fp8(kernel: Kernel, every: int, arch: str = DEFAULT_ARCH) -> Kernel:
    """`kernel` with each loop-carried fp8 MMA accumulator promoted to fp32 every `every` iterations (a new
    kernel; the input is left as it was). `every == 0` returns `kernel` itself. Raises `ArefError` naming
    the user's line where no MMA qualifies."""
    if not every:
        return kernel
    sites = _sites(kernel, every)
    if not target_of(arch).reduced_fp8_accumulator:     # (the rewrite runs where the MMA keeps fewer bits)
        return kernel
    out = copy.deepcopy(kernel)
    lp = out.loop
    body = list(lp.body.ops)
    sites = [(body[i], j) for i, j in sites]       # the copy keeps the body's order
    inits, carried, yields, results = list(lp.inits), list(lp.carried), list(lp.yields), list(lp.results)
    post_repl: dict[int, Value] = {}
    tail: list[Op] = []
    post_head: list[Op] = []
    last = None
    for mma, j in sites:
        loc = mma.loc
        acc_type = mma.result.type
        zero = _op(OpKind.FULL, [], FullAttrs(acc_type.shape, 0.0, acc_type.dtype), loc, "part")
        out.pre.ops.append(zero)
        part_in = Value(acc_type, "part")
        part_mma = Value(acc_type, "part")
        new_mma = Op(OpKind.MMA, (mma.operands[0], mma.operands[1], part_in), (part_mma,), mma.attrs, loc)
        body[body.index(mma)] = new_mma
        if last is None:                       # one condition serves every promoted accumulator
            n = _op(OpKind.CONST, [], ConstAttrs(every), loc, result_type=ScalarType(DType.int32))
            m = _op(OpKind.SCALAR_BINARY, [lp.iv, n.result], FnAttrs("mod"), loc)
            n1 = _op(OpKind.CONST, [], ConstAttrs(every - 1), loc, result_type=ScalarType(DType.int32))
            last = _op(OpKind.COMPARE, [m.result, n1.result], FnAttrs("eq"), loc, "promote")
            f0 = _op(OpKind.CONST, [], ConstAttrs(0.0), loc, result_type=ScalarType(DType.float32))
            tail += [n, m, n1, last, f0]
        acc_in = carried[j]
        total = _op(OpKind.BINARY, [acc_in, part_mma], FnAttrs("add"), loc)
        acc_next = _op(OpKind.WHERE, [last.result, total.result, acc_in], NoAttrs(), loc, acc_in.name)
        part_next = _op(OpKind.WHERE, [last.result, f0.result, part_mma], NoAttrs(), loc, "part")
        tail += [total, acc_next, part_next]
        yields[j] = acc_next.result
        inits.append(zero.result)
        carried.append(part_in)
        yields.append(part_next.result)
        part_out = Value(acc_type, "part")
        results.append(part_out)
        final = _op(OpKind.BINARY, [results[j], part_out], FnAttrs("add"), loc, results[j].name)
        post_head.append(final)
        post_repl[id(results[j])] = final.result
    lp.body.ops = body + tail
    lp.inits, lp.carried, lp.yields, lp.results = tuple(inits), tuple(carried), tuple(yields), tuple(results)
    for op in out.post.ops:
        op.operands = tuple(post_repl.get(id(v), v) for v in op.operands)
    out.post.ops = post_head + out.post.ops
    return out


def _op(kind: OpKind, operands: list[Value], attrs, loc, name: str | None = None, result_type=None) -> Op:
    """One new op typed by its registry entry (the tracer's own type rules), at the user's line `loc`."""
    if result_type is None:
        fn = getattr(attrs, "fn", None)
        (result_type,) = ops.result_types(kind, fn, [v.type for v in operands], attrs, loc)
    return Op(kind, tuple(operands), (Value(result_type, name),), attrs, loc)


def _sites(kernel: Kernel, every: int) -> list[tuple[int, int]]:
    """(index in the loop body, carried index) of each MMA the rewrite applies to; `ArefError` at the user's
    line where none does or where an fp8 accumulator is used in a way the promoted form would change."""
    if not isinstance(every, int) or isinstance(every, bool) or every < 0:
        raise ArefError(f"promote_every must be an integer ≥ 0 (K-steps between promotions), got {every!r}",
                        kernel.loc, hint="e.g. promote_every=4; 0 turns promotion off")
    lp = kernel.loop
    mmas = [] if lp is None else [(i, op) for i, op in enumerate(lp.body.ops) if op.kind is OpKind.MMA]
    if not mmas:
        outside = [op for op in kernel.all_ops() if op.kind is OpKind.MMA]
        where = "a loop without an aref.mma" if lp is not None else "a kernel without a loop"
        if outside:
            where += ": this aref.mma runs once, with nothing to promote"
        raise ArefError(f"promote_every={every} promotes fp8 MMA accumulators over a loop, but {kernel.name} is "
                        f"{where}", outside[0].loc if outside else lp.loc if lp is not None else kernel.loc,
                        hint="promote_every applies to `acc = aref.mma(a, b, acc)` with fp8 a and b in the loop; "
                             "drop the option for this kernel")
    carried = {id(v): j for j, v in enumerate(lp.carried)}
    uses: dict[int, list[Op]] = {}
    for op in lp.body.ops:
        for v in op.operands:
            uses.setdefault(id(v), []).append(op)
    out, reasons = [], []
    for i, op in mmas:
        dtypes = {v.type.dtype for v in op.operands[:2]}
        if not dtypes <= set(FLOAT8):
            reasons.append((op, f"its operands are {'/'.join(sorted(d.value for d in dtypes))}, not fp8 (16-bit "
                                f"operands accumulate in full fp32)"))
            continue
        acc = op.operands[2] if len(op.operands) == 3 else None
        j = carried.get(id(acc)) if acc is not None else None
        if j is None or lp.yields[j] is not op.result:
            reasons.append((op, "its accumulator is not carried by the loop as `acc = aref.mma(a, b, acc)`"))
            continue
        other = [u for u in uses.get(id(acc), []) if u is not op] + uses.get(id(op.result), [])
        if other:
            raise ArefError(f"promote_every={every} cannot promote this fp8 accumulator: the loop reads it at line "
                            f"{other[0].loc.line}, where the promoted program would hold only the fp32 part "
                            f"of the sum", op.loc,
                            hint="read the accumulator after the loop, or drop promote_every")
        out.append((i, j))
    if not out:
        op, why = reasons[0]
        raise ArefError(f"promote_every={every} promotes fp8 MMA accumulators, but this aref.mma cannot be "
                        f"promoted: {why}", op.loc, hint="drop promote_every for this kernel")
    return out
