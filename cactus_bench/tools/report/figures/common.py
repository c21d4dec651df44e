"""What every figure family shares: a figure sink that writes PNG + PDF, one style per method, the
verifier's ±1σ band, and a frame of stored runs grouped the way figures may join them."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from cactus_bench.app.runs import Run  # noqa: E402
from cactus_bench.core.registry import Registry  # noqa: E402
from cactus_bench.core.utils import write_text_atomic  # noqa: E402

MARKERS = "os^Dvp<>h*"
CAVEAT_MARK = "⚠"  # a timed figure to be read with its note (the tables' mark)


def method_label(method: str) -> str:
    """A method's name as the tables print it (SpS, TAS, Cactus, ...)."""
    from cactus_bench.core.methods import display_name

    return display_name(method)


class Sink:
    """Writes each figure as PNG and PDF into one folder, remembers what it wrote, and keeps the folder's
    index (`index.json`, and `index.md` to read): every figure's title, which says the setting it draws
    (a file name carries a setting's hash when a dataset has runs of several), and the scope it was drawn in
    (the overrides the drawing was asked for). A drawing removes only figures of its own scope that it did
    not draw again (their runs are gone): another setting's figures, drawn by another command, stay."""

    def __init__(self, out_dir: Path | str, scope: list[str] = ()):
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.scope = sorted(scope)
        self.made: dict[str, Path] = {}
        self.noted: set[str] = set()
        self.title = ""  # what the figures drawn now show: set by the caller before each family draws
        try:
            self.index: dict[str, dict] = json.loads((self.out / "index.json").read_text())
        except (OSError, ValueError):
            self.index = {}

    def save(self, fig, name: str) -> None:
        for ext in ("png", "pdf"):
            fig.savefig(self.out / f"{name}.{ext}", bbox_inches="tight", dpi=130)
        plt.close(fig)
        self.made[name] = self.out / f"{name}.png"
        self.index[name] = {"title": self.title, "scope": self.scope, "files": [f"{name}.png", f"{name}.pdf"]}

    def notes(self, name: str, notes: list[str]) -> None:
        (self.out / f"{name}_notes.txt").write_text("\n".join(notes) + "\n")
        self.noted.add(f"{name}_notes.txt")
        self.index[f"{name}_notes"] = {"title": self.title, "scope": self.scope, "files": [f"{name}_notes.txt"]}

    def remove_stale(self) -> list[Path]:
        """This scope's figures (and notes) in the index that this drawing did not make: drawn from runs
        that are gone, they would sit beside the new ones looking current. Then the index is written."""
        kept = set(self.made) | {n.removesuffix(".txt") for n in self.noted}
        stale = [n for n, e in self.index.items() if e.get("scope") == self.scope and n not in kept]
        removed = []
        for name in stale:
            for file in self.index.pop(name)["files"]:
                if (self.out / file).exists():
                    (self.out / file).unlink()
                    removed.append(self.out / file)
        write_text_atomic(self.out / "index.json", json.dumps(self.index, indent=1, sort_keys=True))
        lines = ["# Figures", "", "| file | what it shows | drawn with |", "| --- | --- | --- |"]
        for _, e in sorted(self.index.items()):
            lines.append(f"| {e['files'][0]} | {e['title']} | {' '.join(e['scope']) or 'the runs as stored'} |")
        write_text_atomic(self.out / "index.md", "\n".join(lines) + "\n")
        return removed


def runs_frame(runs: list[Run]) -> pd.DataFrame:
    """One row per stored run with what figures plot and group by (its setting: everything but the method)."""
    rows = []
    for r in runs:
        s, c = r.summary, r.config
        rows.append(
            {
                "pair": r.pair_name,
                "data": r.data_label,
                "kind": c["data"].get("kind", "task"),
                "setting": r.identity.setting_key,
                "method": r.identity.method,
                "baseline": r.is_baseline,
                "delta": r.identity.params.get("delta"),
                "m": c["m"],
                "score": s.get("score"),
                "score_stderr": s.get("score_stderr"),
                "accepted_length": s.get("accepted_length"),
                "output_kl": s.get("output_kl"),
                "target_kl": s.get("target_kl"),
                "run": r,
            }
        )
    df = pd.DataFrame(rows)
    for col in NUMERIC:  # a figure reads a missing number (a withheld or unmeasured one) as NaN, never None
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


NUMERIC = ("delta", "score", "score_stderr", "accepted_length", "output_kl", "target_kl")


def setting_differences(df: pd.DataFrame) -> dict[str, str]:
    """For each setting (`setting` key) of runs sharing pair and dataset: what it sets differently from the
    others (`temperature=0.0, max_gen_toks=32`), so figures of several settings are told apart by title."""
    settings = {}
    for key, g in df.groupby("setting"):
        ident = g.iloc[0]["run"].identity.as_dict()
        flat = {k: v for k, v in ident.items() if k not in ("method", "params", "m", "drafter")}
        flat |= {k: v for k, v in flat.pop("sampling", {}).items()}
        settings[key] = flat
    keys = sorted({k for f in settings.values() for k in f})
    differing = [k for k in keys if len({str(f.get(k)) for f in settings.values()}) > 1]
    return {key: ", ".join(f"{k}={f.get(k)}" for k in differing) for key, f in settings.items()}


def delta_label(r) -> str:
    return f" δ={r['delta']:g}" if r["delta"] is not None and not pd.isna(r["delta"]) else ""


def method_styles(methods) -> dict[str, dict]:
    """One colour and marker per method (stable across a figure's panels)."""
    return {m: {"marker": MARKERS[i % len(MARKERS)], "color": f"C{i % 10}"} for i, m in enumerate(sorted(methods))}


def verifier_band(ax, score: float | None, stderr: float | None, label: str = "verifier alone ±1σ") -> None:
    """The verifier alone's score with its ±1 standard error, behind the methods' points."""
    if score is None or pd.isna(score):
        return
    sd = stderr if stderr is not None and not pd.isna(stderr) else 0.0
    ax.axhspan(score - sd, score + sd, color="grey", alpha=0.25, label=label)
    ax.axhline(score, color="grey", lw=1)


def error_bar(est) -> tuple[float, float]:
    """An estimate's interval as (below, above) its value; none drawn (0, 0) where it has no interval (fewer
    items than `intervals.MIN_ITEMS`)."""
    if est.low is None:
        return 0.0, 0.0
    return est.value - est.low, est.high - est.value


# --- the figure registry ---------------------------------------------------------------------------------

SOURCES = ("store", "spec")


@dataclass(frozen=True)
class Family:
    """A figure family: `draw`, and what drives it. `store`: drawn for each pair, dataset, setting and m of
    the stored runs whose benchmark kind names it (`Kind.figures`), as `draw(sink, name, title, runs,
    verifier_runs)`; `spec`: driven by a figure spec (`figure: <name>` in sweeps/*.yaml), as `draw(sink,
    spec, runs, overrides) -> notes`."""

    draw: Callable
    source: str


def _check_family(name: str, family: Family) -> None:
    if not isinstance(family, Family) or family.source not in SOURCES:
        raise ValueError(f"figure family {name!r}: register a Family whose source is one of {SOURCES}")


FAMILIES: Registry[Family] = Registry("figure family", _check_family, group="cactus_bench.figures")


def figure_family(name: str, source: str) -> Callable:
    """Decorator on a figure module's `draw`: register it as the family `name`, driven by `source`."""

    def deco(draw: Callable) -> Callable:
        FAMILIES.add(name, Family(draw, source))
        return draw

    return deco
