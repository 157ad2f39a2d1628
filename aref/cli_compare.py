"""`aref compare`: heuristic vs optimal partition side by side."""
from aref.cli import command
