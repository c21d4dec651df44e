"""Tables and figures from stored runs, with the paper's numbers beside ours, in four rooms: `runs` (reading
and finding stored runs; shared with tracking and the planner), `specs` (table and figure specs, the config
of each cell), `tables`, and `figures` (one module per figure family).

    python -m cactus_bench.report table sweeps/table1.yaml     # CSV, Markdown, LaTeX under results/tables
    python -m cactus_bench.report figures                      # PNG + PDF under results/figures
"""

from .figures import figures
from .runs import AmbiguousRuns, Run, find, find_run, load_runs, references
from .specs import compose, compose_cell, load_spec, run_overrides
from .tables import build_table, render_table

__all__ = [
    "AmbiguousRuns",
    "Run",
    "build_table",
    "compose",
    "compose_cell",
    "figures",
    "find",
    "find_run",
    "load_runs",
    "load_spec",
    "references",
    "render_table",
    "run_overrides",
]
