"""Experiment tracking: W&B when `tracking=wandb` (works offline with WANDB_MODE=offline), else nothing."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ..metrics import METRICS, accepted_length

# Stable summary names (the tracked metrics' own), so dashboards compare methods across runs.
EXTRA_SUMMARY_KEYS = ("score_stderr", "wall_time", "samples")


def summary_keys() -> list[str]:
    return [m.name for m in METRICS.values() if m.tracked] + list(EXTRA_SUMMARY_KEYS)


class NullTracker:
    def log_sample(self, step: int, record: dict) -> None:
        pass

    def log_figures(self, figures: dict[str, Path]) -> None:
        pass

    def finish(self, summary: dict | None, samples: list[dict]) -> None:
        pass


class WandbTracker(NullTracker):
    def __init__(self, cfg: DictConfig, folder: Path):
        import wandb

        self.wandb = wandb
        t = cfg.tracking
        self.run = wandb.init(
            project=t.project,
            entity=t.entity,
            mode=t.mode,
            group=t.group or cfg.experiment_name,
            name=folder.name,
            job_type=cfg.data.name,
            dir=str(folder),
            config=OmegaConf.to_container(cfg, resolve=True),
            reinit="finish_previous",
        )

    def log_sample(self, step: int, record: dict) -> None:
        s = record["stats"]
        row = {"sample/new_tokens": s["new_tokens"], "sample/wall_time": s["wall_time"]}
        al = accepted_length(s)
        if al is not None:
            row["sample/accepted_length"] = al
        self.run.log(row, step=step)

    def log_figures(self, figures: dict[str, Path]) -> None:
        self.run.log({f"figures/{name}": self.wandb.Image(str(path)) for name, path in figures.items()})

    def finish(self, summary: dict | None, samples: list[dict]) -> None:
        if summary is not None:
            for key in summary_keys():
                if summary.get(key) is not None:
                    self.run.summary[key] = summary[key]
            columns = ["id", "new_tokens", "verifier_calls", "accepted", "wall_time", "score"]
            table = self.wandb.Table(columns=columns)
            for rec in samples:
                st = rec["stats"]
                score = next(iter(rec.get("scores", {}).values()), None)
                table.add_data(
                    str(rec["id"]),
                    st["new_tokens"],
                    st["verifier_calls"],
                    st["accepted"],
                    st["wall_time"],
                    score if isinstance(score, (int, float)) else None,
                )
            self.run.log({"samples": table})
        self.run.finish(exit_code=0 if summary is not None else 1)


def make_tracker(cfg: DictConfig, folder: Path):
    return WandbTracker(cfg, folder) if cfg.tracking.backend == "wandb" else NullTracker()
