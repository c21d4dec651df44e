"""One run end to end: validate, load the pair, decode the benchmark sample by sample into the store
(resuming what is there), score each sample with lm-eval's task code, and summarise."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from dataclasses import replace

import torch
from omegaconf import DictConfig

from cactus_bench.adapters.benchmarks.base import Benchmark, make_benchmark
from cactus_bench.adapters.benchmarks.data import DataError
from cactus_bench.adapters.embedded import resolve_model
from cactus_bench.app import offline, timing
from cactus_bench.app.config import RunSpec, validate
from cactus_bench.app.progress import progress, quiet_third_party_bars, shown, shown_path
from cactus_bench.app.store import RunStore, StoreError, read_timings
from cactus_bench.app.summary import merge
from cactus_bench.app.tracking import NullTracker, accepted_length_figure, make_tracker
from cactus_bench.backends.hf.loader import PairUnavailable
from cactus_bench.core import metrics
from cactus_bench.core.decode.api import Decoder, ModelLoadError, backend, build_decoder
from cactus_bench.core.metrics.timing_conditions import condition_class, describe

log = logging.getLogger("cactus_bench")


def benchmark_or_everything_missing(spec: RunSpec) -> Benchmark:
    """The run's benchmark. Offline, what is missing is named at once, models and dataset together: a user
    without network learns everything to fetch in one paragraph, not one thing per attempt."""
    cfg = spec.cfg
    try:
        bench, problems = make_benchmark(cfg.data), []
    except DataError as e:
        if not offline.is_offline():
            raise
        bench, problems = None, [str(e)]
    if offline.is_offline():
        check = backend(cfg.engine.backend).missing
        if check is not None:
            problems += check(spec.models)  # the configured names: nothing is built or loaded
    if problems:
        raise DataError(f"offline, and not here: {' '.join(problems)}")
    return bench


def models_of(spec: RunSpec):
    """The run's models, an embedded pair's names resolved to its folder (built on first use)."""
    return spec.loading(lambda name: resolve_model(name, spec.cfg.paths.cache, log.info))


def get_decoder(spec: RunSpec, **changes) -> Decoder:
    """The run's decoder from its backend, which loads (or reuses) the models; `changes` to the decode
    spec (e.g. batch_size=1, paired_timing=True for the timing sample)."""
    try:
        return build_decoder(models_of(spec), replace(spec.decode, **changes))
    except ModelLoadError as e:  # named as the run is filed: a pair's models overridden are not that pair
        raise ModelLoadError(f"pair {spec.identity.pair_name}: {e}") from e


class Terminated(KeyboardInterrupt):
    """SIGTERM (what `scancel` and pre-emption send), handled like Ctrl-C: the sample in flight is dropped,
    the lock released, the run marked interrupted."""


SIGNALLED: list[int] = []  # the signals this process's run was sent (read between items)


def interrupt(signum: int) -> KeyboardInterrupt:
    return Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()


def raise_if_signalled() -> None:
    """Between items: end the run if a signal came whose exception was swallowed where it was raised (Python
    runs a handler in whatever frame is current: one raised inside a finalizer is printed and dropped)."""
    if SIGNALLED:
        raise interrupt(SIGNALLED[0])


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM and Ctrl-C end the run the same way, and are remembered until the next item boundary."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers live in the main thread
        yield
        return

    def on_signal(signum, frame):
        SIGNALLED.append(signum)
        raise interrupt(signum)

    SIGNALLED.clear()
    # Ctrl-C only where Python would raise it: a process started with SIGINT ignored (a background job of a
    # shell without job control) keeps ignoring it
    caught = [signal.SIGTERM] + (
        [signal.SIGINT] if signal.getsignal(signal.SIGINT) is signal.default_int_handler else []
    )
    previous = {s: signal.signal(s, on_signal) for s in caught}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def run(target: RunSpec | DictConfig, time_sample: bool = True) -> dict:
    """Run (or resume) a run, validated (a `RunSpec`) or as composed; returns its summary. `time_sample=False`
    leaves its timing sample to `time_together` (a sweep times its cells' samples together)."""
    spec = target if isinstance(target, RunSpec) else validate(target)  # before anything expensive
    with sigterm_as_interrupt():
        return _run(spec, time_sample)


def _run(spec: RunSpec, time_sample: bool = True) -> dict:
    cfg, ident = spec.cfg, spec.identity
    offline.use_local_data(cfg)
    quiet_third_party_bars()
    bench = benchmark_or_everything_missing(spec)  # data errors surface before models load
    if cfg.threads is not None and not str(cfg.pair.device).startswith("cuda"):
        torch.set_num_threads(cfg.threads)  # on a CPU (a GPU run's host threads barely matter)
    store = RunStore.open(spec)  # the run's (or shard's) lock first: a second writer is refused before any load
    tracker = NullTracker()
    try:
        try:
            decoder = get_decoder(spec)
        except (ModelLoadError, PairUnavailable, ValueError, MemoryError):  # refused before any item: no run
            store.discard()
            raise
        bench.prepare(decoder, ident.model_id)
        tracker = make_tracker(cfg, store.folder, ident)
        done = {s["index"]: s for s in store.samples()}
        items = bench.items(cfg.limit)
        mine = shard_items(items, store.shard)
        todo = [item for item in mine if bench.key(item) not in done]
        log.info(
            "run %s%s: %d of %d items to go -> %s",
            ident.key,
            f" shard {store.shard[0]}/{store.shard[1]}" if store.shard else "",
            len(todo),
            len(mine),
            shown_path(store.folder),
        )
        device = decoder.device
        finished = [done[k] for k in sorted(done)]
        bar = progress(len(todo), f"{cfg.method.name} {cfg.data.label}", cfg.progress)
        for record in bench.decode(decoder, todo):
            raise_if_signalled()  # the item decoded while a swallowed signal came is not stored
            here = timing.conditions(device, cfg.batch_size)
            paired = timing.split_timing(record)
            record["conditions"] = here
            record["data"] = cfg.data.label  # self-describing: re-scoring checks it
            store.append(record)
            if paired is not None:
                store.append_timing(timing.timing_record(record["index"], paired, here))
            finished.append(record)
            tracker.log_sample(len(finished), record)
            live = metrics.derive(metrics.pool(finished))
            bar.set_postfix(AL=shown(live["accepted_length"], "{:.2f}"), tok_s=shown(live["tokens_per_s"], "{:.1f}"))
            bar.update()  # after the figures: a line printed now shows this item's (it showed the one before)
        bar.close()
        if (cfg.paired_timing or time_sample) and times_a_sample(spec, store, items):
            time_alone(spec, bench, store, items, mine, device)
        return summarise(spec, bench, store, items, tracker, finished)
    except BaseException:
        with contextlib.suppress(StoreError):  # an unwritable folder must not hide the first error
            store.finish("interrupted")
        tracker.finish(None, [])
        raise


def summarise(spec: RunSpec, bench, store, items, tracker, finished: list[dict]) -> dict:
    """Merge the run's summary, record how this process ended, and hand both to the tracker."""
    cfg = spec.cfg
    summary = merge(spec, bench, store, [bench.key(item) for item in items])
    # complete: this process's items are all stored (a shard's own; the run's summary says the rest)
    mine_done = summary["complete"] or (
        store.shard is not None and "/".join(map(str, store.shard)) not in summary["missing_shards"]
    )
    store.finish("complete" if mine_done else "incomplete", limit=cfg.limit)
    if cfg.tracking.backend != "none":
        tracker.log_figures(accepted_length_figure(finished, store.folder))
    tracker.finish(summary, store.samples())
    return summary


def times_after_decoding(spec: RunSpec) -> bool:
    """Whether the run times items after decoding them: a drafting method with paired timing (a resume times
    what was decoded untimed) or a batched one with a timing sample."""
    cfg = spec.cfg
    return spec.method.uses_drafter and bool(cfg.paired_timing or (cfg.timing_sample and cfg.batch_size != 1))


def times_a_sample(spec: RunSpec, store, items) -> bool:
    """`times_after_decoding`, unless its stored summary covers more items (a smaller rerun adds no timing)."""
    stored = store.stored_summary()
    return times_after_decoding(spec) and not (stored is not None and stored.get("samples", 0) > len(items))


def sample_to_time(spec: RunSpec, bench, store, items, mine, here: dict) -> list:
    """The run's items to time (its sample, all of them with paired_timing) that lack a timing under today's
    conditions (`timing.to_time`)."""
    cfg = spec.cfg
    chosen = list(mine) if cfg.paired_timing else choose_sample(bench, items, cfg.timing_sample, cfg.seed)
    mine_keys = {bench.key(it) for it in mine}
    return timing.to_time(
        [it for it in chosen if bench.key(it) in mine_keys], bench.key, read_timings(store.folder), here
    )


def time_alone(spec: RunSpec, bench, store, items, mine, device) -> None:
    """Time the run's sample at batch size 1, each item beside the verifier alone (`timing.py`)."""
    here = timing.conditions(device, 1)
    todo = sample_to_time(spec, bench, store, items, mine, here)
    if not todo:
        return
    log.info(
        "timing %d item(s) at batch size 1 beside the verifier alone (%s)",
        len(todo),
        describe(condition_class(here)),
    )
    # its samples' statistics are the batched decode's: the timed decodes leave the KLs out, as the authors' do
    paired = get_decoder(spec, batch_size=1, paired_timing=True, statistics=False)
    stored = {s["index"]: s for s in store.samples()}
    for record in timing.time_items(bench, paired, todo, stored, here):
        store.append_timing(record)


def choose_sample(bench, items: list, n: int, seed: int) -> list:
    return timing.choose(items, bench.key, bench.order, n, seed)


def shard_items(items: list, shard: tuple[int, int] | None) -> list:
    """Shard i of n decodes items i, i + n, i + 2n, ... (round-robin: long and short items spread evenly)."""
    return items if shard is None else items[shard[0] :: shard[1]]
