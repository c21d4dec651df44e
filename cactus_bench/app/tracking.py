"""Experiment tracking: W&B when `tracking=wandb` (works offline with WANDB_MODE=offline), else nothing.

One W&B run per stored run (per shard), with a stable id from the run key, so a resumed run continues the
same W&B run. Per sample: the task's primary score, AL, both acceptance rates, the target's and the
output's KL, tokens, time and whether it stopped on length. At the end: the per-call accepted-length
histogram, acceptance per draft position (a key per position and a table), and a summary with the
headline score, and Rej and speedup when their reference runs (SpS, the
verifier alone, same setting) are in the store. `method`, `delta`, `m`, `pair` and `data` are top-level
config keys, so W&B's parallel coordinates and scatter panels work out of the box; runs are grouped by
experiment (the sweep's name).
`dashboards/wandb.yaml` describes the paper's figures as panels (`python -m cactus_bench.tools.dashboard`).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from cactus_bench.app.identity import RunIdentity
from cactus_bench.core import metrics
from cactus_bench.core.metrics import METRICS

EXTRA_SUMMARY_KEYS = ("score_stderr", "wall_time", "samples", "complete")
SAMPLE_KEYS = ("accepted_length", "acceptance_rate", "prefix_acceptance", "target_kl", "output_kl", "tokens_per_s")


def summary_keys() -> list[str]:
    """Stable summary names (the tracked metrics' own), so dashboards compare methods across runs."""
    intervals = [f"{m.name}_ci" for m in METRICS.values() if m.tracked and (m.sampled is not None or m.positional)]
    return [m.name for m in METRICS.values() if m.tracked] + intervals + list(EXTRA_SUMMARY_KEYS)


class NullTracker:
    def log_sample(self, step: int, record: dict) -> None:
        pass

    def log_figures(self, figures: dict[str, Path]) -> None:
        pass

    def finish(self, summary: dict | None, samples: list[dict]) -> None:
        pass


def wandb_config(cfg: DictConfig, ident: RunIdentity | None = None) -> dict:
    """Method, its parameters (each a top-level key: `delta`, `epsilon`, ...), m, pair and data as config
    keys, so W&B's parallel coordinates and scatter panels work out of the box."""
    ident = ident or RunIdentity.of(cfg)
    flat = {
        "method": ident.method,
        **ident.params,
        "m": ident.m,
        "pair": ident.pair_name,
        "data": cfg.data.label,
        "seed": cfg.seed,
        "sampling_temperature": cfg.sampling.temperature,
        "max_gen_toks": cfg.max_gen_toks,
        "run_key": ident.key,
    }
    return {**flat, "params": ident.params, "config": OmegaConf.to_container(cfg, resolve=True)}


def reference_samples(
    cfg: DictConfig, ident: RunIdentity | None = None, own: list[dict] | None = None
) -> dict[str, list[dict] | None]:
    """The samples of this setting's SpS and verifier-alone runs, when the store has them; a run that is its
    own reference (SpS for Rej) reads its `own` samples, before its summary is stored (Rej 0, not missing)."""
    from cactus_bench.app.runs import stored_references

    ident = ident or RunIdentity.of(cfg)
    refs = stored_references(cfg.paths.runs, ident)
    out = {which: run.samples if run is not None else None for which, run in refs.items()}
    for which in out:
        if own is not None and ident.reference(which).key == ident.key:
            out[which] = own
    return out


class WandbTracker(NullTracker):
    def __init__(self, cfg: DictConfig, folder: Path, ident: RunIdentity):
        import wandb

        self.wandb = wandb
        self.cfg, self.folder, self.ident = cfg, folder, ident
        self.primary = cfg.data.get("primary_metric")
        t = cfg.tracking
        shard = f"-shard{cfg.shard.replace('/', 'of')}" if cfg.get("shard") else ""
        self.run = wandb.init(
            project=t.project,
            entity=t.entity,
            mode=t.mode,
            group=t.group or cfg.experiment_name,
            name=folder.name + shard,
            id=self.ident.key + shard,
            resume="allow",
            job_type=cfg.data.label,
            dir=str(folder),
            config=wandb_config(cfg, self.ident),
        )

    def log_sample(self, step: int, record: dict) -> None:
        s = record["stats"]
        row = {
            "sample/new_tokens": s["new_tokens"],
            "sample/wall_time": s["wall_time"],
            "sample/stopped_on_length": int(s.get("stop_reason") == "length"),
        }
        counters = metrics.add_stats([s])
        for key in SAMPLE_KEYS:
            value = METRICS.get(key).pooled(counters)
            if value is not None:
                row[f"sample/{key}"] = value
        if self.primary and self.primary in record.get("scores", {}):
            row["sample/score"] = record["scores"][self.primary]
        self.run.log(row, step=step)

    def log_figures(self, figures: dict[str, Path]) -> None:
        self.run.log({f"figures/{name}": self.wandb.Image(str(path)) for name, path in figures.items()})

    def finish(self, summary: dict | None, samples: list[dict]) -> None:
        if summary is not None:
            for key in summary_keys():
                if summary.get(key) is not None:
                    self.run.summary[key] = summary[key]
            for m in METRICS.values():  # a profile over draft positions: also one key per position, and a table
                if m.positional and m.tracked:
                    for key, value in metrics.position_entries(m, summary).items():
                        if value is not None:
                            self.run.summary[key] = value
            if summary.get("acceptance_at"):
                columns = ["acceptance_at", "accepted_at_least"]
                rows = [[j + 1, *(summary[c][j] for c in columns)] for j in range(len(summary["acceptance_at"]))]
                self.run.log({"acceptance_by_position": self.wandb.Table(columns=["position", *columns], data=rows)})
            refs = reference_samples(self.cfg, self.ident, samples)
            for m in METRICS.values():
                if m.relative is None and not m.timed:
                    continue
                reading = metrics.read(m, samples, refs)  # the tables' reading: withheld stays out
                for key, value in metrics.flatten(m.name, reading.value).items():
                    if value is not None and (m.relative is not None or key not in summary):
                        self.run.summary[key] = value
                if reading.caveat is not None:
                    self.run.summary[f"{m.name}_caveat"] = reading.caveat
            counts = [a for s in samples for a in s.get("rounds_accepted", [])]
            if counts:
                self.run.log({"accepted_length_histogram": self.wandb.Histogram(counts)})
            columns = ["id", "new_tokens", "verifier_calls", "accepted", "wall_time", "stop_reason", "score"]
            table = self.wandb.Table(columns=columns)
            for rec in samples:
                st = rec["stats"]
                score = rec.get("scores", {}).get(self.primary)
                table.add_data(
                    str(rec["id"]),
                    st["new_tokens"],
                    st["verifier_calls"],
                    st["accepted"],
                    st["wall_time"],
                    st.get("stop_reason"),
                    score,
                )
            self.run.log({"samples": table})
        self.run.finish(exit_code=0 if summary is not None else 1)


def accepted_length_figure(samples: list[dict], folder) -> dict:
    """This run's distribution of accepted drafts per verifier call (a per-run figure for dashboards)."""
    counts = [a for s in samples for a in s.get("rounds_accepted", [])]
    if not counts:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.hist(counts, bins=range(max(counts) + 2), align="left", rwidth=0.85)
    ax.set(
        xlabel="accepted drafts per verifier call",
        ylabel="verifier calls",
        title=f"AL = {sum(counts) / len(counts):.2f}",
    )
    path = folder / "accepted_length.png"
    fig.savefig(path, bbox_inches="tight", dpi=110)
    plt.close(fig)
    return {"accepted_length": path}


def make_tracker(cfg: DictConfig, folder: Path, ident: RunIdentity):
    return WandbTracker(cfg, folder, ident) if cfg.tracking.backend == "wandb" else NullTracker()
