"""Timing a sweep's runs together. The drafting runs of a sweep that share one verifier-alone decode of each
item (the same verifier, data, limit, seed, sampling and timing sample: a cell's rows) time their samples
as one group: each item is decoded by the verifier alone once and by every run's method, back to back, in
an order that rotates from item to item (`decode.api.PairedGroup`). Each run's `timing.jsonl` gets the
same records as when it times its sample alone (the verifier alone's time of the item, the method's, the
parts the cost model reads), with `paired_methods`: how many methods shared the verifier-alone decode.

Against each run timing its sample beside verifier-alone decodes of its own, a group costs one
verifier-alone decode per item instead of one per run (the slowest decode of the lot), and two methods'
times of an item are taken moments apart, so a ratio between methods (speedup vs SpS) pairs them
directly. The runs decode first (batched, their summaries written without the timed metrics), the group is
timed, and each timed run's summary is merged again; an interrupted group resumes with the items each run
lacks."""

from __future__ import annotations

import logging
from dataclasses import replace

from cactus_bench.adapters.benchmarks.base import one_request_per_item
from cactus_bench.app import timing
from cactus_bench.app.config import RunSpec
from cactus_bench.app.run import (
    benchmark_or_everything_missing,
    get_decoder,
    models_of,
    raise_if_signalled,
    sample_to_time,
    shard_items,
    sigterm_as_interrupt,
    summarise,
    times_a_sample,
    times_after_decoding,
)
from cactus_bench.app.store import RunStore, StoreError
from cactus_bench.app.tracking import make_tracker
from cactus_bench.core.decode.api import DecodeSpec, PairedGroup, verifier_alone_decoder
from cactus_bench.core.metrics.timing_conditions import condition_class, describe

log = logging.getLogger("cactus_bench")


def times_together(spec: RunSpec) -> bool:
    """Whether a run can time its sample in a group: a drafting run that times a sample after a batched
    decode (with paired_timing it times each item as it decodes it), on a benchmark whose items are one
    request each (a Spec-Bench question's second turn follows the method's own first answer)."""
    return times_after_decoding(spec) and not spec.cfg.paired_timing and one_request_per_item(spec.cfg.data)


def groups_of(specs: list[RunSpec]) -> list[list[RunSpec]]:
    """The runs that time together (`times_together`), grouped by what their verifier-alone decodes share."""
    groups: list[tuple[tuple, list[RunSpec]]] = []
    for spec in specs:
        cfg = spec.cfg
        if not times_together(spec):
            continue
        key = (
            baseline_spec(spec),
            replace(spec.models, drafter=None, drafter_dtype=None),
            str(cfg.data),
            cfg.limit,
            cfg.seed,
            cfg.timing_sample,
            cfg.get("shard"),
        )
        members = next((m for k, m in groups if k == key), None)
        if members is None:
            groups.append((key, [spec]))
        else:
            members.append(spec)
    return [members for _, members in groups]


def baseline_spec(spec: RunSpec) -> DecodeSpec:
    """The decode spec of the verifier alone's timed decodes beside this run's (batch size 1, no KLs)."""
    return replace(spec.decode, batch_size=1, statistics=False).verifier_alone()


def time_together(specs: list[RunSpec]) -> None:
    """Time the runs' samples, group by group (`groups_of`), and merge each timed run's summary again."""
    with sigterm_as_interrupt():
        for members in groups_of(specs):
            _time_group(members)


class _Member:
    """One run of a group: its store (its lock held), benchmark, items, and what it has left to time."""

    def __init__(self, spec: RunSpec):
        cfg = spec.cfg
        self.spec, self.name = spec, spec.identity.key
        self.bench = benchmark_or_everything_missing(spec)
        self.store = RunStore.open(spec)
        try:
            self.decoder = get_decoder(spec, batch_size=1, statistics=False)  # the method alone; the group pairs it
            self.bench.prepare(self.decoder, spec.identity.model_id)
        except BaseException:  # not yet a member: its run is marked here, its lock released
            self.store.finish("failed")
            raise
        self.items = self.bench.items(cfg.limit)
        self.here = timing.conditions(self.decoder.device, 1)
        timed = times_a_sample(spec, self.store, self.items)
        mine = shard_items(self.items, self.store.shard)
        self.todo = sample_to_time(spec, self.bench, self.store, self.items, mine, self.here) if timed else []
        self.by_key = {self.bench.key(it): it for it in self.todo}
        self.stored = {s["index"]: s for s in self.store.samples()} if self.todo else {}


def _time_group(specs: list[RunSpec]) -> None:
    members: list[_Member] = []
    try:
        for spec in specs:
            members.append(_Member(spec))
        keys = list(dict.fromkeys(k for m in members for k in m.by_key))  # the sample's order, each item once
        if keys:
            here = members[0].here
            log.info(
                "timing %d item(s) of %d runs together, each beside one verifier-alone decode (%s)",
                len(keys),
                sum(1 for m in members if m.todo),
                describe(condition_class(here)),
            )
            first = members[0].spec
            baseline = verifier_alone_decoder(models_of(first), baseline_spec(first))
            group = PairedGroup({m.name: m.decoder for m in members}, baseline)
            for key in keys:
                raise_if_signalled()
                timed = [m for m in members if key in m.by_key]
                group.expect([m.name for m in timed])
                for m in timed:
                    record = next(timing.time_items(m.bench, group.member(m.name), [m.by_key[key]], m.stored, here))
                    m.store.append_timing(record)
        while members:  # each run's summary again, now with its timings (and its references' timings)
            m = members[0]
            tracker = make_tracker(m.spec.cfg, m.store.folder, m.spec.identity)
            summarise(m.spec, m.bench, m.store, m.items, tracker, m.store.samples())  # releases its lock
            members.pop(0)
    except BaseException:
        for m in members:
            try:
                m.store.finish("interrupted")
            except StoreError:  # an unwritable folder must not hide the first error
                pass
        raise
