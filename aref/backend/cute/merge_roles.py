"""Roles whose generated code is the same up to constants share one `@cute.jit` function: `merge_roles`
aligns two roles' lines (difflib over their tokens, IR tags normalized) and turns the differing tokens into
parameters, or says they differ in more than constants (None)."""
from __future__ import annotations

import difflib
import re

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|\S")
_TAG = re.compile(r"^(\s*)# aref-ir\[([^\]]*)\](.*)$")


def merge_roles(f: dict, g, em, lines: list[str]) -> dict | None:
    """Share role function `f` with group `g` when their code differs only in numbers, kernel-scope names
    and whole statements present in one group alone (ping-pong's extra first / last turn).

    Numbers become `cutlass.Constexpr` parameters, names become parameters, and one-group statements are
    guarded by `if cutlass.const_expr(GROUP == n)`; anything else keeps separate functions.
    """
    if f["groups"][0].role != g.role or len(f["groups"]) > 1 and f.get("guarded"):
        return None
    names = set(f["args"]) | set(em.args)
    local = (f["locals"] | em.names.used) - names - {"cute", "cutlass", "aref", "warpgroup", "cpasync"}

    def norm(line: str) -> str:
        m = _TAG.match(line)
        if m:      # the op, without value names and ids (those differ between groups)
            return m.group(1) + "#" + re.sub(r"\d+", "0", re.sub(r"%[\w.^]+", "%", m.group(3)))
        return " ".join("@" if t in names else "$" if t in local else "0" if t.isdigit() else t
                        for t in _TOKEN.findall(line)) \
            + f"|{len(line) - len(line.lstrip())}"

    a, b = f["lines"], lines
    ops = difflib.SequenceMatcher(None, [norm(x) for x in a], [norm(y) for y in b], autojunk=False).get_opcodes()
    out: list[str] = []
    numbers = dict(f.get("numbers", {}))
    renames = {p: dict(v) for p, v in f["renames"].items()}
    local_map: dict[str, str] = {}               # g's local name for each of f's (a consistent renaming)
    guarded = False
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            for x, y in zip(a[i1:i2], b[j1:j2]):
                merged = _merge_line(x, y, f, g, em, numbers, renames, local_map)
                if merged is None:
                    return None
                out.append(merged)
        elif tag in ("delete", "insert"):
            block = a[i1:i2] if tag == "delete" else b[j1:j2]
            if not _statements(block):
                return None
            who = [x.index for x in f["groups"]] if tag == "delete" else [g.index]
            cond = f"GROUP == {who[0]}" if len(who) == 1 else f"GROUP in {tuple(who)}"
            indent = block[0][:len(block[0]) - len(block[0].lstrip())]
            out.append(f"{indent}if cutlass.const_expr({cond}):  # only {', '.join(_group_names(f, g, who))}")
            out += ["    " + line for line in block]
            guarded = True
            if tag == "insert":
                for t in {t for line in block for t in _TOKEN.findall(line)} & set(em.args) - set(f["args"]):
                    f["args"].append(t)
        else:
            return None
    f["groups"].append(g)
    f["lines"], f["numbers"], f["renames"] = out, numbers, renames
    f["guarded"] = f.get("guarded") or guarded
    return f


def _group_names(f, g, who):
    by = {x.index: x.gp.group.name for x in f["groups"] + [g]}
    return [by[i] for i in who]


def _statements(block: list[str]) -> bool:
    """Whole simple statements at one indentation (what a one-group guard may wrap)."""
    if not block:
        return False
    indent = len(block[0]) - len(block[0].lstrip())
    return all(len(x) - len(x.lstrip()) == indent and not x.rstrip().endswith(":") for x in block)


def _merge_line(x: str, y: str, f: dict, g, em, numbers: dict, renames: dict, local_map: dict) -> str | None:
    mx, my = _TAG.match(x), _TAG.match(y)
    if mx and my:
        return f"{mx.group(1)}# aref-ir[{mx.group(2)} {my.group(2)}]{mx.group(3)}"
    if x == y:
        return x
    tx, ty = _TOKEN.findall(x), _TOKEN.findall(y)
    if len(tx) != len(ty):
        return None
    line = x
    for ti in reversed(range(len(tx))):
        p, q = tx[ti], ty[ti]
        if p == q:
            continue
        if p.isdigit() and q.isdigit():
            pname = next((c for c, pq in numbers.items() if pq == (p, q)), None)
            if pname is None:
                pname = _param_name(x, ti, numbers)
                numbers[pname] = (p, q)
            line = _replace_token(line, ti, pname)
        elif p in f["args"] and q in em.args:
            if renames.get(p, {}).get(g.index, q) != q:
                return None
            renames.setdefault(p, {})[g.index] = q
        elif x.lstrip().startswith("#"):
            continue
        elif p.isidentifier() and q.isidentifier() and p not in f["args"] and q not in em.args:
            if local_map.setdefault(p, q) != q or list(local_map.values()).count(q) > 1:
                return None
        else:
            return None
    return line


def _param_name(line: str, index: int, taken: dict) -> str:
    """A readable name for a per-group constant from where it appears."""
    toks = _TOKEN.findall(line)
    if "row_block" in line:
        base = "ROW_BLOCK"
    elif "WARP_GROUP_THREADS" in line or "store_tile" in line:
        base = "GROUP_BARRIER"
    elif "cute.arch.barrier(" in line:
        base = "TURN"
    elif "cute.arch.barrier_arrive(" in line:
        base = "NEXT_TURN"
    elif index >= 2 and toks[index - 1] == "=" and toks[index - 2].isidentifier():
        base = toks[index - 2].upper()
    elif "tiles[" in line:
        base = "TILE_OFFSET"
    else:
        base = "K"
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    return name


def rename_identifier(line: str, old: str, new: str) -> str:
    if line.lstrip().startswith("#"):
        return line
    return re.sub(rf"\b{re.escape(old)}\b", new, line)


def _replace_token(line: str, index: int, new: str) -> str:
    for i, m in enumerate(_TOKEN.finditer(line)):
        if i == index:
            return line[:m.start()] + new + line[m.end():]
    return line
