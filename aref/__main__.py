"""`python -m aref` is the `aref` command."""
from aref.cli import main

raise SystemExit(main())
