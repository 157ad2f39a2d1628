"""Reservation tables: an op that takes a unit in several pieces (`Op.segments`), checked and rounded."""

from __future__ import annotations


def pieces(name: str, usage: dict[str, int], offset: dict[str, int],
           segments: dict[str, list] | None) -> dict[str, list[tuple[int, int]]]:
    """Op ``name``'s ``segments`` as {unit: [(offset, cycles), ...]}, checked: each unit one it uses without
    an ``offset``, the pieces in order and apart (offsets >= 0, cycles > 0), adding up to its usage."""
    from .graph_items import GraphError, _positive_int
    out = {u: [(o, c) for o, c in ps] for u, ps in (segments or {}).items()}
    for unit, ps in out.items():
        what = f"segments of unit {unit!r} in op {name!r}"
        if unit not in usage or unit in offset:
            raise GraphError(f"op {name!r} has segments for unit {unit!r}, which it does not use or "
                             "also offsets (give one or the other)")
        end = 0
        for o, c in ps:
            _positive_int(o, f"offset in the {what}", allow_zero=True)
            _positive_int(c, f"cycles in the {what}")
            if o < end:
                raise GraphError(f"{what} overlap or are out of order: {ps}")
            end = o + c
        if sum(c for _, c in ps) != usage[unit]:
            raise GraphError(f"{what} add up to {sum(c for _, c in ps)} cycles, not its usage {usage[unit]}")
    return out


def merged(pieces: list[tuple[int, int]]) -> list[list[int]]:
    """(offset, cycles) pieces in order with overlapping or touching ones joined (covering each)."""
    out: list[list[int]] = []
    for o, c in sorted(pieces):
        if out and o <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], o + c - out[-1][0])
        else:
            out.append([o, c])
    return out
