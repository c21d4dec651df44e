"""The reference round: methods.md §2 as one plain function, one row, eager, every distribution from a full
forward of the tokens so far (no cache to roll back), and the random numbers the engines draw: each round 2m + 1
uniforms from the row's generator (m drafts, m accept tests, one sample). It is slow and obviously right, and
the engines (eager and compiled, batched, with caches, rollback, EOS and budgets) are tested against it token
for token (tests/core/test_graph_outputs.py).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

from cactus_bench.core.decode.warp import Warper
from cactus_bench.core.rules import Rule, build_rule
from cactus_bench.core.rules.base import sample_column


@torch.inference_mode()
def reference_decode(
    drafter, verifier, prompt: Sequence[int], rule: Rule, m: int, warp: Warper, max_new_tokens: int,
    generator: torch.Generator, eos: Collection[int] = (),
) -> list[int]:  # fmt: skip
    """The tokens a speculative decode of `prompt` emits, round by round as the paper states it."""
    rule = build_rule("sps") if warp.greedy else rule  # at T = 0 every rule is exact-match acceptance
    out: list[int] = []
    while len(out) < max_new_tokens and not (out and out[-1] in eos):
        u = torch.rand(2 * m + 1, generator=generator, dtype=torch.float64)
        context = [*prompt, *out]
        # draft: one token at a time from the drafter's warped p, while it counts (the budget less the round's
        # own sample; through the first EOS)
        drafts: list[int] = []
        draft_logits: list[torch.Tensor] = []
        for j in range(max(min(m, max_new_tokens - len(out) - 1), 0)):
            draft_logits.append(logits_after(drafter, [*context, *drafts])[-1])
            drafts.append(int(sample_column(warp(draft_logits[-1]), u[j : j + 1])))
            if drafts[-1] in eos:
                break
        # verify: one verifier forward over the context and the drafts gives q_1 .. q_{k+1}
        k = len(drafts)
        q_logits = logits_after(verifier, [*context, *drafts])[len(context) - 1 :]
        q = warp(q_logits).unsqueeze(0)  # [1, k + 1, V]
        if not k:  # no draft counts (one token of budget left): the verifier's own sample
            out += cut([int(sample_column(q[:, 0], u[2 * m :].view(1, 1)))], eos, max_new_tokens - len(out))
            continue
        p_logits = torch.stack(draft_logits)
        p, n = warp(p_logits).unsqueeze(0), torch.tensor([drafts])  # [1, k, V], [1, k]
        raw = {"p_raw": p_logits.softmax(-1)[None], "q_raw": q_logits[:k].softmax(-1)[None]} if rule.needs_raw else {}
        extra = {**raw, **rule.prepare(p, q[:, :k], n, **raw)}
        # accept: the drafts in order, each on its own uniform, up to the first rejection
        tests = rule.tests(u[m : m + k].to(p.dtype).view(1, k), p, q[:, :k], n, **extra)[0].tolist()
        accepted = tests.index(False) if False in tests else k
        # the one sample: the rule's recovery at the first rejection, else the bonus from q after the drafts
        if accepted < k:
            at = {key: value[:, accepted] for key, value in extra.items()}
            weights = rule.recovery_weights(p[:, accepted], q[:, accepted], n[:, accepted], **at)
        else:
            weights = q[:, k]
        last = int(sample_column(weights, u[2 * m :].view(1, 1)))
        out += cut([*drafts[:accepted], last], eos, max_new_tokens - len(out))
    return out


def logits_after(model, ids: list[int]) -> torch.Tensor:
    """The model's next-token logits after each of `ids` [len(ids), V], float32, from one full forward."""
    return model(torch.tensor([ids])).logits[0].float()


def cut(tokens: list[int], eos: Collection[int], left: int) -> list[int]:
    """A round's tokens cut after the first EOS (kept) and at the tokens left."""
    ends = [i for i, t in enumerate(tokens) if t in eos]
    return tokens[: ends[0] + 1 if ends else left][:left]
