"""The store's reading side: stored runs as the reports, the planner and tracking see them, read from a
results folder and looked up by their identity (`identity.RunIdentity`); `store.py` writes them. An
unreadable run is skipped with one warning naming it."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml
from omegaconf import DictConfig

from cactus_bench.adapters.benchmarks.base import KINDS, Kind
from cactus_bench.app.identity import RunIdentity
from cactus_bench.app.store import StoreError, contents, read_samples
from cactus_bench.core import metrics

log = logging.getLogger("cactus_bench")


@dataclass
class Run:
    folder: Path
    config: dict
    summary: dict
    _samples: list | None = field(default=None, repr=False)
    note: str | None = None  # what a reader must be told about this run (a summary recomputed from its samples)

    @property
    def samples(self) -> list[dict]:
        """Every shard's samples, each item once (a reader never repairs or counts twice)."""
        if self._samples is None:
            self._samples = read_samples(self.folder)
            key = self.summary.get("score_metric")
            for s in self._samples:  # runs stored before samples carried their own score
                if "score" not in s and key is not None and key in s.get("scores", {}):
                    s["score"] = 100 * float(s["scores"][key])
        return self._samples

    @cached_property
    def identity(self) -> RunIdentity:
        return RunIdentity.of(self.config)

    @property
    def key(self) -> str:
        return self.identity.key

    @property
    def is_baseline(self) -> bool:
        return self.identity.is_baseline

    @property
    def kind(self) -> Kind:
        return KINDS.get(self.config["data"].get("kind", "task"))

    @property
    def data_label(self) -> str:
        return self.identity.data_label

    @property
    def pair_name(self) -> str:
        return self.identity.pair_name

    def restricted(self, ids: set) -> Run:
        """This run over just these items (`id`s): samples and a summary recomputed from them."""
        samples = [s for s in self.samples if s["id"] in ids]
        if len(samples) == len(self.samples):
            return self
        summary = {**self.summary, **self.kind.summary(samples, self.config["data"])}
        return Run(self.folder, self.config, summary, samples, self.note)

    def checked(self) -> Run:
        """This run with its summary recomputed from its samples, and a note saying so, when the summary was
        computed from other samples or timings than the store holds now (a samples line cut after the summary
        was written, lines appended by hand, timings appended by a group killed before it merged the summary
        again): every reader then shows the samples' numbers, never a stale summary's."""
        found = self._stale()
        if found is None:
            return self
        stale, damaged = found
        summary = {**self.summary, **self.kind.summary(self.samples, self.config["data"])}
        for m in metrics.METRICS.values():  # relative readings are against references as they were: recomputed
            if m.relative is not None:
                summary = {k: v for k, v in summary.items() if k != m.name and not k.startswith(f"{m.name}_")}
        note = f"{self.folder.name}: {stale}: its numbers are recomputed from the samples as stored"
        # a damaged store is a warning; a summary a timing group is about to merge again is expected
        log.log(logging.WARNING if damaged else logging.DEBUG, "%s", note)
        return Run(self.folder, self.config, summary, self.samples, note)

    def _stale(self) -> tuple[str, bool] | None:
        """How the summary differs from what the store holds now, and whether the store was damaged (lines
        lost or added by hand) rather than moved on; None when the summary is what they give."""
        stored, made_from = self.summary.get("samples"), self.summary.get("computed_from")
        if stored is not None and stored != len(self.samples):
            return f"summary.json counts {stored} items but its samples hold {len(self.samples)}", True
        if made_from is None or made_from == contents(self.samples):  # (a summary of before it said)
            return None
        return (
            f"summary.json was computed from {made_from['samples']} samples ({made_from['timed']} timed) with "
            "other statistics or timings than the store holds now (a run or timing group stopped before it "
            "summarised again: rerun the same command to bring it up to date)"
        ), False


