"""Round statistics of one generation: what each verifier call drafted, accepted and emitted, and where
the time went. The metrics themselves are defined once, in `cactus_bench.core.metrics`."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch
from torch import Tensor

from cactus_bench.core import metrics
from cactus_bench.core.rules.base import positions


@dataclass
class Rounds:
    """Per-round statistics, one entry per verifier call (columnar, JSON-friendly)."""

    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)  # drafts accepted before the first rejection
    accepted_any: list[int] = field(default_factory=list)  # drafts whose accept test passed, any position
    emitted: list[int] = field(default_factory=list)  # tokens committed this round (accepted + 1, or cut)
    t_draft: list[float] = field(default_factory=list)
    t_verify: list[float] = field(default_factory=list)
    t_rule: list[float] = field(default_factory=list)
    t_other: list[float] = field(default_factory=list)
    kl_sum: list[float] = field(default_factory=list)  # Σ KL(h‖q) (the target's) over the positions decided
    kl_count: list[int] = field(default_factory=list)
    out_kl_sum: list[float] = field(default_factory=list)  # Σ KL(P_out‖q) (what is emitted) over them
    out_kl_count: list[int] = field(default_factory=list)
    out_kl_skipped: list[int] = field(default_factory=list)  # decided positions whose support was too large

    def add(self, **row) -> None:
        """One round: every column at once (a column left out would leave the others ragged)."""
        if row.keys() != COLUMNS:
            missing, unknown = sorted(COLUMNS - row.keys()), sorted(row.keys() - COLUMNS)
            raise ValueError(f"Rounds.add needs every column: missing {missing}, unknown {unknown}")
        for k, v in row.items():
            getattr(self, k).append(v)

    def record(
        self, c: dict[str, float], accepted: int, emitted: int, times: tuple[float, float, float], t_other=0.0
    ) -> None:
        """One round of a decode backend: its counted columns (`counted`) read back, the accepted drafts and
        emitted tokens it committed (cut at EOS or the budget), its draft, verify and rule times (t_other: the
        rest, often set once the round's rows have all committed). Every backend records through here, so a
        new counter is a column, its place in `COUNTED` and `round_columns`, and its sum in `counters`."""
        t_draft, t_verify, t_rule = times
        self.add(
            drafted=int(c["drafted"]),
            accepted=accepted,
            accepted_any=int(c["accepted_any"]),
            emitted=emitted,
            t_draft=t_draft,
            t_verify=t_verify,
            t_rule=t_rule,
            t_other=t_other,
            kl_sum=c["kl_sum"],
            kl_count=int(c["kl_count"]),
            out_kl_sum=c["out_kl_sum"],
            out_kl_count=int(c["out_kl_count"]),
            out_kl_skipped=int(c["out_kl_skipped"]),
        )

    def record_token(self, t_verify: float = 0.0, t_rule: float = 0.0, t_other: float = 0.0) -> None:
        """A call that emitted one token and tested no draft (the verifier alone's step)."""
        self.record(NOTHING_COUNTED, accepted=0, emitted=1, times=(0.0, t_verify, t_rule), t_other=t_other)


COLUMNS = frozenset(f.name for f in fields(Rounds))  # checked once per round: a set compare, no reflection
# what `round_columns` returns, in order
COUNTED = ("accepted", "drafted", "accepted_any", "kl_count", "out_kl_count", "out_kl_skipped", "kl_sum", "out_kl_sum")
NOTHING_COUNTED = dict.fromkeys(COUNTED, 0.0)


def draft_budget(drafted: int, left: int) -> int:
    """How many of a round's drafts can count: its drafts, but no more than the tokens left (`left`) but one,
    the round's own sample."""
    return max(min(drafted, left - 1), 0)


def through_eos(d: Tensor, eos_ids: Tensor) -> Tensor:
    """Each row's drafts [B, m] up to and including its first EOS draft [B] (m where there is none)."""
    m = d.shape[1]
    if not len(eos_ids):
        return torch.full((d.shape[0],), m, dtype=torch.long, device=d.device)
    hit = torch.isin(d, eos_ids)
    return torch.where(hit, positions(m, d.device, start=1), m).min(-1).values


def counted_drafts(budget: Tensor, through_eos: Tensor) -> Tensor:
    """The drafts of a round that count [B]: within its `draft_budget`, up to the first drafted EOS
    (`through_eos`: the drafts up to and including it, m where there is none)."""
    return torch.minimum(budget, through_eos)


# A model whose logits are not finite (NaN weights, an overflow) has all-NaN warped probabilities (a softmax
# of them; `Warper`'s one-hot the same): 0 × their first column is then NaN instead of 0, and added to the
# token a step returns, it makes the round's one host read say so (no extra read). Which model it was is
# looked up on the host, only then.


class NonFiniteModel(ValueError):
    """A model's logits were NaN or infinite: what it decodes means nothing."""


def mark_nonfinite(token: Tensor, *probs: Tensor | None) -> Tensor:
    """`token` [B, 1] (as float), NaN in each row where one of `probs` ([B, k, V] each) is not finite."""
    firsts = [pr[..., 0] for pr in probs if pr is not None]
    first = firsts[0] if len(firsts) == 1 else torch.cat(firsts, -1)  # one sum for every model: fewer ops
    return token + 0.0 * first.sum(-1, keepdim=True)


def raise_if_nonfinite(token: float, models: dict[str, object], drafter_probs: Tensor | None = None) -> None:
    """One paragraph naming the model, when a step's token came back NaN (`mark_nonfinite`): the drafter if
    its probabilities `drafter_probs` are not finite, else the verifier."""
    if token == token:  # not NaN
        return
    role = "drafter" if drafter_probs is not None and not bool(torch.isfinite(drafter_probs).all()) else "verifier"
    name = getattr(getattr(models.get(role), "config", None), "_name_or_path", "?")
    raise NonFiniteModel(
        f"the {role} ({name}) produced NaN or infinite logits, so nothing it decodes means anything and the "
        "run stops before storing it. Its weights are damaged or overflow in this dtype: check the checkpoint "
        "(re-download or rebuild it), or load it in float32 (pair.dtype=float32)."
    )


def round_columns(passed: Tensor, n_drafts: Tensor, kl: Tensor | None, out_kl: Tensor, fits: Tensor) -> Tensor:
    """A round's statistics (`COUNTED`, [B, 8] float64), defined once for every backend from what its rule
    decided: each draft's accept test (`passed` [B, m], 1 passed), the drafts that count (`n_drafts` [B],
    `counted_drafts`), the target KL per position (`kl` [B, m]; None for a target-free rule) and the output
    KL with whether its support fit (`out_kl`, `fits` [B, m]). Positions past n_drafts never count; the KLs
    are summed over the positions decided: up to the first rejection, within the counted drafts. (Few ops:
    an eager decode loop dispatches each one every round.)"""
    at = positions(passed.shape[1], passed.device)
    counted = at < n_drafts.unsqueeze(-1)
    tests = passed & counted
    accepted = tests.cumprod(-1).sum(-1)
    decided = (at <= accepted.unsqueeze(-1)) & counted  # through the first rejection, counted
    fit = decided & fits
    # the KLs summed over the decided positions (a where, not a product: a KL need not be finite where it
    # is not counted), the output KL where its support fit; decided ^ fit: decided, support too large
    target = torch.where(decided, kl, 0.0) if kl is not None else torch.zeros_like(out_kl)
    columns = [tests, decided, fit, decided ^ fit, target, torch.where(fit, out_kl, 0.0)]
    per_row = torch.stack(columns, -1).sum(1, dtype=torch.float64)
    return torch.cat([torch.stack([accepted, n_drafts], -1), per_row], -1)


def counted(row: list[float]) -> dict[str, float]:
    """One row of `round_columns`, read back to the host, by name."""
    return dict(zip(COUNTED, row))


def position_counts(drafted: list[int], accepted: list[int]) -> dict:
    """The per-position counters (`metrics.COUNTERS`) of some rounds: `accepted_hist`[k], the rounds that
    accepted exactly k drafts (k = 0..the most drafted), and `tested_at`[j−1], the rounds whose draft j was
    tested (drafted, and drafts 1..j−1 accepted); both None where nothing was drafted (the verifier alone)."""
    most = max(drafted, default=0)
    if not most:
        return {"accepted_hist": None, "tested_at": None}
    hist, tested = [0] * (most + 1), [0] * most
    for d, a in zip(drafted, accepted):
        hist[a] += 1
        for j in range(min(d, a + 1)):
            tested[j] += 1
    return {"accepted_hist": hist, "tested_at": tested}


@dataclass
class GenerationOutput:
    tokens: list[int]  # generated ids, prompt excluded
    rounds: Rounds
    prefill_time: float
    wall_time: float  # prefill included
    stop_reason: str  # "eos" | "length" | "stop"
    has_kl: bool = False
    graphs_compiled: int = 0  # graphs compiled while this generation decoded (its times include compiling)
    # seconds from admission at which each chunk of tokens was streamed: a round's end (vLLM: each engine step
    # that sampled the request), what a server would send; the serving sweep's TTFT and ITL
    chunk_times: list[float] = field(default_factory=list)
    prompt_tokens: int = 0  # the prompt's length in tokens (a serving benchmark's input length)

    @property
    def verifier_calls(self) -> int:
        return len(self.rounds.drafted)

    def counters(self) -> dict:
        """The additive counters (`metrics.COUNTERS`) of this generation."""
        r = self.rounds
        return {
            "new_tokens": len(self.tokens),
            "verifier_calls": self.verifier_calls,
            "drafted": sum(r.drafted),
            "accepted": sum(r.accepted),
            "accepted_any": sum(r.accepted_any),
            "rejected": sum(d - a for d, a in zip(r.drafted, r.accepted)),
            "kl_sum": sum(r.kl_sum) if self.has_kl else None,
            "kl_count": sum(r.kl_count) if self.has_kl else None,
            "out_kl_sum": sum(r.out_kl_sum) if any(r.out_kl_count) else None,
            "out_kl_count": sum(r.out_kl_count) if any(r.out_kl_count) else None,
            "out_kl_skipped": sum(r.out_kl_skipped),
            "wall_time": self.wall_time,
            "prefill_time": self.prefill_time,
            "t_draft": sum(r.t_draft),
            "t_verify": sum(r.t_verify),
            "t_rule": sum(r.t_rule),
            "t_other": sum(r.t_other),
            "generations": 1,
            "length_stops": int(self.stop_reason == "length"),
            **position_counts(r.drafted, r.accepted),
        }

    def summary(self) -> dict:
        """Counters, every pooled metric of them (AL, τ, acceptance, KL, ...), and why decoding stopped."""
        c = self.counters()
        return {**c, **metrics.derive(c), "stop_reason": self.stop_reason, "graphs_compiled": self.graphs_compiled}

    def metric(self, name: str) -> float | None:
        pooled = metrics.METRICS.get(name).pooled
        if pooled is None:
            raise ValueError(f"{name} is not a metric of one generation's counters")
        return pooled(self.counters())

    @property
    def accepted_length(self) -> float | None:
        """AL: mean accepted drafts per verifier call (the paper's AL_m); None when nothing was drafted."""
        return self.metric("accepted_length")

    @property
    def tau(self) -> float:
        return self.metric("tau") or 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return self.metric("acceptance_rate")

    @property
    def target_kl(self) -> float | None:
        return self.metric("target_kl")

    @property
    def output_kl(self) -> float | None:
        return self.metric("output_kl")

    @property
    def tokens_per_s(self) -> float | None:
        return self.metric("tokens_per_s")
