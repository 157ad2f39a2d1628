"""The plain modulo schedule (no warp groups) as a pairwise "height" model, for the first phase of the II search.

The plain model is the dependences and the units: op ``a`` takes a unit in ``[s_a + o, s_a + o + c)`` every II
cycles. Two such pieces on a one-instance unit are apart modulo II exactly when some integer ``K`` (how many
IIs apart the two ops' iterations are; the classical "height" of cyclic scheduling) gives

    s_b + o_b + K * II >= s_a + o_a + c_a      and      s_a + o_a + II >= s_b + o_b + K * II + c_b,

so the whole model is difference constraints between start times plus one small integer per pair of pieces.
No residue or folded interval appears: CP-SAT's linear relaxation sees the recurrences through the units
directly, and its proofs do not grow with the time resolution the way the folded intervals' do
(attention_bwd's Hopper graph one cycle below its first plain II: 0.7 s, against more than 25 s for
`joint.JointModel(warp=False)`, which states the same schedules).

Units with more than one instance have no pairwise form; graphs with them use the folded model.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from .bounds import exclusive_delay
from .graph import Graph
from .joint import time_quantum


def height_applies(graph: Graph) -> bool:
    """Whether :class:`PlainModel` states ``graph``'s units (every unit anyone uses has one instance)."""
    return all(graph.units[u] == 1 for op in graph.ops.values() for u in op.usage)


def plain_stage_bound(graph: Graph, ii: int) -> int:
    """Stages that hold a shortest plain modulo schedule at ``ii``, if there is one.

    A plain schedule's resources depend only on its residues (start mod II). With the residues fixed, the
    least stages meeting every dependence are the longest paths of the graph with weights
    ``ceil((delay + r_src - r_dst) / II) - distance`` <= ``ceil((delay + II - 1) / II) - distance``; the
    schedule they give is no longer than the one they came from, and a simple path leaves each op by at most
    one edge, so the largest stage is at most the sum over ops of their largest positive weight. The last
    op then ends within ``ceil(duration / II) + 1`` more stages.
    """
    total = 0
    for name in graph.ops:
        weights = [-(-(exclusive_delay(graph, e.src, e.dst, e.delay) + ii - 1) // ii) - e.distance
                   for e in graph.out_edges(name)]
        total += max([0] + weights)
    return total + -(-max(op.duration for op in graph.ops.values()) // ii) + 1


class PlainModel:
    """The plain model at one II within ``stages`` stages, with ``length`` to minimize (in quanta)."""

    def __init__(self, graph: Graph, ii: int, stages: int):
        if ii < 1:
            raise ValueError(f"II must be positive, got {ii}")
        self.source = graph
        self.quantum = q = time_quantum(graph, ii)
        if q > 1:
            graph = graph.scaled({c: c // q for c in graph.cycle_costs()})
        self.graph, self.II, self.stages = graph, ii // q, stages
        m = self.model = cp_model.CpModel()
        II, top = self.II, stages * self.II
        self.start = {n: m.new_int_var(0, max(0, top - op.duration), f"s[{n}]") for n, op in graph.ops.items()}
        m.add_min_equality(m.new_constant(0), list(self.start.values()))
        self.length = m.new_int_var(1, top, "L")
        for n, op in graph.ops.items():
            m.add(self.length >= self.start[n] + op.duration)
        for e in graph.edges:
            delay = exclusive_delay(graph, e.src, e.dst, e.delay)
            m.add(self.start[e.dst] + e.distance * II >= self.start[e.src] + delay)
        for unit in graph.units:
            pieces = [(n, o, c) for n in graph.ops for o, c in graph.ops[n].spans(unit)]
            for i, (a, oa, ca) in enumerate(pieces):
                for b, ob, cb in pieces[i + 1:]:
                    if a == b:
                        if not _apart(oa, ca, ob, cb, II):   # one op's own pieces overlap modulo II
                            m.add_bool_or([])
                        continue
                    if ca + cb > II:
                        m.add_bool_or([])
                        continue
                    sa, sb = self.start[a] + oa, self.start[b] + ob
                    # b's copy K IIs on starts after a's piece ends and ends before a's next copy starts
                    lo, hi = -stages - 2, stages + 2
                    k = m.new_int_var(lo, hi, f"height[{unit},{a},{b}]")
                    m.add(sb + k * II >= sa + ca)
                    m.add(sa + II >= sb + k * II + cb)
            if any(c > II for _, _, c in pieces):
                m.add_bool_or([])


def _apart(oa: int, ca: int, ob: int, cb: int, ii: int) -> bool:
    """Whether fixed pieces [oa, oa+ca) and [ob, ob+cb) are apart modulo ii."""
    if ca + cb > ii:
        return False
    d = (ob - oa) % ii
    return d >= ca and ii - d >= cb
