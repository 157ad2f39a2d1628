"""The generated code is checked against its Barrier IR: every synchronisation op of the IR (waits, arrives,
TMA loads, wgmma issues and waits, named barriers, register reallocation, proxy fences, stores) appears once
as an `# aref-ir[group#index]` tag, inside the role function that group runs, in the IR's order."""
import ast
import re

import pytest

from aref.backend.cute import generate_source
from aref.ir import OpKind
from tests.backend.conftest import barrier_ir

TAGGED = {OpKind.MBAR_WAIT, OpKind.MBAR_ARRIVE, OpKind.MBAR_EXPECT_TX, OpKind.TMA_LOAD, OpKind.MMA_ASYNC,
          OpKind.MMA_WAIT, OpKind.NAMED_BAR_SYNC, OpKind.NAMED_BAR_ARRIVE, OpKind.SETMAXNREG,
          OpKind.FENCE_PROXY_ASYNC, OpKind.SLOT_STORE, OpKind.STORE}
TAG = re.compile(r"# aref-ir\[([^\]]*)\] (\S+(?: = \S+)?)")


def expected(ws, tagged=TAGGED):
    """group name -> [(op index, op kind)] of the IR's tagged ops, in program order."""
    return {gp.group.name: [(i, op.kind.value) for i, op in enumerate(gp.all_ops()) if op.kind in tagged]
            for gp in ws.groups}


def found(source):
    """group name -> [(op index, op kind, function)] from the tags, in source order."""
    tree = ast.parse(source)
    func_of_line = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for line in range(node.lineno, node.end_lineno + 1):
                func_of_line[line] = node.name
    out = {}
    for lineno, line in enumerate(source.splitlines(), 1):
        m = TAG.search(line)
        if not m:
            continue
        kind = m.group(2).split(" = ")[-1]
        for ref in m.group(1).split():
            group, index = ref.split("#")
            out.setdefault(group, []).append((int(index), kind, func_of_line.get(lineno)))
    return out


def dispatch(source):
    """group name -> the function its warp-group branch of the kernel calls."""
    return {m.group(2): m.group(3) for m in re.finditer(r"if warp_group == (\d+):  # (\S+)\n\s+(\w+)\(", source)}


def check(ws, source, tagged=TAGGED, dispatch=dispatch):
    """Problems of `source` against the IR: `tagged` op kinds, `dispatch` (source -> group -> called function)."""
    problems = []
    want, got, calls = expected(ws, tagged), found(source), dispatch(source)
    for group, ops in want.items():
        tags = got.get(group, [])
        if [(i, k) for i, k, _ in tags] != ops:
            problems.append(f"{group}: tags {[(i, k) for i, k, _ in tags]} != IR {ops}")
        wrong = {f for _, _, f in tags if f != calls.get(group)}
        if wrong:
            problems.append(f"{group}: tags in {wrong}, but its branch calls {calls.get(group)}")
    return problems


CASES = [("gemm", "heuristic", "plain"), ("gemm", "heuristic", "cooperative"),
         ("dual_gemm", "heuristic", "cooperative"), ("gemm_reduce", "heuristic", "cooperative"),
         ("attention_fwd", "heuristic", "pingpong")]


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_tags_match_the_barrier_ir(case):
    ws = barrier_ir(*case)
    source = generate_source(ws)
    assert check(ws, source) == []


def test_checker_catches_a_missing_reordered_or_misplaced_op():
    ws = barrier_ir("attention_fwd", "heuristic", "pingpong")
    source = generate_source(ws)
    lines = source.splitlines()
    tag_lines = [i for i, line in enumerate(lines) if "# aref-ir[" in line and "mbarrier_wait" in line]
    dropped = "\n".join(lines[:tag_lines[3]] + lines[tag_lines[3] + 1:])
    assert any("!= IR" in p for p in check(ws, dropped))
    swapped = lines[:]
    a, b = tag_lines[4], tag_lines[5]
    swapped[a], swapped[b] = swapped[b], swapped[a]
    assert any("!= IR" in p for p in check(ws, "\n".join(swapped)))
    moved = source.replace("# aref-ir[producer#", "# aref-ir[consumer0#", 1)
    assert check(ws, moved)


def test_shared_role_function_carries_both_groups_tags():
    ws = barrier_ir("attention_fwd", "heuristic", "pingpong")
    source = generate_source(ws)
    calls = dispatch(source)
    assert calls["consumer0"] == calls["consumer1"] == "consumer"
    assert "# aref-ir[consumer0#" in source and "consumer1#" in source
    # ping-pong: the second consumer grants the first turn, the first takes the balancing last one
    assert "if cutlass.const_expr(GROUP == 2):  # only consumer1" in source
    assert "if cutlass.const_expr(GROUP == 1):  # only consumer0" in source
