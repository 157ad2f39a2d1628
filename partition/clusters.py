"""The solver graph's CUDA-core nodes (`partition.optimal.extract_graph`): which ops a node fuses, and when
its group takes each unit while it runs.

`acyclic_clusters` keeps a fused node off a dependence cycle of one iteration; `reservation_table` lays out
a node's ops one after another (a modulo reservation table, `solve.Op.segments`).
"""
from __future__ import annotations

from aref.ir import Op
from aref.target.machine import op_cost
from partition import streams


def acyclic_clusters(clusters: dict, body: list[Op], sources) -> dict:
    """Connected CUDA-core work fused into one node must not both feed and read another node of the same
    iteration (`t = a * 2; s = mma(t, b); out = s + t`: t and out are connected through t, but the MMA sits
    between them): the node would wait for itself, a dependence cycle of distance 0 that no schedule meets.
    Such a cluster splits by depth — the count of non-CUDA-core work (MMAs, loads) on the longest path to
    each op —, which no path through other work keeps equal; a part still on a cycle splits into single ops
    (the program's own dependences are acyclic)."""
    import networkx as nx
    member = {o: root for root, ops in clusters.items() for o in ops}
    preds = {op: [src for v in op.operands for src, d in sources(v) if d == 0 and src in body] for op in body}
    depth: dict[Op, int] = {}
    for op in body:                                     # program order is a topological order
        depth[op] = max((depth.get(p, 0) + (p not in member) for p in preds[op]), default=0)

    def cyclic(cl: dict) -> set:
        owner = {o: root for root, ops in cl.items() for o in ops}
        dag = nx.DiGraph()
        for op in body:
            for p in preds[op]:
                a, b = owner.get(p, p), owner.get(op, op)
                if a is not b:
                    dag.add_edge(id(a), id(b))
        return {n for comp in nx.strongly_connected_components(dag) if len(comp) > 1 for n in comp}

    on_cycle = cyclic(clusters)
    if not on_cycle:
        return clusters
    out: dict[Op, list[Op]] = {}
    for root, ops in clusters.items():
        if id(root) not in on_cycle:
            out[root] = ops
            continue
        by_depth: dict[int, list[Op]] = {}
        for o in ops:
            by_depth.setdefault(depth[o], []).append(o)
        for part in by_depth.values():
            out[part[0]] = part
    still = cyclic(out)
    return {k: v for k, v in out.items() if id(k) not in still} | {o: [o] for k, v in out.items()
                                                                  if id(k) in still for o in v}


def reservation_table(ops: list[Op], m, units: dict, loaded, stored) -> dict[str, list[tuple[int, int]]]:
    """When a CUDA-core cluster's group takes each unit, from the node's start: its ops run one after another
    (`streams.op_stream_cycles` each), a tile read from tensor memory is loaded (tcgen05.ld) just before its
    first reader and a tile for an MMA stored (tcgen05.st) just after its producer, as the timing model runs
    them (`aref.sim.program`). {unit: [(offset, cycles), ...]} in order, pieces on one unit joined where
    they touch."""
    table: dict[str, list[tuple[int, int]]] = {}
    at = 0

    def take(unit: str, cycles: int) -> None:
        pieces = table.setdefault(unit, [])
        if pieces and pieces[-1][0] + pieces[-1][1] == at:
            pieces[-1] = (pieces[-1][0], pieces[-1][1] + cycles)
        else:
            pieces.append((at, cycles))

    pending = {id(v): v for v in loaded}
    out = {id(r) for r in stored}
    for o in ops:
        for v in o.operands:
            if id(v) in pending:
                cycles = pending.pop(id(v)).type.nbytes // m.tmem_bytes_per_clk
                if cycles:
                    take("tmem_ld", cycles)
                    at += cycles
        unit, cycles = op_cost(o, m)
        if unit in units and cycles:
            take(unit, cycles)
        at += streams.op_stream_cycles(o, m)
        for r in o.results:
            cycles = r.type.nbytes // m.tmem_bytes_per_clk if id(r) in out else 0
            if cycles:
                take("tmem_st", cycles)
                at += cycles
    return table
