"""One run end to end: validate, load the pair, decode the benchmark sample by sample into the store
(resuming what is there), score each sample with lm-eval's task code, and summarise."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from dataclasses import replace

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from .. import metrics
from ..benchmarks.base import Benchmark, make_benchmark
from ..decode import build_decoder
from ..embedded import resolve_model
from ..methods import Method
from ..models import Pair, check_available, load_pair, resolve_device, resolve_dtype, with_drafter
from . import timing
from .config import decoder_settings, validate
from .identity import RunIdentity
from .store import RunStore, StoreError, duplicated_items, read_timings
from .tracking import NullTracker, make_tracker

log = logging.getLogger("cactus_bench")
_PAIR: dict[tuple, Pair] = {}  # the verifier (and drafter) in memory: a sweep loads each model once


class ModelLoadError(RuntimeError):
    """The pair could not be loaded; the message names the key to change."""


def get_pair(cfg: DictConfig, method: Method) -> Pair:
    """The run's models: the verifier, and the drafter only if the method uses one (the verifier alone never
    resolves, builds or loads a drafter). A later run with the same verifier reuses it."""
    p = cfg.pair
    verifier = resolve_model(p.verifier, cfg.paths.cache, log.info)
    drafter = resolve_model(p.drafter, cfg.paths.cache, log.info) if method.uses_drafter else None
    check_available({"verifier": verifier} | ({"drafter": drafter} if drafter else {}), p.revision)
    key = (verifier, p.verifier_dtype or p.dtype, p.device, str(p.verifier_device_map), p.revision)
    pair = _PAIR.get(key)
    try:
        if pair is None:
            _PAIR.clear()  # one verifier in memory at a time
            device_map = p.verifier_device_map
            if isinstance(device_map, DictConfig):
                device_map = OmegaConf.to_container(device_map)
            pair = load_pair(
                drafter,
                verifier,
                dtype=p.dtype,
                drafter_dtype=p.drafter_dtype,
                verifier_dtype=p.verifier_dtype,
                device=p.device,
                verifier_device_map=device_map,
                revision=p.revision,
                log=log.info,
            )
        elif drafter is not None:
            wanted = str(resolve_dtype(p.drafter_dtype or p.dtype, resolve_device(p.device))).replace("torch.", "")
            if (pair.drafter_id, pair.drafter_dtype) != (drafter, wanted):
                pair = with_drafter(pair, drafter, p.drafter_dtype or p.dtype, p.device, p.revision, log.info)
    except (OSError, ValueError, RuntimeError) as e:  # missing files, tokenizer mismatch, too big to fit
        models = f"{p.drafter} + {p.verifier}" if drafter else p.verifier
        raise ModelLoadError(f"loading the pair (pair={p.name}: {models}) failed: {e}") from e
    _PAIR[key] = pair
    return pair


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `scancel` and pre-emption send), handled like Ctrl-C: the sample in flight is dropped,
    the lock released, the run marked interrupted."""


@contextlib.contextmanager
def sigterm_as_interrupt():
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        yield
        return

    def terminated(signum, frame):
        raise Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(cfg: DictConfig, method: Method | None = None) -> dict:
    """Run (or resume) the configured run; returns its summary. `method`: the config's, already validated."""
    with sigterm_as_interrupt():
        return _run(cfg, method)


def _run(cfg: DictConfig, method: Method | None) -> dict:
    method = method or validate(cfg)  # before anything expensive
    bench = make_benchmark(cfg.data)  # data errors surface before models load
    if cfg.threads is not None and not str(cfg.pair.device).startswith("cuda"):
        torch.set_num_threads(cfg.threads)  # on a CPU (a GPU run's host threads barely matter)
    store = RunStore.open(cfg)  # the run's (or shard's) lock first: a second writer is refused before any load
    tracker = NullTracker()
    try:
        pair = get_pair(cfg, method)
        settings = decoder_settings(cfg)
        decoder = build_decoder(pair, method, settings)
        bench.prepare(pair, f"{cfg.pair.name}-{method.tag}")
        tracker = make_tracker(cfg, store.folder)
        done = {s["index"]: s for s in store.samples()}
        items = bench.items(cfg.limit)
        mine = shard_items(items, store.shard)
        todo = [item for item in mine if bench.key(item) not in done]
        log.info(
            "run %s%s: %d items, %d already done, %d to go -> %s",
            RunIdentity.of(cfg).key,
            f" shard {store.shard[0]}/{store.shard[1]}" if store.shard else "",
            len(mine),
            len(mine) - len(todo),
            len(todo),
            store.folder,
        )
        device = str(decoder_device(pair))
        finished = [done[k] for k in sorted(done)]
        bar = tqdm(total=len(todo), desc=f"{cfg.method.name} {cfg.data.name}", disable=not cfg.progress)
        for record in bench.decode(decoder, todo):
            bar.update()
            here = timing.conditions(device, settings.batch_size)
            paired = timing.split_timing(record)
            record["conditions"] = here
            record["data"] = cfg.data.label  # self-describing: re-scoring checks it
            store.append(record)
            if paired is not None:
                store.append_timing(timing.timing_record(record["index"], paired, here))
            finished.append(record)
            tracker.log_sample(len(finished), record)
            live = metrics.derive(metrics.pool(finished))
            bar.set_postfix(AL=_shown(live["accepted_length"], "{:.2f}"), tok_s=_shown(live["tokens_per_s"], "{:.1f}"))
        bar.close()
        stored = store.stored_summary()
        covered = stored is not None and stored.get("samples", 0) > len(items)  # a smaller rerun adds no timing
        if method.uses_drafter and not covered and (cfg.paired_timing or (cfg.timing_sample and cfg.batch_size != 1)):
            time_sample(cfg, bench, pair, method, store, items, mine, device)
        summary = merge(cfg, method, bench, store, [bench.key(item) for item in items])
        # complete: this process's items are all stored (a shard's own; the run's summary says the rest)
        mine_done = summary["complete"] or (
            store.shard is not None and "/".join(map(str, store.shard)) not in summary["missing_shards"]
        )
        store.finish("complete" if mine_done else "incomplete", limit=cfg.limit)
        if cfg.tracking.backend != "none":
            tracker.log_figures(accepted_length_figure(finished, store.folder))
        tracker.finish(summary, store.samples())
        return summary
    except BaseException:
        with contextlib.suppress(StoreError):  # an unwritable folder must not hide the first error
            store.finish("interrupted")
        tracker.finish(None, [])
        raise


