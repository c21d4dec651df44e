"""Create the saved W&B workspace described in dashboards/wandb.yaml (the paper's figures as panels). Needs
`pip install wandb-workspaces` and a W&B login; `dry_run=true` only checks and prints the panels.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cactus_bench.app.schema import PROJECT_DIR
from cactus_bench.core.cli import Command, Key

SPEC = PROJECT_DIR / "dashboards" / "wandb.yaml"
PANEL_TYPES = ("scatter", "parallel", "bar", "line")


def load(path: Path = SPEC) -> dict:
    spec = yaml.safe_load(Path(path).read_text())
    for section in spec["sections"]:
        for panel in section["panels"]:
            if panel["type"] not in PANEL_TYPES:
                raise ValueError(f"{path}: panel {panel['title']!r} has type {panel['type']!r}; use {PANEL_TYPES}")
    return spec


def keys(spec: dict) -> set[str]:
    """Every `kind:name` key the panels read."""
    out = set()
    for section in spec["sections"]:
        for p in section["panels"]:
            out |= {p[k] for k in ("x", "y") if isinstance(p.get(k), str)}
            out |= (
                set(p.get("columns", []))
                | set(p.get("metrics", []))
                | set(p.get("y", []) if isinstance(p.get("y"), list) else [])
            )
    return out


def build(spec: dict, entity: str, project: str):
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    def name(key: str) -> str:
        return key.split(":", 1)[1]

    def panel(p: dict):
        if p["type"] == "scatter":
            return wr.ScatterPlot(title=p["title"], x=name(p["x"]), y=name(p["y"]))
        if p["type"] == "parallel":
            return wr.ParallelCoordinatesPlot(
                title=p["title"], columns=[wr.ParallelCoordinatesPlotColumn(metric=name(c)) for c in p["columns"]]
            )
        if p["type"] == "bar":
            return wr.BarPlot(title=p["title"], metrics=[name(m) for m in p["metrics"]])
        return wr.LinePlot(title=p["title"], y=[name(y) for y in p["y"]])

    sections = [
        ws.Section(name=s["name"], panels=[panel(p) for p in s["panels"]], is_open=True) for s in spec["sections"]
    ]
    return ws.Workspace(name=spec["name"], entity=entity, project=project, sections=sections)


COMMAND = Command(
    prog="python -m cactus_bench.tools.dashboard",
    about=__doc__,
    keys=(
        Key("entity", "your W&B entity (user or team)", required=True),
        Key("project", "the W&B project the runs log to", "cactus-bench"),
        Key("dry_run", "print the panels, create nothing", False, bool),
    ),
    examples=("python -m cactus_bench.tools.dashboard entity=<you> project=cactus-bench",),
)


def main(argv=None) -> None:
    args = COMMAND.parse(argv)
    spec = load()
    if args.dry_run:
        for s in spec["sections"]:
            print(s["name"])
            for p in s["panels"]:
                print(f"  {p['type']:9s} {p['title']}")
        return
    try:
        workspace = build(spec, args.entity, args.project)
    except ImportError:
        raise SystemExit(
            "error: creating the workspace needs `pip install wandb-workspaces` (and `wandb login`)"
        ) from None
    workspace.save()
    print(f"saved: {workspace.url}")


if __name__ == "__main__":
    main()
