"""`aref ir`: print a kernel's IR at a stage of the pipeline."""
from __future__ import annotations

import json
import sys

from rich.console import Console

from aref.cli.common import add_target, command, example_and_inputs, options_of
from aref.compiler import STAGES, print_stage


from aref.search import lower_to


def _ir_args(p):
    add_target(p)
    p.add_argument("--stage", default="tile", choices=STAGES, help="IR level to print")


@command("ir", "print a kernel's IR at a stage", _ir_args)
def cmd_ir(args, console: Console) -> int:
    example, inputs = example_and_inputs(args)
    kernel = example.kernel.specialize(**inputs)
    ir = lower_to(kernel, args.stage, options_of(args))
    text = print_stage(ir, args.stage)
    if args.json:
        print(json.dumps({"kernel": example.name, "stage": args.stage, "ir": text}))
    else:
        sys.stdout.write(text)
    return 0
