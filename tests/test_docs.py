"""The documentation stands on its own in a clone: every relative link and every repository path or module named
in README.md and docs/*.md exists, nothing points outside the repository, the README's set-up commands are the
ones CI runs, and docs/ops.md is what the op registry generates."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("aref", "partition", "pipeline", "solve")
# top-level folders and files of the repository a path in the text may start with
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith(".") or p.name == ".ci"} - {"aref.egg-info"}

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
# a path inside a code block: starts with a top-level folder of the repository
BLOCK_PATH = re.compile(r"(?<![\w/.~-])((?:aref|bench|tests|docs|examples|partition|pipeline|solve|\.ci)/[\w./<>*-]*\w)")
DOTTED = re.compile(r"^((?:aref|partition|pipeline|solve)(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?$")


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def prose(text: str) -> str:
    """The text without its fenced code blocks."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", prose(page.read_text()), re.M)}


def exists(rel: str) -> bool:
    """Whether the repository path `rel` (relative to the root; `<name>` stands for any name) exists."""
    rel = rel.rstrip("/")
    if "<" in rel or "*" in rel:
        return any(ROOT.glob(re.sub(r"<[^>]*>", "*", rel)))
    return (ROOT / rel).exists()


def named_paths(text: str) -> set[str]:
    """Repository paths named in `text`: whole code spans that look like a path under a top-level folder (or a
    top-level file), and paths written in code blocks."""
    found = set()
    for span in CODE_SPAN.findall(prose(text)):
        span = span.strip()
        if " " in span or span.startswith(("http", "~", "/", "./")):
            continue
        first = span.split("/", 1)[0]
        if ("/" in span and first in TOP) or span in TOP:
            found.add(re.sub(r":\w+$", "", span))          # FILE:KERNEL names the file
    for block in FENCE.findall(text):
        found.update(BLOCK_PATH.findall(block))
    return found


def module_file(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    if path.with_suffix(".py").exists():
        return path.with_suffix(".py")
    return None


def resolve_dotted(name: str) -> str | None:
    """None if the dotted name `aref.x.y` names a module of the repository, or a name a module defines or
    imports; else what is missing."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        source = module_file(parts[:n])
        if source is None:
            continue
        if n == len(parts):
            return None
        attr = parts[n]
        if re.search(rf"\b{re.escape(attr)}\b", source.read_text()):
            return None
        return f"{attr} is not defined in {source.relative_to(ROOT)}"
    return "no such module"


def named_modules(text: str) -> set[str]:
    out = set()
    for span in CODE_SPAN.findall(prose(text)):
        m = DOTTED.match(span.strip())
        if m:
            out.add(m.group(1))
    return out


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_exists(page):
    text = page.read_text()
    missing = []
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z]+:", target):
            continue                                 # http(s), mailto: outside the repository by intent
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or ROOT not in dest.parents and dest != ROOT:
            missing.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            missing.append(f"{target} (no heading with that anchor)")
    assert not missing, f"{page_id(page)}: links to nothing in the repository: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_named_path_exists(page):
    missing = sorted(p for p in named_paths(page.read_text()) if not exists(p))
    assert not missing, f"{page_id(page)} names paths a clone does not have: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_named_module_exists(page):
    wrong = {name: why for name in sorted(named_modules(page.read_text())) if (why := resolve_dotted(name))}
    assert not wrong, f"{page_id(page)} names modules or names that do not exist: {wrong}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_nothing_points_outside_the_clone(page):
    text = page.read_text()
    for outside in ("../shared", "/work/", "DESIGN.md"):
        assert outside not in text, f"{page_id(page)} refers to {outside!r}, which a clone does not have"


def test_the_checker_finds_what_is_missing():
    """The checks above can fail: a made-up path, module, name and anchor are each reported."""
    assert not exists("aref/no_such_module.py") and exists("aref/target/calibration/<arch>.json")
    assert named_paths("see `bench/solver.py` and `aref/examples/gemm.py:gemm`\n```\naref run examples/mlp.py\n```") \
        == {"bench/solver.py", "aref/examples/gemm.py", "examples/mlp.py"}
    assert resolve_dotted("aref.sim.timing") is None and resolve_dotted("aref.compiler.STAGES") is None
    assert resolve_dotted("aref.machine") == "machine is not defined in aref/__init__.py"
    assert resolve_dotted("aref.compiler.NO_SUCH_NAME") is not None
    assert "hopper-sm_90a" in anchors(ROOT / "docs" / "backends.md")


def test_the_readme_is_short_and_starts_with_the_commands_ci_runs():
    """The README's first block is its two set-up commands, and .ci/run runs exactly those."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150, "the README is a front page: the rest belongs in docs/"
    first_block = FENCE.search(readme).group(0).splitlines()[1:-1]
    commands = [line.split("#", 1)[0].strip() for line in first_block]
    assert commands == ['pip install -e ".[test]" && aref demo', "python -m pytest"]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert all(c in ci for c in commands), "the README's commands must be the ones .ci/run runs"


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if f"(docs/{p.name})" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_the_op_table_is_what_the_registry_generates():
    from aref.ops.doc import page
    assert (ROOT / "docs" / "ops.md").read_text() == page(), \
        "docs/ops.md is stale: regenerate it with `python -m aref.ops.doc > docs/ops.md`"
