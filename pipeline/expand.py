"""Expanding a staged loop into prologue / steady state / epilogue, correct for every trip count N.

Step t runs, for each stage s, the ops of stage s for iteration i = t − s; steps run from 0 to N+S−1
(S = last stage). We emit
  prologue   steps 0..S−1, straight-line; the ops of stage s ≤ t run under the guard (t − s) < N;
  steady     for j in range(max(N − S, 0)): step t = j + S, every stage, no guards;
  epilogue   steps t = N + e for e = 0..S−1, only stages s > e, all under the guard N + e ≥ S (a step the
             prologue already ran when N < S is skipped and leaves the pipeline state as it was).
So N = 0 runs nothing of the loop, N < S runs partial prologue and epilogue steps, and N ≥ S runs all.

Values live across steps in shift chains (SSA loop-carried values of the steady loop): a value made at stage
su and read at stage sr sits at position sr − su − 1 of its chain when read. A loop-carried value behaves
like a value made at stage su − 1 of the next iteration (su: the stage of the op computing its next value);
its initial value enters the chain at step su − 1, and position 0 always holds the latest computed value,
which is also the loop's result.
"""
from __future__ import annotations

from aref.errors import ArefError, CompilerBugError
from aref.ir import Block, ConstAttrs, DType, FnAttrs, Loop, NoAttrs, Op, OpKind, ScalarType, Value
from aref.ir.ws import GroupProgram
from pipeline.schedule import GroupSchedule

I32 = ScalarType(DType.int32)
I1 = ScalarType(DType.bool_)


