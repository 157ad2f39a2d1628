"""Frontend: a decorated Python function → Tile IR.

Two steps, as in Triton's frontend but with tracing for everything but the loop:
1. `parse` reads the function's AST, rejects unsupported Python at the user's line (while, try, a second
   loop, break inside the loop, closures over tensors...), and rewrites the single `aref.range` loop so its
   loop-carried variables are explicit (see `aref.lang.loops`). Python `for` loops (unrolled by running
   them) iterate through `aref.lang.loops.unrolled`, so the tracer knows which ops each copies per trip and
   refuses one that does the pipelined loop's work (loads per trip over a shape-derived count, channels).
2. `trace` runs the rewritten function on proxies (`aref.lang`), which records the ops with exact source
   locations, then infers the grid and verifies the result.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
import textwrap
from dataclasses import dataclass

from aref import lang
from aref.lang import loops
from aref.errors import ArefError, ArefSyntaxError, ArefTypeError, ChannelError, CompilerBugError, SrcInfo
from aref.ir import ChannelAttrs, Kernel, Loop, Param, TensorType, Value
from aref.lang.trace import Tracer, tracing

RT = "__aref_rt__"


@dataclass
class Parsed:
    """A kernel function's checked and rewritten source, ready to trace."""

    name: str
    filename: str
    code: object            # compiled module code defining the rewritten function
    tensor_params: list[str]
    constexpr_params: dict[str, object]   # name -> default (inspect.Parameter.empty if required)
    loop_line: int | None
    def_line: int = 0       # the `def` line (co_firstlineno is the first decorator's)


def _loc(filename: str, node: ast.AST) -> SrcInfo:
    return SrcInfo(filename, getattr(node, "lineno", 0), getattr(node, "col_offset", 0),
                   getattr(node, "end_col_offset", 0) if getattr(node, "end_lineno", None) == getattr(
                       node, "lineno", None) else 0)


def _resolve(node: ast.AST, env: dict):
    """The object a dotted name like `aref.range` refers to in the function's globals, or None."""
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        return getattr(builtins, node.id, None)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, env)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def _is_aref_loop(node: ast.AST, env: dict) -> bool:
    return (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
            and _resolve(node.iter.func, env) is lang.range)


def _assigned_names(stmts) -> list[str]:
    """Names bound by statements (not inside nested functions or comprehensions), in order."""
    out: list[str] = []

    class V(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, ast.Store) and node.id not in out:
                out.append(node.id)

        def visit_Subscript(self, node):
            # `l[i] = x` rebinds an element of the list `l`: carry `l` like a reassigned name.
            root = node
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if isinstance(node.ctx, ast.Store) and isinstance(root, ast.Name) and root.id not in out:
                out.append(root.id)
            self.generic_visit(node)

        def visit_FunctionDef(self, node):
            if node.name not in out:
                out.append(node.name)

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Lambda(self, node):
            pass

        def visit_ListComp(self, node):
            pass

        visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp

    for s in stmts:
        V().visit(s)
    return out


_UNSUPPORTED = {
    ast.While: ("`while` loops are not supported", "use the single `for k in aref.range(n):` loop"),
    ast.Try: ("`try` blocks are not supported in kernels", None),
    ast.With: ("`with` blocks are not supported in kernels", None),
    ast.AsyncFor: ("async code is not supported in kernels", None),
    ast.AsyncWith: ("async code is not supported in kernels", None),
    ast.Await: ("async code is not supported in kernels", None),
    ast.Yield: ("generators are not supported in kernels", None),
    ast.YieldFrom: ("generators are not supported in kernels", None),
    ast.Global: ("`global` is not supported in kernels", None),
    ast.Nonlocal: ("`nonlocal` is not supported in kernels", None),
}


