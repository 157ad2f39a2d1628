"""The compiler's solve memory: one question, one answer per process, never a stale one."""
import solve as S
from solve.memo import forget, solve_once


def _chain(cost: int) -> S.Graph:
    g = S.Graph(units={"tc": 1, "tma": 1})
    g.add_op("load", {"tma": 64}, variable_latency=True)
    g.add_op("mma", {"tc": cost})
    g.add_edge("load", "mma", 64)
    g.add_edge("mma", "mma", cost, 1)
    return g


def test_same_graph_same_answer_without_solving_again():
    forget()
    seen = []
    opts = S.SolveOptions(time_limit=10, progress=seen.append)
    a = solve_once(_chain(128), opts)
    solved = len(seen)
    b = solve_once(_chain(128), S.SolveOptions(time_limit=30, progress=seen.append))
    assert solved > 0 and len(seen) == solved          # proven optimal: reused under another limit, unsolved
    assert (a.status, a.ii, a.schedule, a.assignment) == (b.status, b.ii, b.schedule, b.assignment)
    b.schedule.clear()                                   # a caller's copy: the memory keeps its own
    assert solve_once(_chain(128), opts).schedule == a.schedule


def test_a_different_graph_or_option_is_solved_anew():
    forget()
    a = solve_once(_chain(128), S.SolveOptions(time_limit=10))
    b = solve_once(_chain(256), S.SolveOptions(time_limit=10))
    assert (a.ii, b.ii) == (128, 256)
    seen = []
    solve_once(_chain(128), S.SolveOptions(time_limit=10, objectives=("length",), progress=seen.append))
    assert seen                                          # other objectives: another question