def pool_seeds(runs: list[Run]) -> Run | None:
    """A setting's runs at several seeds as one run whose samples are items: each item's counters and times
    summed over the seeds, its score their mean. Every interval computed from it is then clustered by item
    (an item decoded k times is one unit, not k), and its n is the items all the seeds decoded. One run (or
    none) is returned as it is."""
    runs = [r for r in runs if r is not None]
    if len(runs) < 2:
        return runs[0] if runs else None
    shared = set.intersection(*({s["id"] for s in r.samples} for r in runs))
    by_id = [{s["id"]: s for s in r.samples if s["id"] in shared} for r in runs]
    key = runs[0].summary.get("score_metric")
    samples = []
    for first in runs[0].samples:
        if first["id"] not in shared:
            continue
        parts = [b[first["id"]] for b in by_id]
        scores = [p.get("score") for p in parts]
        score = sum(scores) / len(scores) if all(v is not None for v in scores) else None
        conditions = {json.dumps(p.get("conditions", {}), sort_keys=True, default=str) for p in parts}
        samples.append(
            {
                "index": first["index"],
                "id": first["id"],
                "stats": metrics.add_stats([p["stats"] for p in parts]),
                "score": score,
                "scores": {key: score / 100} if key and score is not None else {},
                "conditions": first.get("conditions", {}) if len(conditions) == 1 else {"mixed": sorted(conditions)},
            }
        )
    head = runs[0]
    summary = {**head.summary, **head.kind.summary(samples, head.config["data"]), "seeds": len(runs)}
    return Run(head.folder, head.config, summary, samples, "; ".join(r.note for r in runs if r.note) or None)


class AmbiguousRuns(ValueError):
    """Two stored runs have the same identity (a copied folder): a table cannot choose between them."""


def load_runs(runs_dir: Path | str) -> list[Run]:
    """Every finished run under a results folder (`paths.runs`)."""
    runs = []
    for summary in sorted(Path(runs_dir).glob("**/summary.json")):
        folder = summary.parent
        try:
            stored = metrics.upgrade(json.loads(summary.read_text()))
            run = Run(folder, yaml.safe_load((folder / "config.yaml").read_text()), stored)
            run.identity  # noqa: B018  (a config that no longer composes into an identity is unreadable too)
        except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError, AttributeError) as e:
            log.warning("skipping %s: unreadable run (%s: %s)", folder, type(e).__name__, str(e).splitlines()[0])
            continue
        runs.append(run.checked())  # a damaged samples line is the store's paragraph (StoreError), not a skip
    return runs


def find(runs: list[Run], identity: RunIdentity) -> Run | None:
    """The stored run of exactly this identity, None if there is none."""
    key = identity.key
    hits = [r for r in runs if r.key == key]
    if len(hits) > 1:
        raise AmbiguousRuns(
            f"{len(hits)} stored runs have the identity of {identity.method} on {identity.data_label} ({key}): "
            f"{hits[0].folder} and {hits[1].folder}. Keep one (move the other out of the results folder)."
        )
    return hits[0] if hits else None


def find_run(runs: list[Run], cfg: DictConfig) -> Run | None:
    """The stored run of exactly this composed config (its full identity), None if there is none."""
    return find(runs, RunIdentity.of(cfg))


def references(runs: list[Run], identity: RunIdentity) -> dict[str, Run | None]:
    """The runs a run is compared with: `sps` (Rej) and `baseline` (the verifier alone: speedup)."""
    return {which: find(runs, identity.reference(which)) for which in metrics.REFERENCES}


def stored_references(runs_dir: Path | str, identity: RunIdentity) -> dict[str, Run | None]:
    """The same, read from their own folders only (a run's summary and tracking, at the end of one run)."""
    found = {}
    for which in metrics.REFERENCES:
        ref = identity.reference(which)
        try:
            found[which] = next((r for r in load_runs(ref.folder(runs_dir)) if r.key == ref.key), None)
        except StoreError as e:  # a damaged reference: this run's own figures still stand, without it
            log.warning("no %s reference for %s: %s", which, identity.key, e)
            found[which] = None
    return found
