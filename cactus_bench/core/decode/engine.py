"""The decode loops (methods.md §2) over B rows at once, with continuous refill.

Every row is one request with its own committed tokens, cache positions, random stream, budget, EOS and
stop strings. A speculative round, for all rows together:

  draft   m drafter steps: the first feeds what the drafter's cache lacks (the last committed token after a
          rejection; the last two after a fully accepted round or the prompt: then rows lacking one rewrite
          their second to last, so one shape serves every row), the rest one token each; p_j is warped, d_j
          sampled with the row's uniform. Every row drafts m tokens; a row's draft counts up to its first
          EOS and its token budget (decided on the device: the law of what is kept is that of drafting one
          token at a time and stopping there). In a round where no row's budget reaches m (the end of a
          sequence) the eager engine takes fewer steps: the most any row can use (the shapes stay m's).
  verify  one verifier forward over each row's last committed token + its m drafts: q_1..q_{m+1}.
  accept  the rule decides every row at once (`Rule.verify` with n_drafts and the row's uniforms).
          A compiled engine runs the draft as one graph and verify + accept + the round's statistics as
          another (`programs`), and always takes m draft steps: one graph per first-step width and bucket.
  commit  the round's one host read: emitted tokens, accept counts, KL; rows commit their tokens, cut at
          EOS or the budget, and check stop strings. Rollback is setting positions for the next round.

When a row finishes, the next request takes its slot (its own prefill), so a long reply does not idle the
batch. Each row draws 2m + 1 uniforms per round from its own generator (m drafts, m accept tests, one
sample), whatever the batch size, so an item's tokens have the same law, and the same random numbers, at
any B: batched and unbatched runs differ only by floating-point rounding in batched matmuls. The
verifier-alone loop is the same with no drafter: one token per step for every row.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Collection, Iterator, Sequence

import torch
from torch import Tensor

from cactus_bench.core.decode import graphs, memory, programs
from cactus_bench.core.decode.buckets import buckets_between, capacity_for
from cactus_bench.core.decode.cache import ModelRunner, device_of, on, to_device
from cactus_bench.core.decode.jobs import EngineOptions, Job, PhaseClock, RoundPlan, Row, cut_tokens
from cactus_bench.core.decode.output_kl import support_for
from cactus_bench.core.decode.stats import GenerationOutput, counted, draft_budget, mark_nonfinite, raise_if_nonfinite
from cactus_bench.core.decode.warp import Warper
from cactus_bench.core.rules import Rule, build_rule

AR_BLOCK = 32  # the verifier-alone loop draws its uniforms in blocks of this many tokens per row
log = logging.getLogger("cactus_bench")
DEFAULT_OPTIONS = EngineOptions()


class ContextTooLong(ValueError):
    """Requests longer than a model's context: named before any is decoded."""


def _named(job: Job) -> str:
    """A job as a person knows it: its request's key (a task's item: `(task, index)`)."""
    key = getattr(job.handle, "key", None)
    return f"item {key[-1]}" if isinstance(key, tuple) and key else f"request {key!r}"