def relative_readings(cfg: DictConfig, samples: list[dict]) -> dict:
    """The run's relative metrics (Δ score, Rej, speedups) against this setting's stored reference runs, read
    as the tables read them (`metrics.read`: a withheld value is left out, a caveat kept). Stored in the run's
    summary as of when it was written; tables recompute them on the items every cell shares."""
    from .tracking import reference_samples

    refs, out = reference_samples(cfg), {}
    for m in metrics.METRICS.values():
        if m.relative is not None and refs.get(m.reference) is not None:
            reading = metrics.read(m, samples, refs)
            out.update({k: v for k, v in metrics.flatten(m.name, reading.value).items() if v is not None})
            if reading.caveat is not None:
                out[f"{m.name}_caveat"] = reading.caveat
    return out


def decoder_device(pair: Pair):
    return pair.verifier.get_input_embeddings().weight.device


def time_sample(cfg, bench, pair, method, store, items, mine, device) -> None:
    """Time the run's sample of items (all of them with paired_timing) at batch size 1, beside the verifier
    alone, where no timing under today's conditions exists yet (`timing.py`)."""
    chosen = list(mine) if cfg.paired_timing else choose_sample(bench, items, cfg.timing_sample, cfg.seed)
    mine_keys = {bench.key(it) for it in mine}
    here = timing.conditions(device, 1)
    stored = {s["index"]: s for s in store.samples()}
    timings = read_timings(store.folder)
    todo = timing.to_time([it for it in chosen if bench.key(it) in mine_keys], bench.key, timings, here)
    if not todo:
        return
    log.info(
        "timing %d item(s) at batch size 1 beside the verifier alone (%s)",
        len(todo),
        metrics.describe(metrics.condition_class(here)),
    )
    paired = build_decoder(pair, method, replace(decoder_settings(cfg), batch_size=1, paired_timing=True))
    for record in timing.time_items(bench, paired, todo, stored, here):
        store.append_timing(record)


def choose_sample(bench, items: list, n: int, seed: int) -> list:
    return timing.choose(items, bench.key, bench.order, n, seed)


def shard_items(items: list, shard: tuple[int, int] | None) -> list:
    """Shard i of n decodes items i, i + n, i + 2n, ... (round-robin: long and short items spread evenly)."""
    return items if shard is None else items[shard[0] :: shard[1]]


def merge(cfg: DictConfig, method: Method, bench: Benchmark, store: RunStore, wanted: list) -> dict:
    """The run's summary over every shard's samples. Written (with the benchmark's files) only when every
    wanted item is present exactly once, and never over a stored summary of more items (a rerun with a
    smaller limit reads a subset: it is returned, not written); otherwise the missing shards are named and
    the run stays incomplete. A duplicated item (two writers of one shard) is refused."""
    dup = duplicated_items(store.folder)
    if dup:
        item, files = next(iter(dup.items()))
        raise StoreError(
            f"{store.folder}: item {item} is stored more than once ({', '.join(files)}; {len(dup)} such items): "
            "two processes wrote it. Keep one line per item (delete the later copies) and run again to summarise."
        )
    have = {s["index"]: s for s in store.samples()}
    samples = [have[k] for k in wanted if k in have]
    summary = summarise(cfg, method, samples, bench)
    if method.uses_drafter:  # against this setting's stored reference runs, read as the tables read them
        summary.update(relative_readings(cfg, samples))
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


def _shown(value: float | None, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)  # "–" as in the tables: no figure, not a zero


def summarise(cfg: DictConfig, method: Method, samples: list[dict], bench: Benchmark) -> dict:
    ident = RunIdentity.of(cfg)
    return {
        "run_key": ident.key,
        "pair": ident.pair_name,
        "method": method.name,
        "params": dict(method.params),
        "data": cfg.data.name,
        "m": ident.m,  # null for the verifier alone: it drafts nothing
        "seed": cfg.seed,
        "experiment": cfg.experiment_name,
        **metrics.decode_metrics(samples),
        **bench.summarise(samples),
    }


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