class _Expander:
    def __init__(self, gp: GroupProgram, sched: GroupSchedule):
        self.gp, self.sched = gp, sched
        self.lp = gp.loop
        self.S = sched.stages
        self.stage = sched.stage
        self.prod = {id(r): op for op in self.lp.body.ops for r in op.results}
        self.carry = {id(c): i for i, c in enumerate(self.lp.carried)}
        self.su_y: list[int] = []
        for y in self.lp.yields:
            if id(y) not in self.prod:
                raise ArefError("a pipelined loop-carried value must be recomputed in the loop body", self.lp.loc)
            self.su_y.append(self.stage[self.prod[id(y)]])
        # chain lengths: body values read at later stages, carried values read at stage sr
        self.len_v: dict[int, int] = {}
        self.len_c = [1] * len(self.lp.carried)
        for op in self.lp.body.ops:
            sr = self.stage[op]
            for v in (*op.operands, *([op.pred] if op.pred is not None else [])):
                if id(v) in self.prod:
                    gap = sr - self.stage[self.prod[id(v)]]
                    if gap > 0:
                        self.len_v[id(v)] = max(self.len_v.get(id(v), 0), gap)
                elif id(v) in self.carry:
                    i = self.carry[id(v)]
                    self.len_c[i] = max(self.len_c[i], sr - self.su_y[i] + 1)
        self.consts: dict[tuple, Value] = {}

    # ------------------------------------------------------------------------------------ scalars
    def const(self, x: int, out: list[Op]) -> Value:
        key = (id(out), x)
        if key not in self.consts:
            v = Value(I32)
            out.append(Op(OpKind.CONST, (), (v,), ConstAttrs(x), self.lp.loc))
            self.consts[key] = v
        return self.consts[key]

    def scalar(self, fn: str, a: Value, b: Value, out: list[Op], name=None) -> Value:
        v = Value(I1 if fn in ("lt", "le", "gt", "ge", "eq", "ne") else I32, name)
        out.append(Op(OpKind.SCALAR_BINARY, (a, b), (v,), FnAttrs(fn), self.lp.loc))
        return v

    # ------------------------------------------------------------------------------------- steps
    def operand(self, v: Value, s: int, state, fresh, iteration, t: int | None) -> Value:
        if v is self.lp.iv:
            return iteration[s]
        if id(v) in self.prod:
            su = self.stage[self.prod[id(v)]]
            if su == s:
                return fresh[id(v)]
            return state[("v", id(v), s - su - 1)]
        if id(v) in self.carry:
            i = self.carry[id(v)]
            if self.su_y[i] - 1 == s:
                # computed earlier in this step by iteration i−1 — except in iteration 0 (prologue step s),
                # which reads the initial value
                return self.lp.inits[i] if t == s else fresh[id(self.lp.yields[i])]
            return state[("c", i, s - self.su_y[i])]
        return v

    def step(self, out: list[Op], state: dict, stages, iteration: dict[int, Value], pred: dict[int, Value | None],
             keep_last: bool = True, t: int | None = None):
        """Emit one pipeline step; return the shifted state. With `keep_last`, a carried value's newest
        entry only changes when the op computing it actually ran (its guard held)."""
        fresh: dict[int, Value] = {}
        for op in self.sched.order:
            s = self.stage[op]
            if s not in stages:
                continue
            operands = tuple(self.operand(v, s, state, fresh, iteration, t) for v in op.operands)
            results = tuple(Value(r.type, r.name) for r in op.results)
            guard = pred.get(s)
            if op.pred is not None:          # an op of the loop's own condition (a carried value's early put)
                own = self.operand(op.pred, s, state, fresh, iteration, t)
                guard = own if guard is None else self.select(guard, own, guard, out)
            out.append(Op(op.kind, operands, results, op.attrs, op.loc, pred=guard, stage=s))
            for r, nr in zip(op.results, results):
                fresh[id(r)] = nr
        new: dict = {}
        for vid, n in self.len_v.items():
            for p in range(n):
                src = fresh.get(vid) if p == 0 else state.get(("v", vid, p - 1))
                src = src if src is not None else state.get(("v", vid, p))
                if src is not None:
                    new[("v", vid, p)] = src
        for i, n in enumerate(self.len_c):
            y = self.lp.yields[i]
            su = self.su_y[i]
            if id(y) in fresh:
                guard = pred.get(su) if keep_last else None
                old = state.get(("c", i, 0))
                new[("c", i, 0)] = fresh[id(y)] if guard is None or old is None else \
                    self.select(guard, fresh[id(y)], old, out)
            elif ("c", i, 0) in state:
                new[("c", i, 0)] = state[("c", i, 0)]
            for p in range(1, n):
                src = state.get(("c", i, p - 1))
                if src is not None:
                    new[("c", i, p)] = src
        return new

    def _epilogue_only(self, keys, carried: dict, after: dict, body: list[Op]) -> set:
        """State entries the steady loop need not carry: the newest value of a loop-carried value made at a
        stage > 0 that no op of the steady body reads and no other entry takes over. The epilogue's first step
        recomputes it under the guard N ≥ S and keeps the entry only where that guard fails; then the steady
        loop ran no iteration (N < S), so the entry is its value from before the loop. Carrying it instead
        would keep a copy of it live beside its successor (attention's O beside O·α: 64 registers a thread)."""
        read = {id(v) for op in body for v in op.operands}
        handed = {id(after[k]) for k in keys}
        return {k for k in keys if k[0] == "c" and k[2] == 0 and self.len_c[k[1]] == 1 and self.su_y[k[1]] >= 1
                and id(carried[k]) not in read and id(carried[k]) not in handed}

    def select(self, cond: Value, a: Value, b: Value, out: list[Op]) -> Value:
        if a is b:
            return a
        v = Value(a.type, a.name)
        out.append(Op(OpKind.SELECT, (cond, a, b), (v,), NoAttrs(), self.lp.loc))
        return v

    # ------------------------------------------------------------------------------------ expand
    def run(self) -> None:
        gp, lp, S = self.gp, self.lp, self.S
        pre, prologue, epilogue = gp.pre.ops, [], []
        n = lp.trip_count
        state: dict = {}
        for i, init in enumerate(lp.inits):
            if self.su_y[i] == 0:
                state[("c", i, 0)] = init
        for t in range(S):
            stages = range(0, t + 1)
            iteration = {s: self.const(t - s, prologue) for s in stages}
            pred = {s: self.scalar("lt", iteration[s], n, prologue) for s in stages}
            state = self.step(prologue, state, set(stages), iteration, pred, t=t)
            for i, init in enumerate(lp.inits):
                if self.su_y[i] - 1 == t:
                    state[("c", i, 0)] = init
        # steady state: max(N - S, 0) iterations of a full step
        steady_n = self.scalar("max", self.scalar("sub", n, self.const(S, pre), pre), self.const(0, pre), pre,
                               name="steady")
        rank = {id(r): (i, j) for i, op in enumerate(lp.body.ops) for j, r in enumerate(op.results)}
        keys = sorted(state, key=lambda k: (k[0], rank.get(k[1], (k[1], 0)), k[2]))
        j = Value(I32, lp.iv.name)
        carried = {k: Value(state[k].type, state[k].name) for k in keys}
        body: list[Op] = []
        iteration = {s: (j if s == S else self.scalar("add", j, self.const(S - s, body), body))
                     for s in range(S + 1)}
        after = self.step(body, carried, set(range(S + 1)), iteration, {})
        if set(after) != set(keys):
            raise CompilerBugError(f"the pipeline state of group {gp.group.name} is not stable across steps",
                                   lp.loc, pass_name="pipelining")
        dead = self._epilogue_only(keys, carried, after, body)
        live = [k for k in keys if k not in dead]
        results = {k: Value(state[k].type, state[k].name) for k in live}
        gp.loop = Loop(j, steady_n, tuple(state[k] for k in live), tuple(carried[k] for k in live),
                       Block(body), tuple(after[k] for k in live), tuple(results[k] for k in live), lp.loc)
        state = {**{k: state[k] for k in dead}, **results}
        entry = dict(state)
        for e in range(S):
            t = n if e == 0 else self.scalar("add", n, self.const(e, epilogue), epilogue)
            guard = self.scalar("ge", t, self.const(S, epilogue), epilogue)
            stages = range(e + 1, S + 1)
            iteration = {s: self.scalar("sub", t, self.const(s, epilogue), epilogue) for s in stages}
            shifted = self.step(epilogue, state, set(stages), iteration, {s: guard for s in stages},
                                keep_last=False)
            # the guards grow weaker step by step (N + e ≥ S): where this step's fails, every earlier one failed
            # too and the state is still the one the drain began with. Falling back to that, not to the previous
            # step's select, leaves the previous step's value dead once this step has read it (attention's O:
            # held beside O·α for the last P·V that may not run, 128 registers a thread at head dim 256)
            state = {k: v if k not in state or v is state[k] else
                     self.select(guard, v, entry.get(k, state[k]), epilogue) for k, v in shifted.items()}
        final = {id(r): state[("c", i, 0)] for i, r in enumerate(lp.results)}
        for op in gp.post.ops:
            op.operands = tuple(final.get(id(v), v) for v in op.operands)
        gp.prologue = Block(prologue)
        gp.epilogue = Block(_without_dead_selects(epilogue, gp.post.ops))
        gp.stages = S
        gp.mma_depth = self.sched.mma_depth


def _without_dead_selects(epilogue: list[Op], post: list[Op]) -> list[Op]:
    """The drain steps without the state selects nothing reads (a state entry the next step's select replaced
    with its own fallback): a select is no work, but the value it reads stays live until it, so the code
    generator would keep it beside its successor."""
    ops = list(epilogue)
    while True:
        used = {id(v) for op in ops + post for v in (*op.operands, *([op.pred] if op.pred is not None else []))}
        keep = [op for op in ops if op.kind is not OpKind.SELECT or id(op.result) in used]
        if len(keep) == len(ops):
            return ops
        ops = keep


def expand(gp: GroupProgram, sched: GroupSchedule) -> None:
    """Rewrite `gp` (in place — callers pass a copy) into its pipelined form."""
    if gp.loop is None:
        return
    if sched.stages == 0:
        for op in gp.loop.body.ops:
            op.stage = 0
        gp.loop.body = Block(list(sched.order))
        gp.mma_depth = sched.mma_depth
        return
    _Expander(gp, sched).run()