class Engine:
    """Decodes jobs with a rule (speculative) or with the verifier alone (`rule=None`, no drafter)."""

    def __init__(
        self,
        verifier,
        drafter=None,
        rule: Rule | None = None,
        m: int = 0,
        warper: Warper | None = None,
        vocab: int | None = None,
        eos: Collection[int] = frozenset(),
        options: EngineOptions = DEFAULT_OPTIONS,
    ):
        if rule is not None and (drafter is None or m < 1):
            raise ValueError("speculative decoding needs a drafter and m >= 1")
        self.warp, self.eos, self.options = warper or Warper(), set(eos), options
        if rule is not None and self.warp.greedy:  # at T = 0 every rule is exact-match acceptance: SpS's
            rule = build_rule("sps")
        self.verifier, self.drafter, self.rule, self.m = verifier, drafter, rule, m
        sizes = [verifier.config.vocab_size] + ([drafter.config.vocab_size] if drafter is not None else [])
        self.vocab = vocab or min(sizes)  # the verifier alone must sample the same vocabulary as a pair
        self.device = device_of(verifier)
        self.eos_ids = torch.tensor(sorted(self.eos), dtype=torch.long, device=self.device)
        # the output KL's support; none when the decode leaves its KL statistics out (a timed decode)
        self.support = support_for(self.warp.top_k, self.warp.greedy) if options.statistics else None
        self.on_round: Callable[[Engine, list[Row | None]], None] | None = None  # after each round (tests)
        self._warm: set[tuple[int, int]] = set()  # (rows, key bucket) whose graphs are compiled

    # --- running jobs --------------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, GenerationOutput]]:
        """Decode every job; yield each (job, output) as it finishes (B at a time, refilling slots)."""
        if not jobs:
            return
        for job in jobs:
            self._check(job)
        self._refuse_overlong(jobs)
        lookahead = self.m + 1 if self.rule is not None else 0
        capacity = capacity_for(max(len(j.prompt) + j.max_new_tokens for j in jobs) + lookahead + 1)
        if self.options.batch_size == "auto":
            models = [self.verifier] + ([self.drafter] if self.rule is not None else [])
            rows = memory.rows_for(models, capacity, lookahead, self.vocab, max(len(j.prompt) for j in jobs))
        else:
            rows = int(self.options.batch_size)
        rows = min(rows, len(jobs))
        timer, compile = self.options.forward_timer, self.options.compile
        self.vm = ModelRunner(self.verifier, rows, capacity, compile, timer)
        self.dm = ModelRunner(self.drafter, rows, capacity, compile, timer) if self.rule is not None else None
        if compile:
            shortest = min(len(j.prompt) for j in jobs)
            log.info(
                "compiling the decode forwards (%s) before the first item: %s",
                compile,
                self.graph_plan(shortest, capacity),
            )
            if self.options.warm_up:
                self._warm_up(rows, shortest, capacity)
        queue = list(jobs)
        slots: list[Row | None] = [None] * rows
        with torch.inference_mode():
            while True:
                free = [b for b in range(rows) if slots[b] is None][: len(queue)]
                if free:  # continuous refill: free slots take the next jobs (one prefill for all of them)
                    for b, admitted in zip(free, self._admit(free, [queue.pop(0) for _ in free])):
                        slots[b] = admitted
                if all(r is None for r in slots):
                    return
                finished = self._round(slots) if self.rule is not None else self._ar_step(slots)
                ended = time.perf_counter()  # every live row committed tokens this round: a streamed chunk
                for row in slots:
                    if row is not None:
                        row.chunk_times.append(ended - row.start)
                if self.on_round is not None:
                    self.on_round(self, slots)
                for b, reason in finished:
                    row = slots[b]
                    assert row is not None  # a finished slot held a row
                    slots[b] = None
                    out = GenerationOutput(
                        row.generated,
                        row.rounds,
                        row.prefill,
                        time.perf_counter() - row.start,
                        reason,
                        row.has_kl,
                        graphs_compiled=graphs.COMPILES.graphs - row.graphs_before,
                        chunk_times=row.chunk_times,
                        prompt_tokens=len(row.job.prompt),
                    )
                    yield row.job, out

    def graph_plan(self, shortest: int, capacity: int) -> str:
        """How many graphs a run compiles: each forward width times each key bucket its rows pass through
        (then every later item and run reuses them)."""
        buckets = buckets_between(shortest, capacity)
        widths = {"verifier": [self.m + 1] if self.rule is not None else [1]}
        if self.rule is not None:
            widths["drafter"] = [2, 1]  # a whole draft whose first step feeds two tokens, or one
        parts = [f"{name} {len(w)} width(s) x {len(buckets)} buckets" for name, w in widths.items()]
        total = sum(len(w) for w in widths.values()) * len(buckets)
        return f"up to {total} graphs ({'; '.join(parts)}: {', '.join(map(str, buckets))} positions)"

    def _warm_up(self, rows: int, shortest: int, capacity: int) -> None:
        """Compile every graph the run will need before any item is timed: per key bucket a sequence passes
        through, one round (verifier alone: one step) with every row just inside the bucket, on fake rows
        (their cache writes land past anything a real row reads). On CUDA each runs twice, so CUDA graph
        trees record it as well. Graphs a later run of the same shapes finds compiled cost one round each."""
        lookahead = self.m if self.rule is not None else 0
        todo = [b for b in buckets_between(shortest, capacity) if (rows, b) not in self._warm]
        if not todo:
            return
        before, start = graphs.COMPILES.graphs, time.perf_counter()
        runners = [r for r in (self.vm, self.dm) if r is not None]
        timer = self.options.forward_timer
        for runner in runners:
            runner.timer = None  # a forward timer counts decode forwards only, never the warm-up's
        with torch.inference_mode():
            for runner in runners:  # caches allocate at their first (eager) prefill, never in a graph
                runner.prefill(list(range(rows)), [[0]] * rows)
            # the draft's first step feeds two tokens, or one: each its own graph of the whole draft
            lags = (2, 1) if self.rule is not None else (1,)
            for bucket in todo:
                length = max(bucket - lookahead, 2)  # every forward of the round reads this bucket's keys
                for _, lag in itertools.product(range(2 if self.device.type == "cuda" else 1), lags):
                    job = Job([0] * length, lookahead + 2, torch.Generator().manual_seed(0))
                    fake: list[Row | None] = [Row(job, [0] * length, 0.0, 0.0, lag=lag) for _ in range(rows)]
                    self._round(fake) if self.rule is not None else self._ar_step(fake)
                self._warm.add((rows, bucket))
        for runner in runners:
            runner.timer = timer
        log.info(
            "warm-up: %d graph(s) compiled in %.1fs (%d rows; key buckets %s)",
            graphs.COMPILES.graphs - before,
            time.perf_counter() - start,
            rows,
            ", ".join(map(str, todo)),
        )

    def _check(self, job: Job) -> None:
        if job.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {job.max_new_tokens}")
        if not job.prompt:
            raise ValueError("the prompt is empty: a prompt needs at least one token (e.g. BOS)")
        if self.rule is not None and len(job.prompt) < 2:
            raise ValueError("speculative decoding needs a prompt of at least two tokens (e.g. BOS + text)")

    def _refuse_overlong(self, jobs: Sequence[Job]) -> None:
        """Every job that cannot fit a model's context, named at once, before anything is decoded."""
        lookahead = self.m + 1 if self.rule is not None else 0
        for name, model in (("drafter", self.drafter if self.rule is not None else None), ("verifier", self.verifier)):
            limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
            if limit is None:
                continue
            over = [(job, len(job.prompt) + job.max_new_tokens + lookahead) for job in jobs]
            over = [(job, needed) for job, needed in over if needed > limit]
            if over:
                raise ContextTooLong(
                    f"the {name}'s context is {limit} tokens, but {len(over)} of {len(jobs)} request(s) need more "
                    f"(prompt + max_new_tokens{' + the draft lookahead ' + str(lookahead) if lookahead else ''}): "
                    + ", ".join(f"{_named(job)} needs {needed} (prompt {len(job.prompt)})" for job, needed in over[:8])
                    + (f" and {len(over) - 8} more" if len(over) > 8 else "")
                    + ". Nothing was decoded. Lower max_gen_toks, leave those items out (limit=...), or use "
                    "models with a longer context."
                )

    def _admit(self, slots: list[int], jobs: list[Job]) -> list[Row]:
        """Jobs enter free slots: each prompt but its last token goes into the verifier's cache, all but the
        last two into the drafter's (every forward feeds what its cache lacks)."""
        start = time.perf_counter()
        self.vm.prefill(slots, [job.prompt[:-1] for job in jobs])
        if self.dm is not None:
            self.dm.prefill(slots, [job.prompt[:-2] for job in jobs])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        prefill = time.perf_counter() - start
        compiled = graphs.COMPILES.graphs
        return [Row(job, list(job.prompt), start, prefill, graphs_before=compiled) for job in jobs]

    # --- one speculative round -------------------------------------------------------------------------
    def _round(self, slots: list[Row | None]) -> list[tuple[int, str]]:
        """One speculative round for every row at once: draft → verify → accept → commit. A compiled engine
        makes two calls (`programs`): the whole draft, then verify with the rule's decision and the round's
        statistics (the rule's time is then the verify's)."""
        clock = PhaseClock(self.device, self.options.sync_timing)
        plan = self._plan(slots)
        steps = self.m if self.options.compile else plan.steps  # a graph per draft length would compile in items
        d, p, raw_p = self._draft(plan, steps)
        t_draft = clock.lap()
        rule, vm, m = self.rule, self.vm, self.m
        assert rule is not None
        fixed = (self.vocab, self.warp)
        if self.options.compile:
            decide_args = (vm.model, vm.cache, vm.cache_kw, vm.impl, plan.verify_at, plan.last, on(d, vm.device), p,
                           raw_p, plan.u_verify, plan.budget, self.eos_ids, *fixed, rule, self.support,
                           self.options.statistics)  # fmt: skip
            (verdict,) = vm.run(programs.verify_and_decide, decide_args, plan.reach + m)
            t_verify = clock.lap()
        else:
            args = (vm.model, vm.cache, vm.cache_kw, vm.impl, plan.verify_at, plan.last, d, *fixed, rule.needs_raw)
            v_logits, q = vm.run(programs.verify, args, plan.reach + m)
            t_verify = clock.lap()
            verdict = programs.decide(rule, d, p, raw_p, q, v_logits, plan.u_verify, plan.budget, self.eos_ids,
                                      self.support, self.options.statistics)  # fmt: skip
        host = verdict.tolist()  # the round's one host read
        t_rule = clock.lap()
        finished = self._commit_rows(slots, host, steps, (t_draft, t_verify, t_rule), p)
        other = clock.lap()
        for row in slots:
            if row is not None:
                row.rounds.t_other[-1] = other
        return finished

    def _plan(self, slots: list[Row | None]) -> RoundPlan:
        """The round's uniforms, and its host values in one transfer."""
        m = self.m
        # each row's uniforms: one per draft ([B, 1] each), then the accept tests and the sampled token [B, m+1]
        *u_drafts, u_verify = self._uniforms(slots, 2 * m + 1).split([1] * m + [m + 1], 1)
        # the first draft step feeds what the drafter lacks (one token, or two if any row lacks two)
        lengths = [len(r.committed) if r is not None else 2 for r in slots]
        lag = max(r.lag for r in slots if r is not None)
        # drafts no row's token budget can use are not drafted by the eager engine (a sequence's last round);
        # their slots are filled later so every shape stays that of m drafts
        budgets = [draft_budget(m, r.left) if r is not None else 0 for r in slots]
        # one transfer, each a view of it: the drafter's and the verifier's write positions, each row's draft
        # budget, what the drafter is fed first, the verifier's first token
        fed = [(r.committed[-lag:], r.committed[-1]) if r is not None else ([0] * lag, 0) for r in slots]
        given = to_device(
            [[n - lag, n - 1, b, *first, last] for n, b, (first, last) in zip(lengths, budgets, fed)],
            torch.long,
            self.device,
        )
        draft_at, verify_at, budget, *first, last = given.unbind(1)
        return RoundPlan(u_drafts, u_verify, max(lengths), max(budgets), draft_at, verify_at, budget, first, last)

    def _draft(self, plan: RoundPlan, steps: int) -> tuple[Tensor, Tensor, Tensor | None]:
        """`programs.draft` on the drafter: m drafts per row [B, m] (zeros past `steps`), their p
        [B, steps, V], and the raw probabilities a rule may read."""
        dm, rule = self.dm, self.rule
        assert dm is not None and rule is not None  # a speculative engine has both
        args = (dm.model, dm.cache, dm.cache_kw, dm.impl, plan.draft_at, plan.first, plan.u_drafts, steps, self.m,
                self.vocab, self.warp, rule.needs_raw)  # fmt: skip
        return dm.run(programs.draft, args, programs.draft_reach(plan.reach, self.m), forwards=steps)

    def _commit_rows(self, slots, host, steps: int, times, p: Tensor | None) -> list[tuple[int, str]]:
        """Each row commits its accepted drafts and the sampled token, cut at EOS or its budget, and checks
        its stop strings; returns the rows that finished, with why."""
        m, finished = self.m, []
        assert self.rule is not None
        measures_kl = self.rule.measures_kl and self.options.statistics
        for b, row in enumerate(slots):
            if row is None:
                continue
            drafted, sampled, c = host[b][:m], host[b][m], counted(host[b][m + 1 :])
            raise_if_nonfinite(sampled, {"verifier": self.verifier, "drafter": self.drafter}, p)
            n = int(c["accepted"])
            tokens, reason = cut_tokens([int(t) for t in drafted[:n]] + [int(sampled)], self.eos, row.left)
            row.committed += tokens
            row.generated += tokens
            row.lag = 2 if n == steps else 1  # it never fed its last draft; after a rejection it has d_1..d_n
            if reason is None and row.job.stop is not None and row.job.stop(row.generated):
                reason = "stop"
            row.has_kl = row.has_kl or measures_kl
            row.rounds.record(c, accepted=min(n, len(tokens)), emitted=len(tokens), times=times)
            if reason is not None:
                finished.append((b, reason))
        return finished

    # --- one verifier-alone step -------------------------------------------------------------------------
    def _ar_step(self, slots: list[Row | None]) -> list[tuple[int, str]]:
        clock = PhaseClock(self.device, self.options.sync_timing)
        lengths = [len(r.committed) if r is not None else 1 for r in slots]
        self.vm.set_positions([n - 1 for n in lengths])
        x = to_device([[r.committed[-1] if r is not None else 0] for r in slots], torch.long, self.vm.device)
        u = on(torch.stack([self._next_ar_uniform(r) for r in slots]), self.vm.device)  # [B, 1]
        _, q, token = self.vm.forward(x, max(lengths), 1, self.vocab, self.warp, u, advance=False)
        assert token is not None  # sampled: uniforms were given
        t_verify = clock.lap()
        tokens = [t for (t,) in mark_nonfinite(token, q).tolist()]  # the one sync per token
        t_rule = clock.lap()
        finished = []
        for b, row in enumerate(slots):
            if row is None:
                continue
            raise_if_nonfinite(tokens[b], {"verifier": self.verifier})
            t = int(tokens[b])
            row.committed.append(t)
            row.generated.append(t)
            reason = "eos" if t in self.eos else ("length" if row.left <= 0 else None)
            if reason is None and row.job.stop is not None and row.job.stop(row.generated):
                reason = "stop"
            row.rounds.record_token(t_verify, t_rule, clock.lap())
            if reason is not None:
                finished.append((b, reason))
        return finished

    def _next_ar_uniform(self, row: Row | None) -> Tensor:
        """The row's next uniform (a host tensor [1]), from blocks of AR_BLOCK drawn from its generator."""
        if row is None:
            return torch.zeros(1, dtype=torch.float64)
        if row.block is None or row.used == AR_BLOCK:
            row.block, row.used = torch.rand(AR_BLOCK, generator=row.job.generator, dtype=torch.float64), 0
        row.used += 1
        return row.block[row.used - 1 : row.used]

    def _uniforms(self, slots: list[Row | None], n: int) -> Tensor:
        """Each row's next n uniforms from its own generator ([B, n]; zeros for empty slots), drawn on the host
        (generators are CPU generators: an item's stream is the same on any device) and queued to the device."""
        f64 = torch.float64
        if len(slots) == 1 and slots[0] is not None:  # one row: drawn as [1, n] (the same stream), no stack
            host = torch.rand((1, n), generator=slots[0].job.generator, dtype=f64)
        else:
            empty: list[Tensor] = [torch.zeros(n, dtype=f64)] if None in slots else []  # only if one is
            host = torch.stack(
                [torch.rand(n, generator=r.job.generator, dtype=f64) if r is not None else empty[0] for r in slots]
            )
        return host.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else host
