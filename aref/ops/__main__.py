"""`python -m aref.ops`: the op table generated from the registry (Markdown), one row per entry
(`python -m aref.ops.doc` prints it as the page docs/ops.md)."""
from aref.ops.doc import table

if __name__ == "__main__":
    print(table())
