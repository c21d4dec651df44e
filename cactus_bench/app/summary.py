"""A run's summary: its metrics over every shard's samples, written once every item is stored exactly once."""

from __future__ import annotations

import logging

from omegaconf import DictConfig

from cactus_bench.adapters.benchmarks.base import KINDS, Benchmark
from cactus_bench.app.config import RunSpec
from cactus_bench.app.identity import RunIdentity
from cactus_bench.app.store import RunStore, StoreError, contents, duplicated_items
from cactus_bench.core import metrics

log = logging.getLogger("cactus_bench")


def merge(spec: RunSpec, bench: Benchmark, store: RunStore, wanted: list) -> dict:
    """The run's summary over every shard's samples. Written (with the benchmark's files) only when every
    wanted item is present exactly once, and never over a stored summary of more items (a rerun with a
    smaller limit reads a subset: it is returned, not written); otherwise the missing shards are named and
    the run stays incomplete. A duplicated item (two writers of one shard) is refused."""
    dup = duplicated_items(store.folder)
    if dup:
        item, places = next(iter(dup.items()))
        file, line = places[-1].rsplit(":", 1)
        raise StoreError(
            f"{store.folder}: item {item} is stored more than once (at {', '.join(places)}; {len(dup)} such "
            f"items): two processes wrote it. Keep one line per item (delete the later copies, e.g. "
            f"`sed -i '{line}d' {store.folder / file}`) and run again to summarise."
        )
    have = {s["index"]: s for s in store.samples()}
    samples = [have[k] for k in wanted if k in have]
    cfg, method, ident = spec.cfg, spec.method, spec.identity
    summary = summarise(spec, samples, bench)
    summary["computed_from"] = contents(list(have.values()))  # a reader finds out when the store moved on
    if method.uses_drafter:  # against this setting's stored reference runs, read as the tables read them
        summary.update(relative_readings(cfg, samples, ident))
    summary["better"] = metrics.directions(summary)  # self-describing: which way each metric is better
    missing = [pos for pos, k in enumerate(wanted) if k not in have]
    summary["complete"] = not missing
    if missing:
        n = store.shard[1] if store.shard else 1
        shards = sorted({pos % n for pos in missing})
        names = ", ".join(f"shard={i}/{n}" for i in shards) if store.shard else "this run"
        log.warning("run %s is incomplete: %d of %d items missing (%s)", store.folder, len(missing), len(wanted), names)
        summary["missing_shards"] = [f"{i}/{n}" for i in shards] if store.shard else []
        return summary
    stored = store.stored_summary()
    if stored is not None and stored.get("samples", 0) > len(samples):
        log.info(
            "summary of %d items (limit=%s) returned, not written: %s keeps its summary of %d items",
            len(samples),
            cfg.limit,
            store.folder,
            stored["samples"],
        )
        return summary
    store.write_summary(summary)
    for name, text in bench.artifacts(samples).items():
        store.write_artifact(name, text)
    return summary


def relative_readings(cfg: DictConfig, samples: list[dict], ident: RunIdentity) -> dict:
    """The run's relative metrics (Δ score, Rej, speedups) against this setting's stored reference runs, read
    as the tables read them (`metrics.read`: a withheld value is left out, a caveat kept). Stored in the run's
    summary as of when it was written; tables recompute them on the items every cell shares."""
    from cactus_bench.app.tracking import reference_samples

    refs, out = reference_samples(cfg, ident, samples), {}
    for m in metrics.METRICS.values():
        if m.relative is not None and refs.get(m.reference) is not None:
            reading = metrics.read(m, samples, refs)
            out.update({k: v for k, v in metrics.flatten(m.name, reading.value).items() if v is not None})
            if reading.caveat is not None:
                out[f"{m.name}_caveat"] = reading.caveat
    kind = KINDS.get(cfg.data.kind)
    if kind.relative is not None:
        out.update(kind.relative(samples, refs, cfg.pair))
    return out


def summarise(spec: RunSpec, samples: list[dict], bench: Benchmark) -> dict:
    cfg, method, ident = spec.cfg, spec.method, spec.identity
    return {
        "run_key": ident.key,
        "pair": ident.pair_name,
        "method": method.name,
        "params": dict(method.params),
        "data": cfg.data.label,  # the subset too (gpqa_diamond, not gpqa)
        "m": ident.m,  # null for the verifier alone: it drafts nothing
        "seed": cfg.seed,
        "experiment": cfg.experiment_name,
        **metrics.decode_metrics(samples),
        **bench.summarise(samples),
    }
