"""Table and figure specs (sweeps/*.yaml): which pair, m, seed, datasets, rows (method + parameters) and
columns, and the run config of each cell. A sweep runs the cells, and a table or figure finds each cell's
run by the identity of the same config.

A figure spec is a table spec with `figure:` naming its drawing and two extensions:

* `pairs:` several pairs, one panel each (Figure 4's model families). `pair=tiny` maps every family to that
  one pair (each panel then says so), for an offline run.
* a row parameter given as a list (`delta: [0.25, 0.5, 1.0]`) is a curve: one run per value, joined in
  parameter order.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from omegaconf import DictConfig

from cactus_bench.app.compose import compose
from cactus_bench.app.schema import CONF_DIR, SWEEPS_DIR
from cactus_bench.core import metrics
from cactus_bench.core.cli import Key
from cactus_bench.core.utils import path_part_problem

ROW_KEYS = ("label", "method", "curve", "curve_param")  # what a spec row says besides the rule's parameters
# The spec settings a command line may override (`sweep`, `report table`, `plan`): a table's columns and its
# runs' identities follow them together, so `data=arith` makes arith columns (as a Hydra override it filled
# the spec's gsm8k, ifeval and gpqa columns with arith runs).
SPEC_KEYS = (
    Key("pair", "the spec's pair (e.g. tiny)"),
    Key("limit", "items per cell (default: the whole dataset)"),
    Key("data", "datasets, comma-separated (e.g. gsm8k,ifeval)", kind=list),
    Key("m", "draft length"),
    Key("max_gen_toks", "token budget per reply"),
    Key("seed", "one seed instead of the spec's"),
    Key("batch_size", "requests decoded at once (auto: what fits)"),
    Key("timing_sample", "items timed at batch size 1 beside the verifier alone"),
    Key("engine", "the decode engine (conf/engine: eager, fast, auto, vllm)"),
)


WHOLE_NUMBERS = ("limit", "m", "max_gen_toks", "seed", "timing_sample")  # a cell's int(...) settings


class SpecError(ValueError):
    """A spec that cannot be read, or an override a table's columns would not follow: the message says what
    to do."""


def spec_overrides(args) -> dict:
    """The SPEC_KEYS set on a command line (`cli.Command.parse`'s namespace)."""
    return {k.name: getattr(args, k.name) for k in SPEC_KEYS if getattr(args, k.name, None) is not None}


def row_params(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ROW_KEYS}


def expand_rows(rows: list[dict]) -> list[dict]:
    """A row with one list-valued parameter becomes a curve: one row per value, in the list's order."""
    out = []
    for row in rows:
        lists = [k for k, v in row.items() if isinstance(v, list)]
        if len(lists) > 1:
            raise ValueError(f"row {row['label']!r}: one parameter may be a list (a curve), not {lists}")
        if not lists:
            out.append(row)
            continue
        key = lists[0]
        for value in row[key]:
            shown = f"{value:g}" if isinstance(value, float) else f"{value}"
            out.append(
                {**row, key: value, "label": f"{row['label']} {key}={shown}", "curve": row["label"], "curve_param": key}
            )
    return out


def load_spec(path: str | Path, overrides: dict | None = None) -> dict:
    """A table or figure spec with overrides applied; the paper's column keeps referring to the paper's own
    pair. List-valued row parameters become curves (one row per value); with `pairs:` (a figure over model
    families) a `pair` override maps every family to that pair."""
    if not Path(path).is_file():
        known = ", ".join(str(p.relative_to(SWEEPS_DIR.parent)) for p in sorted(SWEEPS_DIR.glob("*.yaml")))
        raise SpecError(f"no spec file {path}: give the path of a table or figure spec (this checkout's: {known})")
    spec = yaml.safe_load(Path(path).read_text())
    spec.setdefault("paper_pair", spec["pair"])
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    # what differs from the spec file: named in the table's file name and title (`report.tables.table_name`)
    spec["changed"] = {k: v for k, v in overrides.items() if str(spec.get(k)) != str(v)}
    if spec.get("pairs") and "pair" in overrides:
        spec["pair_override"] = overrides["pair"]
    if "seed" in overrides:  # one seed asked for on the command line: not the spec's list
        spec.pop("seeds", None)
    spec.update(overrides)
    problem = path_part_problem(spec.get("name"))
    if problem:
        raise SpecError(f"{path}: name: {spec.get('name')!r} is not valid: {problem} (it names the table's files)")
    for key in WHOLE_NUMBERS:
        if _given(spec.get(key)) and not str(spec[key]).isdigit():
            raise SpecError(
                f"{key}={spec[key]!r} ({'the command line' if key in overrides else path}) is not a whole number: "
                f"give {key} as a count, e.g. {key}=4 (or {key}=null for the config's default)"
            )
    refuse_other_kinds(spec, path)
    spec["rows"] = expand_rows(spec["rows"])
    if "columns" in spec and "m" in spec:  # a positional metric is a column set: one column per draft position
        spec["columns"] = metrics.expand_columns(spec["columns"], int(spec["m"]))
    return spec


def refuse_other_kinds(spec: dict, path) -> None:
    """A spec of one benchmark kind (`kind: specbench`: per-category columns) refuses a dataset of another:
    its table would file that dataset's cells under groups it does not have."""
    want = spec.get("kind", "task")
    for data in spec.get("data") or []:
        conf = CONF_DIR / "data" / f"{data}.yaml"
        kind = (yaml.safe_load(conf.read_text()) or {}).get("kind", "task") if conf.is_file() else None
        if kind is not None and kind != want:
            others = [p.name for p in sorted(SWEEPS_DIR.glob("*.yaml")) if _kind(p) == kind]
            raise SpecError(
                f"data={data} is a {kind} dataset, and {Path(path).name} is a table of {want} runs (its `kind`): "
                f"its cells would be filed under groups {data} does not have. Use a spec of {kind} runs "
                f"({', '.join(others) or 'none in sweeps/'}), or one of this spec's own datasets."
            )


def _kind(spec_path: Path) -> str:
    return (yaml.safe_load(spec_path.read_text()) or {}).get("kind", "task")


def spec_pairs(spec: dict) -> list[tuple[str, str]]:
    """(panel family, pair that runs it): `pairs:` with the `pair=` override mapping every family."""
    families = spec.get("pairs") or [spec["pair"]]
    override = spec.get("pair_override")
    return [(family, override or family) for family in families]


def spec_seeds(spec: dict) -> list[int]:
    """The seeds a spec runs: `seeds: [0, 1, 2]` (each seed its own run; a table pools them by item), or its
    one `seed` (default 0, as the authors ran)."""
    seeds = spec.get("seeds")
    return [int(x) for x in seeds] if seeds else [int(spec.get("seed", 0))]


def pair_spec(spec: dict, pair: str) -> dict:
    return {**spec, "pair": pair}


def cell_values(spec: dict, row: dict, data: str) -> dict:
    """One table cell's settings beyond the config defaults (what `sweep` writes as a `+run` config)."""
    node = {
        "pair": spec["pair"],
        "data": data,
        "method": row["method"],
        "m": int(spec["m"]),
        "seed": int(spec.get("seed", 0)),
        "experiment_name": spec["name"],
        "params": row_params(row),
    }
    for key in ("limit", "max_gen_toks", "timing_sample"):
        if _given(spec.get(key)):
            node[key] = int(spec[key])
    if _given(spec.get("batch_size")):
        node["batch_size"] = spec["batch_size"] if spec["batch_size"] == "auto" else int(spec["batch_size"])
    if spec.get("paired_timing") is not None:
        node["paired_timing"] = bool(spec["paired_timing"])
    if _given(spec.get("engine")):
        node["engine"] = str(spec["engine"])
    return node


def _given(value) -> bool:
    """A spec value that is set: `key=null` on the sweep's command line unsets the spec's (config default)."""
    return value is not None and str(value).lower() not in ("null", "none")


def run_overrides(spec: dict, row: dict, data: str) -> list[str]:
    """The Hydra overrides of one table cell (what `sweep` runs and what the table looks up)."""
    cell = cell_values(spec, row, data)
    params = cell.pop("params")
    out = [f"{k}={v}" for k, v in cell.items()]
    return out + [f"method.params.{k}={v}" for k, v in params.items()]


def cell_config(spec: dict, row: dict, data: str) -> dict:
    """The same cell as a config group option (`# @package _global_`), for a multirun's `+run=...`."""
    cell = cell_values(spec, row, data)
    params = cell.pop("params")
    groups = [g for g in ("pair", "data", "method", "engine") if g in cell]
    node = {"defaults": [{f"override /{g}": cell.pop(g)} for g in groups], **cell}
    if params:
        node["method"] = {"params": params}
    return node


def compose_cell(spec: dict, row: dict, data: str, overrides: list[str] = ()) -> DictConfig:
    """The config of one table cell: the spec's overrides, then the caller's (e.g. sampling=greedy). An
    override that moves the cell off its own dataset or method is refused: the cell would show another cell's
    runs under its name."""
    cfg = compose(tuple(run_overrides(spec, row, data)) + tuple(overrides))
    wanted = {"data": (cfg.data.name, data), "method": (cfg.method.name, row["method"])}
    for key, (got, want) in wanted.items():
        if got != want:
            moved = [o for o in overrides if o.lstrip("+~").split("=")[0].split(".")[0] == key] or list(overrides)
            raise SpecError(
                f"{' '.join(moved)} would fill the {want!r} cells of {spec['name']} with {got!r} runs: a table's "
                f"{key} is a spec setting. Give it as {key}=... to the command (its own key, not a run override), "
                "or use a spec whose cells are those runs"
            )
    return cfg