class _Checker(ast.NodeVisitor):
    def __init__(self, filename: str, env: dict):
        self.filename = filename
        self.env = env
        self.loops: list[ast.For] = []
        self.depth = 0          # nesting of compound statements around the current node
        self.in_loop = False

    def fail(self, node, msg, hint=None):
        raise ArefSyntaxError(msg, _loc(self.filename, node), hint)

    def generic_visit(self, node):
        for kind, (msg, hint) in _UNSUPPORTED.items():
            if isinstance(node, kind):
                self.fail(node, msg, hint)
        if self.in_loop and isinstance(node, (ast.Break, ast.Continue)):
            self.fail(node, f"`{type(node).__name__.lower()}` inside the aref.range loop is not supported",
                      "the loop always runs its full trip count; mask with aref.where instead")
        if self.in_loop and isinstance(node, ast.Return):
            self.fail(node, "`return` inside the aref.range loop is not supported",
                      "a kernel returns nothing: store results with aref.store (after the loop); define helper "
                      "functions outside the kernel")
        super().generic_visit(node)

    def visit_For(self, node):
        if _is_aref_loop(node, self.env):
            if self.loops:
                self.fail(node, f"a kernel has a single aref.range loop; the first is on line "
                                f"{self.loops[0].lineno}", "fuse the loops, or write a second kernel")
            if self.depth > 0:
                self.fail(node, "the aref.range loop must be a top-level statement of the kernel, not nested "
                                "in another statement")
            if node.orelse:
                self.fail(node.orelse[0], "`for ... else` is not supported on the aref.range loop")
            if not isinstance(node.target, ast.Name):
                self.fail(node.target, "the aref.range loop variable must be a single name")
            self.loops.append(node)
            self.in_loop = True
            for s in node.body:
                self.visit(s)
            self.in_loop = False
            return
        self._compound(node)

    def _compound(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_If = visit_With = _compound

    def visit_FunctionDef(self, node):
        self._compound(node)


def _reads_shape(expr: ast.AST, tensors: set[str], derived: set[str]) -> bool:
    """Whether `expr` reads a tensor parameter's size (`A.shape[1]`, `A.numel()`) or a name in `derived`."""
    return any(isinstance(x, ast.Attribute) and x.attr in ("shape", "numel") and isinstance(x.value, ast.Name)
               and x.value.id in tensors or isinstance(x, ast.Name) and x.id in derived for x in ast.walk(expr))


def _shape_derived(fdef: ast.FunctionDef, tensor_params: list[str]) -> set[str]:
    """The names assigned from expressions that read a tensor's size or such names (`K = A.shape[1]`,
    `n = K // BK`): values that grow with the input's size."""
    tensors, derived = set(tensor_params), set()
    assigns = [n for n in ast.walk(fdef) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               and n.value is not None]
    changed = True
    while changed:
        changed = False
        for node in assigns:
            if not _reads_shape(node.value, tensors, derived):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for x in ast.walk(t):
                    if isinstance(x, ast.Name) and x.id not in derived:
                        derived.add(x.id)
                        changed = True
    return derived


class _Rewriter(ast.NodeTransformer):
    """Names assigned values, the aref loop made explicit, and Python loops run through `unrolled` (the
    tracer then knows which ops a Python loop copies per trip)."""

    def __init__(self, env: dict, filename: str = "<unknown>", tensors: frozenset = frozenset(),
                 derived: frozenset = frozenset(), kernel_loop: int | None = None):
        self.env = env
        self.filename = filename
        self.tensors = tensors            # the tensor parameters
        self.derived = derived            # names whose values come from tensor shapes (`_shape_derived`)
        self.kernel_loop = kernel_loop    # the line of the kernel's aref.range loop

    def _unrolled(self, node: ast.AST, target: ast.AST, iter_: ast.expr) -> ast.expr:
        """`iter_` wrapped in the runtime's `unrolled(...)`, located at the loop header `node`."""
        end = iter_.end_col_offset if iter_.end_lineno == node.lineno else 0
        shape_dependent = _reads_shape(iter_, self.tensors, self.derived)
        is_range = isinstance(iter_, ast.Call) and _resolve(iter_.func, self.env) is builtins.range \
            and len(iter_.args) == 1 and not iter_.keywords
        var = target.id if isinstance(target, ast.Name) else "k"
        suggestion = f"for {var} in aref.range({ast.unparse(iter_.args[0]) if is_range else 'n'}):"
        args = [iter_] + [ast.Constant(x) for x in (self.filename, node.lineno, node.col_offset, end,
                                                    shape_dependent, suggestion, self.kernel_loop)]
        call = ast.Call(ast.Attribute(ast.Name(RT, ast.Load()), "unrolled", ast.Load()), args, [])
        return ast.copy_location(call, iter_)

    def visit_For(self, node):
        self.generic_visit(node)
        node.iter = self._unrolled(node, node.target, node.iter)
        return node

    def visit_comprehension(self, node):
        self.generic_visit(node)
        node.iter = self._unrolled(node.iter, node.target, node.iter)
        return node

    def visit_Assign(self, node):
        self.generic_visit(node)
        if len(node.targets) == 1:
            t = node.targets[0]
            names = None
            if isinstance(t, ast.Name):
                names = ast.Constant(t.id)
            elif isinstance(t, ast.Tuple) and all(isinstance(e, ast.Name) for e in t.elts):
                names = ast.Tuple([ast.Constant(e.id) for e in t.elts], ast.Load())
            if names is not None:
                node.value = ast.Call(ast.Attribute(ast.Name(RT, ast.Load()), "named", ast.Load()),
                                      [node.value, names], [])
        return node

    def rewrite_loop(self, node: ast.For) -> list[ast.stmt]:
        body = [self.visit(s) for s in node.body]
        names = [n for n in _assigned_names(node.body) if n != node.target.id]
        src = [f"__aref_h = {RT}.loop_begin(__aref_iter, {tuple(names)!r}, locals(), {node.target.id!r})",
               f"{node.target.id} = __aref_h.iv"]
        src += [f"if {n!r} in __aref_h.entry: {n} = __aref_h.entry[{n!r}]" for n in names]
        head = ast.parse("\n".join(src)).body
        iter_expr = self.visit(node.iter)
        head[0].value.args[0] = iter_expr
        keep = {id(n) for n in ast.walk(iter_expr)}
        tail_src = [f"__aref_r = {RT}.loop_end(__aref_h, locals())"]
        tail_src += [f"{n} = __aref_r[{n!r}]" for n in names]
        tail_src += [f"{node.target.id} = {RT}.Poison({node.target.id!r}, __aref_h.loc, index=True, "
                     f"bound={_bound_text(node.iter)!r})"]
        tail = ast.parse("\n".join(tail_src)).body
        for stmt in head + tail:
            for sub in ast.walk(stmt):
                if hasattr(sub, "lineno") and id(sub) not in keep:
                    ast.copy_location(sub, node)
                    sub.end_lineno, sub.end_col_offset = node.lineno, node.col_offset + 3
        return head + body + tail


def _bound_text(call: ast.Call) -> str:
    """The source text of the bound in `aref.range(<bound>)` for messages (parenthesized unless it is a name
    or a number), or "n"."""
    if len(call.args) != 1 or call.keywords:
        return "n"
    text = ast.unparse(call.args[0])
    if len(text) > 60:
        return "n"
    return text if text.isidentifier() or text.isdigit() else f"({text})"


def parse(fn) -> Parsed:
    """Check and rewrite a kernel function; errors name the user's line."""
    filename = inspect.getsourcefile(fn) or "<unknown>"
    lines, first = inspect.getsourcelines(fn)
    raw = "".join(lines)
    src = textwrap.dedent(raw)
    indent = len(lines[0]) - len(lines[0].lstrip())
    tree = ast.parse(src)
    ast.increment_lineno(tree, first - 1)
    if indent:
        for node in ast.walk(tree):
            if hasattr(node, "col_offset"):
                node.col_offset += indent
                if getattr(node, "end_col_offset", None) is not None:
                    node.end_col_offset += indent
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise ArefSyntaxError("@aref_kernel decorates a plain function", SrcInfo(filename, first))
    fdef.decorator_list = []
    env = dict(fn.__globals__)
    closure = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    env.update(closure)

    sig = inspect.signature(fn)
    tensor_params, constexprs = [], {}
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            tensor_params.append(p.name)
        elif p.kind is p.KEYWORD_ONLY:
            constexprs[p.name] = p.default
        else:
            raise ArefSyntaxError(f"*{p.name} parameters are not supported; list the tensors explicitly",
                                  _loc(filename, fdef),
                                  hint="positional parameters are tensors, keyword-only ones (after `*`) "
                                       "compile-time constants: def k(A, B, C, *, BM: int = 128)")

    _check_captured_tensors(fdef, env, filename, set(sig.parameters))
    checker = _Checker(filename, env)
    for stmt in fdef.body:
        checker.visit(stmt)

    rewriter = _Rewriter(env, filename, frozenset(tensor_params), frozenset(_shape_derived(fdef, tensor_params)),
                         checker.loops[0].lineno if checker.loops else None)
    new_body = []
    for stmt in fdef.body:
        if _is_aref_loop(stmt, env):
            new_body.extend(rewriter.rewrite_loop(stmt))
        else:
            new_body.append(rewriter.visit(stmt))
    fdef.body = new_body
    module = ast.Module([fdef], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, filename, "exec")
    return Parsed(fdef.name, filename, code, tensor_params, constexprs,
                  checker.loops[0].lineno if checker.loops else None, fdef.lineno)


def _check_captured_tensors(fdef, env, filename, params):
    import torch
    local = set(_assigned_names(fdef.body)) | params
    for node in ast.walk(fdef):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            if isinstance(env.get(node.id), torch.Tensor):
                raise ArefSyntaxError(
                    f"the kernel reads tensor '{node.id}' from an enclosing scope", _loc(filename, node),
                    hint=f"pass '{node.id}' as a kernel argument")


def _code_env(fn) -> dict:
    env = dict(fn.__globals__)
    env.update(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    env[RT] = loops
    return env


def trace(fn, parsed: Parsed, tensors: dict[str, TensorType], constexprs: dict[str, object],
          grid=None) -> Kernel:
    """Run the rewritten function on proxies; return the verified Tile IR of this specialization."""
    from aref.verify import verify
    env = _code_env(fn)
    exec(parsed.code, env)
    traced = env[parsed.name]
    # the kernel's own name means the decorated kernel again (a call of it is refused with a clear error),
    # not the rewritten function that would recurse without end
    if parsed.name in fn.__globals__:
        env[parsed.name] = fn.__globals__[parsed.name]
    tracer = Tracer(parsed.name)
    params = tuple(Param(n, Value(tensors[n], n)) for n in parsed.tensor_params)
    proxies = [lang.TensorArg(p.name, p.value) for p in params]
    with tracing(tracer):
        ret = traced(*proxies, **constexprs)
        if ret is not None:
            raise ArefSyntaxError("a kernel returns nothing; write results with aref.store",
                                  SrcInfo(parsed.filename, parsed.loop_line or 0),
                                  hint="replace `return x` by aref.store(OUT, coords, x)")
        _finish_channels(tracer)
    loop = tracer.loop
    if loop is not None:
        _drop_dead_carries(tracer, loop)
    kernel_loc = SrcInfo(parsed.filename, fn.__code__.co_firstlineno)
    if not tracer.stores:
        raise ArefSyntaxError(f"kernel @{parsed.name} stores nothing, so it would compute nothing",
                              SrcInfo(parsed.filename, parsed.def_line or kernel_loc.line),
                              hint="write its results to an output tensor with aref.store(T, coords, tile)")
    grid_shape = _grid(tracer, grid, kernel_loc)
    kernel = Kernel(parsed.name, params, dict(constexprs), grid_shape, tracer.pre, loop, tracer.post,
                    kernel_loc)
    try:
        verify(kernel)
    except ChannelError:
        raise              # the channel protocol is checked here, on the whole loop: the user's to fix
    except ArefError as err:
        # everything else the tracer checked as it built each op: a rejection here is the frontend's bug
        raise CompilerBugError(f"traced IR that the verifier rejects: {err.message}", err.loc,
                               pass_name="the frontend (tracing)") from err
    return kernel


def _finish_channels(tracer: Tracer) -> None:
    for i, (ch, op) in enumerate(tracer.channels):
        if ch.name is None:
            ch.name = ch.value.name = f"aref{i}"
            op.attrs = ChannelAttrs(ch.name, op.attrs.depth, op.attrs.user)
        if ch.payload is None:
            raise ArefError(f"channel '{ch.name}' is created but never used", ch.loc,
                            hint="remove it, or put/get/consumed it in the loop")


def _drop_dead_carries(tracer: Tracer, loop: Loop) -> None:
    """Keep only carries that are read in the body, used after the loop, or feed a kept carry's yield."""
    body_uses = {id(v) for op in loop.body.ops for v in op.operands}
    post_uses = {id(v) for op in tracer.post.ops for v in op.operands}
    n = len(loop.carried)
    live = {i for i in range(n) if id(loop.carried[i]) in body_uses or id(loop.results[i]) in post_uses}
    changed = True
    while changed:  # `a, b = b, a`: a carry read only by another live carry's yield is live too
        changed = False
        for j in list(live):
            for i in range(n):
                if i not in live and loop.yields[j] is loop.carried[i]:
                    live.add(i)
                    changed = True
    keep = sorted(live)
    loop.inits = tuple(loop.inits[i] for i in keep)
    loop.carried = tuple(loop.carried[i] for i in keep)
    loop.yields = tuple(loop.yields[i] for i in keep)
    loop.results = tuple(loop.results[i] for i in keep)


def _grid(tracer: Tracer, grid, loc) -> tuple[int, ...]:
    """The launch grid: from the decorator's `grid=`, else inferred from stores at program-id coordinates."""
    axes = sorted(tracer.program_ids)
    if grid is not None:
        if not isinstance(grid, (tuple, list)):
            raise ArefTypeError(f"grid must be a tuple of CTA counts, got {grid!r}", loc,
                                hint="e.g. grid=(4, 2), or grid=lambda A, BM, **_: (A.shape[0] // BM,)")
        g = tuple(grid)
        if len(g) < (max(axes) + 1 if axes else 0) or not all(isinstance(x, int) and x >= 0 for x in g):
            raise ArefTypeError(f"grid {g!r} does not cover program_id axes {axes}", loc,
                                hint=f"give grid= non-negative integers, one per axis up to {max(axes) if axes else 0}")
        return g
    pid_axis = {id(v): a for a, v in tracer.program_ids.items()}
    found: dict[int, tuple[int, SrcInfo]] = {}
    for op, coords in tracer.stores:
        tshape = op.operands[0].type.shape
        tile = op.attrs.tile_shape
        lead = len(tshape) - len(tile)
        for i, c in enumerate(coords):
            if isinstance(c, lang.Scalar) and id(c.value) in pid_axis:
                a = pid_axis[id(c.value)]
                size = tile[i - lead] if i >= lead else 1
                n = math.ceil(tshape[i] / size)
                if a in found and found[a][0] != n:
                    raise ArefTypeError(
                        f"program_id({a}) would need {found[a][0]} CTAs (line {found[a][1].line}) but {n} here",
                        op.loc, hint="pass grid= to @aref_kernel")
                found.setdefault(a, (n, op.loc))
    missing = [a for a in axes if a not in found]
    if missing:
        raise ArefTypeError(
            f"cannot infer the grid size of program_id({missing[0]}): no store uses it directly as a "
            f"coordinate", loc, hint="pass grid=lambda **args: (...) to @aref_kernel")
    return tuple(found[a][0] for a in range(max(axes) + 1)) if axes else (1,)


def tensor_type(name: str, t, loc: SrcInfo | None = None) -> TensorType:
    """The TensorType of a torch tensor argument (checks its dtype is one the language supports)."""
    from aref.ir.dtypes import from_torch
    return TensorType(tuple(int(s) for s in t.shape), from_torch(t.dtype, f"argument '{name}'", loc))
