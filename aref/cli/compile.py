"""`aref compile`: generate CuTe DSL code for a kernel and compile it (no GPU needed)."""
from __future__ import annotations

import json
import os

from rich.console import Console

from aref.cli.common import add_target, command, example_and_inputs, int_at_least, options_of, progress
from aref.search import lower_to
from aref.errors import UsageError


def _compile_args(p):
    add_target(p)
    p.add_argument("--emit", default="ptx", choices=("cute", "ptx", "cubin"),
                   help="what to write: the generated CuTe DSL source, or also its PTX / cubin")
    p.add_argument("--out", default=None, help="output directory (default: ./aref_out/<kernel>)")
    p.add_argument("--persistent", action="store_true",
                   help="one CTA per SM looping over output tiles (static round-robin tile scheduler)")
    p.add_argument("--ctas", type=int_at_least(1), default=None,
                   help="persistent CTAs to launch, ≥ 1 (default: the SMs of an H100, 132, or a B200, 148)")
    p.add_argument("--raster", type=int_at_least(0), default=0,
                   help="walk output tiles in groups of N rows of grid axis 0 (L2-friendly order; 0: none)")
    p.add_argument("--epilogue-overlap", action="store_true",
                   help="with --persistent: overlap one tile's epilogue with the next tile's main loop (sm_90a: "
                        "two consumer copies on alternate tiles; sm_100a: the doubled accumulator)")
    p.add_argument("--cluster", default="1x1", choices=("1x1", "2x1", "1x2"),
                   help="sm_90a: clusters of 2 CTAs along grid axis 0 (2x1) or 1 (1x2) that TMA-multicast the "
                        "tiles both load (1x1: no cluster)")


@command("compile", "generate CuTe DSL code for a kernel and compile it (no GPU needed)", _compile_args)
def cmd_compile(args, console: Console) -> int:
    from aref.backend.cute import compile_barrier
    from aref.target.machine import machine_for
    example, inputs = example_and_inputs(args)
    kernel = example.kernel.specialize(**inputs)
    with progress(args, f"lowering {example.name} for {args.arch} ({args.partition} partition)…"):
        ws = lower_to(kernel, "barrier", options_of(args))
    out_dir = args.out or os.path.join("aref_out", f"{example.name}.{args.arch}.{args.partition}")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot create the output directory ({exc.strerror})",
                         hint="give a directory that exists or can be created") from None
    with progress(args, f"generating CuTe DSL and compiling for {args.arch} (cute.compile, ptxas)…"):
        result = compile_barrier(ws, out_dir=out_dir, emit=args.emit, persistent=args.persistent,
                                 ctas=args.ctas or machine_for(args.arch).sms, raster=args.raster,
                                 epilogue_overlap=args.epilogue_overlap,
                                 cluster=tuple(int(x) for x in args.cluster.split("x")))
    data = result.to_json()
    if args.json:
        print(json.dumps({"kernel": example.name, "partition": args.partition, "fallback": ws.fallback,
                          "notes": ws.notes, **data}))
        return 0
    for note in ws.notes:
        console.print(f"[dim]partition:[/] {note}")
    if ws.fallback:
        console.print(f"[yellow]note:[/] {ws.fallback}")
    from aref.cli.tables import compile_table
    console.print(compile_table(example.name, args.partition, data))
    return 0
