"""A speculative round as two programs, each one call of a model runner (`ModelRunner.run`): the whole draft
on the drafter, and the verifier's forward with the rule's decision and the round's statistics. The fast
engine compiles each whole, so a round launches two graphs and reads the device once; the eager engine runs
the same functions op by op (the verify and the decision as two calls, so its round keeps a rule's time
apart), so both dispatch the same arithmetic.

Every step of a draft reads the keys of the bucket the draft ends in (`draft_reach`): one graph serves the
draft whatever bucket its first steps would read alone, and the mask hides every key past a row's position.
"""

from __future__ import annotations

import torch

from cactus_bench.core.decode.cache import decode_step, on
from cactus_bench.core.decode.output_kl import output_kl
from cactus_bench.core.decode.stats import counted_drafts, mark_nonfinite, round_columns, through_eos


def draft_reach(reach: int, m: int) -> int:
    """The longest row's end after a full draft of m steps (`reach`: its committed length): the key bucket
    every step of the draft reads (`kv_bucket` of it), the same whether the round takes m steps or fewer."""
    return reach + m - 1


def draft(model, cache, cache_kw, impl, at, first, u_drafts, steps, m, vocab, warp, want_raw):
    """`steps` drafter steps for every row: the first feeds `first` (lag columns of [B]) at the positions `at`
    [B], each later one the token the step before sampled with the row's uniform (`u_drafts`, one [B, 1] per
    step). Returns the drafts [B, m] (zeros past `steps`), their warped p [B, steps, V], and the raw
    probabilities (the softmax of the logits) [B, steps, V] when `want_raw`, else None. The positions are left
    after the last step's input: the next round sets them."""
    cache.pos.copy_(at)
    x = torch.stack(first, 1)  # [B, lag]
    x_width = x.shape[1]
    drafts, probs, logits = [], [], []
    for j in range(steps):
        if j:
            cache.pos.add_(x_width)  # past the step before's input
        x_width = x.shape[1]
        step_logits, p, x = decode_step(model, cache, x, 1, cache_kw, impl, vocab, warp, u_drafts[j], want_raw)
        drafts.append(x)
        probs.append(p)
        logits.append(step_logits)
    if steps < m:  # the end of every row's budget: the undrafted slots keep the shapes of m drafts
        drafts.append(torch.zeros((x.shape[0], m - steps), dtype=torch.long, device=x.device))
    if not probs:  # no row has a draft left to count (one token of budget each)
        return drafts[0], None, None
    raw = torch.softmax(torch.cat(logits, 1).float(), -1) if want_raw else None
    return torch.cat(drafts, 1), torch.cat(probs, 1), raw


def verify(model, cache, cache_kw, impl, at, last, d, vocab, warp, want_logits):
    """The verifier's forward over each row's last committed token `last` [B] and its m drafts `d` [B, m] at
    the positions `at`: (the raw logits when `want_logits`, else None; q [B, m+1, V])."""
    cache.pos.copy_(at)
    ids = torch.cat([last.unsqueeze(1), on(d, last.device)], 1)
    logits, q, _ = decode_step(model, cache, ids, d.shape[1] + 1, cache_kw, impl, vocab, warp, None, want_logits)
    return logits, q


def decide(rule, d, p, raw_p, q, v_logits, u_verify, budget, eos_ids, support, kl=True):
    """The rule decides every row; what the round reads back, one [B, m + 1 + 8] float64 tensor: the drafts,
    the sampled token, the counted columns (`round_columns`). `p` (and `raw_p`) may hold fewer positions than
    `d`, or be None (a round that drafted fewer steps, or none): a slot past them gets p = q, never decided
    (it is past every row's counted drafts) and finite in every per-position quantity a rule computes (a KL of
    q against itself is 0). `kl`: compute the target KL; `support`: the output KL's (None: not computed)."""
    m, steps = d.shape[1], 0 if p is None else p.shape[1]
    q = on(q, d.device)  # a verifier spread by device_map: its last device
    n_drafts = counted_drafts(budget, through_eos(d, eos_ids))
    if steps < m:
        p = q[:, :m] if p is None else torch.cat([p, q[:, steps:m]], 1)
    raw = {}
    if v_logits is not None:
        target_raw = torch.softmax(on(v_logits, d.device).float(), -1)
        if steps < m:
            raw_p = target_raw[:, :m] if raw_p is None else torch.cat([raw_p, target_raw[:, steps:m]], 1)
        raw = {"draft_raw": raw_p, "target_raw": target_raw}
    v = rule.verify(p, q, d, uniforms=u_verify, n_drafts=n_drafts, check=False, return_kl=kl, **raw)
    out_kl, fits = output_kl(rule, p, q[:, :m], support, raw)
    stats = round_columns(v.passed, n_drafts, v.kl, out_kl, fits)  # what every backend counts, one way
    sampled = mark_nonfinite(v.sampled, q, p)
    return torch.cat([d, sampled, stats], 1)  # (float64)


def verify_and_decide(model, cache, cache_kw, impl, at, last, d, p, raw_p, u_verify, budget, eos_ids, vocab,
                      warp, rule, support, kl=True):  # fmt: skip
    """`verify` then `decide`: the fast engine's second call of a round, as one graph. Returns (the round's
    read-back tensor,)."""
    v_logits, q = verify(model, cache, cache_kw, impl, at, last, d, vocab, warp, rule.needs_raw)
    return (decide(rule, d, p, raw_p, q, v_logits, u_verify, budget, eos_ids, support, kl),)
