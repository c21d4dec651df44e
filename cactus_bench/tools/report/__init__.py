"""Tables and figures from stored runs (read through `app.runs`, the store's reading side), with the
paper's numbers beside ours, in three rooms: `specs` (table and figure specs, the config of each cell),
`tables`, and `figures` (one module per figure family). Reports only read.

    python -m cactus_bench.tools.report table sweeps/table1.yaml     # CSV, Markdown, LaTeX under results/tables
    python -m cactus_bench.tools.report figures                      # PNG + PDF under results/figures
"""

from cactus_bench.tools.report.figures import figures
from cactus_bench.tools.report.specs import compose_cell, load_spec, run_overrides
from cactus_bench.tools.report.tables import build_table, render_table

__all__ = ["build_table", "compose_cell", "figures", "load_spec", "render_table", "run_overrides"]
