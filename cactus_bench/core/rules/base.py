"""The shared speculative step (methods.md §2) and the `Rule` interface every acceptance rule implements.

A rule is defined by three pure, dtype-generic functions over the last (vocabulary) axis:

* ``accept_prob(p, q, n)`` — probability of accepting the drafted token ``n``;
* ``residual(p, q, n)``    — unnormalised recovery weights used at the first rejection;
* ``target(p, q, n)``      — the distribution ``h`` the rule verifies against (``None`` if it has none).

``verify`` (the batched sampling kernel) and ``output_law`` (the exact float64 oracle) are both built from
them here, once, so a new rule is one small module with those functions and nothing else.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import torch
from torch import Tensor

# Tolerance on sum(probs) == 1 for the input check; float32 softmax over 151,936 entries stays well inside.
_NORM_TOL = 1e-3


def gather_last(x: Tensor, idx: Tensor) -> Tensor:
    """``x[..., idx]`` for one index per leading position: x [..., V], idx [...] -> [...]."""
    return torch.gather(x, -1, idx.unsqueeze(-1)).squeeze(-1)


def sample_weights(w: Tensor, generator: torch.Generator | None = None, u: Tensor | None = None) -> Tensor:
    """One token per row from unnormalised non-negative weights w [..., V], without a host sync: [...].

    Inverse CDF on a float64 cumulative sum: one uniform per row (an exponential race needs V of them,
    ~8x slower at V = 151,936 on CPU), drawn from `generator` or given as `u` [...] in [0, 1).
    """
    return sample_column(w, None if u is None else u.unsqueeze(-1), generator).squeeze(-1)


def sample_column(w: Tensor, u: Tensor | None = None, generator: torch.Generator | None = None) -> Tensor:
    """`sample_weights` with the uniforms and the tokens as columns, u [..., 1] -> [..., 1] (what a decode
    step feeds back): no reshape is dispatched. `right=True` never lands on a zero-weight token."""
    c = torch.cumsum(w, dim=-1, dtype=torch.float64)
    if u is None:
        u = torch.rand((*w.shape[:-1], 1), generator=generator, device=w.device, dtype=torch.float64)
    elif u.dtype != torch.float64:
        u = u.to(torch.float64)
    return torch.searchsorted(c, u * c[..., -1:], right=True).clamp(max=w.shape[-1] - 1)


def resolution_bits(dtype: torch.dtype) -> int:
    """Bits a search of the unit interval must resolve to reach the dtype's resolution (24 on float32, 53 on
    float64)."""
    return int(-math.log2(torch.finfo(dtype).eps)) + 1


def xlogx(x: Tensor) -> Tensor:
    """x·log x elementwise with 0·log 0 = 0 (a log and a product: `torch.special.xlogy` costs ~6x on a CPU)."""
    return torch.where(x > 0, x * torch.log(x), 0.0)


def kl(h: Tensor, q: Tensor) -> Tensor:
    """KL(h || q) over the last axis, with 0·log 0 = 0 (inf where h has mass outside q's support)."""
    terms = torch.where(h > 0, h * (torch.log(h) - torch.log(q)), torch.zeros_like(h))
    return terms.sum(-1)


def general_accept(h_n: Tensor, p_n: Tensor) -> Tensor:
    """The general identity's acceptance ``min(1, h_n / p_n)`` (a token p cannot draft is never accepted:
    its quotient, inf or nan, is never selected)."""
    return torch.where(p_n > 0, torch.clamp(h_n / p_n, max=1.0), 0.0)


def constant(key: tuple, make: Callable[[], Tensor]) -> Tensor:
    """The tensor `make` builds, made once per `key` and read only: an eager decode round asks for the same
    few every round, and each would be one more dispatched op (on a GPU, a launch). A compiled graph builds it
    in place instead (it is part of the graph, and a dict read there would be one more guard to fail)."""
    if torch.compiler.is_compiling():
        return make()
    if key not in _CONSTANTS:
        _CONSTANTS[key] = make()
    return _CONSTANTS[key]


_CONSTANTS: dict[tuple, Tensor] = {}


def positions(n: int, device: torch.device, start: int = 0) -> Tensor:
    """``arange(start, start + n)`` on `device` (a `constant`)."""
    return constant(("positions", n, device, start), lambda: torch.arange(start, start + n, device=device))


class Verification(NamedTuple):
    """What one ``Rule.verify`` call decided, per batch row."""

    drafts: Tensor  # [B, m] the drafted tokens
    n_accepted: Tensor  # [B] drafts accepted before the first rejection
    n_accepted_any: Tensor  # [B] drafts whose accept test passed, at any position (vLLM-style counting)
    kl: Tensor | None  # [B, m] target KL(h||q) per position (with return_kl, for rules with a target)
    passed: Tensor  # [B, m] each draft's accept test (True: passed), False past the row's n_drafts
    sampled: Tensor  # [B, 1] the one token sampled: the recovery at the first rejection, or the bonus

    @property
    def emitted(self) -> Tensor:
        """[B, m+1] token ids: the accepted drafts, then the sampled token, -1 after it (built on demand: the
        decode loop reads `drafts`, `n_accepted` and `sampled` and builds each row's tokens on the host)."""
        B, m = self.drafts.shape
        pos = torch.arange(m + 1, device=self.drafts.device)
        out = torch.full((B, m + 1), -1, dtype=torch.int64, device=self.drafts.device)
        out[:, :m] = torch.where(pos[:m] < self.n_accepted.unsqueeze(-1), self.drafts, -1)
        return out.scatter_(1, self.n_accepted.unsqueeze(-1), self.sampled)


class Rule(ABC):
    """Base class. Subclasses implement ``accept_prob`` and ``residual``; ``register`` gives them their name.

    Rules that verify against a target ``h`` also implement ``target`` (used for the target KL).
    Rules whose definition reads un-tempered probabilities set ``needs_raw = True`` and take
    ``p_raw``/``q_raw`` keyword arguments (the decode engine then passes the softmax of raw logits;
    without them the warped probabilities stand in). A per-position quantity that several of the
    functions need (mentored's β) can be computed once in ``prepare``: ``verify`` passes its result back
    to them as keyword arguments, and each function still computes it itself when called without.
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""  # how tables, figures and dashboards name it (the name when empty)
    needs_raw: ClassVar[bool] = False
    # parameter sets `make bench-rules` times separately (settings that switch kernels); defaults alone: ({},)
    timed_variants: ClassVar[tuple[dict, ...]] = ({},)
    # the parameters at which the rule is SpS, decision for decision (None: no setting makes it SpS)
    sps_knob: ClassVar[dict | None] = None

    # --- the rule's definition (pure functions over the last axis) ---------------------------------
    @abstractmethod
    def accept_prob(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor: ...

    @abstractmethod
    def residual(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor: ...

    def target(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor | None:
        return None

    def tests(self, u: Tensor, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor:
        """Each draft's accept test from its uniform: u, n [..., m] (the drafts of a round along the last axis),
        p, q [..., m, V] -> bool [..., m]. `u < accept_prob`; a rule whose test at one position depends on the
        tests before it in the round (a budget spent within the round) overrides this, and its `accept_prob`
        is the first position's."""
        return u < self.accept_prob(p, q, n, **raw)

    def prepare(self, p: Tensor, q: Tensor, n: Tensor | None, **raw: Tensor) -> dict[str, Tensor]:
        """Per-position tensors [..., ] shared by the functions above, computed once per ``verify`` (`n`: the
        drafted tokens; None where a quantity must not depend on them, as in `prepare_laws`)."""
        return {}

    def prepare_laws(self, p: Tensor, q: Tensor, **raw: Tensor) -> dict[str, Tensor]:
        """`prepare` for `output_laws`: p, q [..., S] -> tensors [..., S] over the drafted token n (one
        computation per position, not one per position and candidate draft)."""
        S = p.shape[-1]
        return {k: v.unsqueeze(-1).expand(*v.shape, S) for k, v in self.prepare(p, q, None, **raw).items()}

    def target_kl(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor | None:
        """KL(h || q) per position for the target verified against (the budget a rule spends, not what it
        emits: see `output_laws`); None for target-free rules."""
        h = self.target(p, q, n, **raw)
        return None if h is None else kl(h, q)

    @property
    def measures_kl(self) -> bool:
        """Whether ``verify(..., return_kl=True)`` gives a target KL: rules that verify against a target."""
        return type(self).target is not Rule.target or type(self).target_kl is not Rule.target_kl

    def trace_key(self) -> tuple:
        """What a compiled graph of this rule's decision depends on (a decode engine keys its graphs by it):
        the rule and its parameters."""
        return (type(self), repr(self))

    def params(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    # --- recovery with a safe fallback --------------------------------------------------------------
    def recovery_weights(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor:
        """Residual weights, falling back to q where they vanish.

        The residual is all zeros only when rejection has probability zero (e.g. SpS with p == q), so the
        fallback never changes a law; it keeps float round-off (u just above a = 1 - 1e-7) from emitting
        token 0.
        """
        r = self.residual(p, q, n, **raw)
        return torch.where(r.sum(-1, keepdim=True) > 0, r, q)

    # --- the sampling kernel ------------------------------------------------------------------------
    def verify(
        self,
        draft_probs: Tensor,
        target_probs: Tensor,
        draft_tokens: Tensor,
        generator: torch.Generator | None = None,
        *,
        uniforms: Tensor | None = None,
        n_drafts: Tensor | None = None,
        check: bool | None = None,
        draft_raw: Tensor | None = None,
        target_raw: Tensor | None = None,
        return_kl: bool = False,
    ) -> Verification:
        """One speculative verification step for a batch, vectorised over all m positions.

        draft_probs [B, m, V], target_probs [B, m+1, V] (row j: q at draft position j; the row after a
        row's last draft is its bonus position), draft_tokens [B, m]. `n_drafts` [B] (default m): how many
        of the m drafts of each row count (a draft cut at its EOS or at the token budget); positions past
        them are never accepted, and a row that accepts all of its drafts takes its bonus from
        target_probs at position n_drafts. Random numbers come from `generator` (m accept tests, then one
        sample) or are given as `uniforms` [B, m+1] in that order, so a caller can fix each row's stream.
        Returns a ``Verification``: n_accepted [B] (the prefix), n_accepted_any [B] (every counted position
        whose test passed), each draft's test, the sampled token [B] (its `emitted` [B, m+1] puts them
        together), and with ``return_kl`` the target KL(h||q) per position [B, m] (else, and for target-free
        rules, None).
        No host synchronisation unless ``check`` asks for value checks (default: only on CPU, where
        checking costs no sync).
        """
        B, m, V = _check_shapes(draft_probs, target_probs, draft_tokens)
        if check is None:
            check = draft_probs.device.type == "cpu"
        if check:
            check_probs(draft_probs, "draft_probs")
            check_probs(target_probs, "target_probs")
        q = target_probs[:, :m]
        extra = self._raw_kwargs(draft_raw, target_raw, m)  # raw probabilities, then prepared per-position values
        if m > 0:
            extra.update(self.prepare(draft_probs, q, draft_tokens, **extra))
        device = draft_probs.device

        u_tests, u_last = (None, None) if uniforms is None else uniforms.split([m, 1], 1)  # [B, m], [B, 1]
        if m == 0:  # nothing drafted (e.g. one token of budget left): a plain verifier sample
            n_acc = n_any = torch.zeros(B, dtype=torch.int64, device=device)
            passed = torch.zeros((B, 0), dtype=torch.bool, device=device)
            last = sample_column(target_probs[:, 0], u_last, generator)
        else:
            dtype = draft_probs.dtype  # the tests' dtype (torch.promote_types would be one more dispatched op)
            if target_probs.dtype != dtype:
                dtype = torch.promote_types(dtype, target_probs.dtype)
            if u_tests is None:
                u = torch.rand((B, m), generator=generator, device=device, dtype=dtype)
            else:
                u = u_tests.to(dtype)
            passed = self.tests(u, draft_probs, q, draft_tokens, **extra)  # [B, m]
            if n_drafts is not None:
                passed = passed & (positions(m, device) < n_drafts.unsqueeze(-1))
            n_acc = torch.cumprod(passed, dim=-1).sum(-1)  # accepted before the first rejection
            n_any = passed.sum(-1)
            # The one sampled token sits at position n_acc: recovery there, or the bonus when every draft
            # was accepted (q at the position after the row's last draft).
            rows = positions(B, device)
            j = n_acc.clamp(max=m - 1)
            row = {k: v[rows, j] for k, v in extra.items()}
            rec = self.recovery_weights(draft_probs[rows, j], q[rows, j], draft_tokens[rows, j], **row)
            full = n_acc == (m if n_drafts is None else n_drafts)
            last = sample_column(torch.where(full.unsqueeze(-1), target_probs[rows, n_acc], rec), u_last, generator)

        kl_pos = self.target_kl(draft_probs, q, draft_tokens, **extra) if (return_kl and m > 0) else None
        return Verification(draft_tokens, n_acc, n_any, kl_pos, passed, last)

    def _raw_kwargs(self, draft_raw: Tensor | None, target_raw: Tensor | None, m: int) -> dict:
        if not self.needs_raw or draft_raw is None or target_raw is None:
            return {}
        return {"p_raw": draft_raw[:, :m], "q_raw": target_raw[:, :m]}

    # --- the exact oracle ---------------------------------------------------------------------------
    def output_law(self, p: Tensor, q: Tensor, **raw: Tensor) -> Tensor:
        """Exact float64 law of the first emitted token for p, q [V] (methods.md §2):

        P_out(x) = p(x)·a(x) + Σ_n p(n)·(1 − a(n))·R_n(x).
        """
        if p.dim() != 1 or q.shape != p.shape:
            raise ValueError(f"output_law takes p, q of shape [V]; got {tuple(p.shape)} and {tuple(q.shape)}")
        return self.output_laws(p, q, **raw)

    def output_laws(self, p: Tensor, q: Tensor, **raw: Tensor) -> Tensor:
        """`output_law` for many positions at once: p, q [..., S] over the same S tokens (a position's whole
        support, e.g. the union of the warped supports) -> P_out [..., S], float64."""
        p, q = p.double(), q.double()
        S = p.shape[-1]
        raw = {k: v.double() for k, v in raw.items()}
        prepared = self.prepare_laws(p, q, **raw)
        P = p.unsqueeze(-2).expand(*p.shape, S)  # [..., n, x]: row n is the case "the draft was token n"
        Q = q.unsqueeze(-2).expand(*q.shape, S)
        raw = {k: v.unsqueeze(-2).expand(*v.shape, S) for k, v in raw.items()} | prepared
        n = torch.arange(S, device=p.device).expand(p.shape)
        a = self.accept_prob(P, Q, n, **raw)
        R = self.recovery_weights(P, Q, n, **raw)
        R = R / R.sum(-1, keepdim=True)
        return p * a + ((p * (1 - a)).unsqueeze(-1) * R).sum(-2)


class TargetRule(Rule):
    """A rule that picks a target h and runs the general identity (methods.md §2):
    accept min(1, h_n / p_n), recover from (h − p)+, so the emitted token is distributed as h."""

    @abstractmethod
    def target(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor:
        """The target h this rule verifies against."""

    def accept_prob(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor:
        return general_accept(gather_last(self.target(p, q, n, **raw), n), gather_last(p, n))

    def residual(self, p: Tensor, q: Tensor, n: Tensor, **raw: Tensor) -> Tensor:
        return (self.target(p, q, n, **raw) - p).clamp(min=0)


def _check_shapes(draft_probs: Tensor, target_probs: Tensor, draft_tokens: Tensor) -> tuple[int, int, int]:
    if draft_probs.dim() != 3:
        raise ValueError(f"draft_probs must be [B, m, V]; got shape {tuple(draft_probs.shape)}")
    B, m, V = draft_probs.shape
    if tuple(target_probs.shape) != (B, m + 1, V):
        raise ValueError(
            f"target_probs must be [B, m+1, V] = {(B, m + 1, V)} (last row is the bonus position); "
            f"got {tuple(target_probs.shape)}"
        )
    if tuple(draft_tokens.shape) != (B, m):
        raise ValueError(f"draft_tokens must be [B, m] = {(B, m)}; got {tuple(draft_tokens.shape)}")
    if not (draft_probs.is_floating_point() and target_probs.is_floating_point()):
        raise ValueError("draft_probs and target_probs must be floating-point probabilities")
    if draft_tokens.dtype != torch.int64:
        raise ValueError(f"draft_tokens must be int64 token ids; got {draft_tokens.dtype}")
    return B, m, V


def check_probs(x: Tensor, name: str) -> None:
    """Value checks (these synchronise with the device): finite, non-negative, rows summing to 1."""
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf")
    if bool((x < 0).any()):
        raise ValueError(f"{name} contains negative probabilities")
    worst = float((x.sum(-1) - 1).abs().max()) if x.numel() else 0.0
    if worst > _NORM_TOL:
        raise ValueError(f"{name} rows must sum to 1 (probabilities, not logits); worst row is off by {worst:.3g}")


def check_range(rule: str, key: str, value: float, lo: float, hi: float = math.inf) -> float:
    """Validate a numeric rule parameter, naming the valid range in the error."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{rule}: {key} must be a number; got {value!r}") from None
    ok = lo <= value <= hi and not math.isnan(value)
    if not ok:
        right = "]" if hi != math.inf else ")"
        raise ValueError(f"{rule}: {key} must be in [{lo}, {hi}{right}; got {value}")
    return value
