"""The negative controls: realistic bugs wrapped around a correct rule, which the statistical tests must
reject."""

import torch

from cactus_bench.core.rules.base import Rule

# --- negative controls: each a realistic bug; the same tests must reject it ----------------------------


class AlwaysAccept(Rule):
    def __init__(self, inner):
        self.inner = inner

    def accept_prob(self, p, q, n, **raw):
        return torch.ones_like(self.inner.accept_prob(p, q, n, **raw))

    def residual(self, p, q, n, **raw):
        return self.inner.residual(p, q, n, **raw)


class ResidualFromQ(AlwaysAccept):
    def accept_prob(self, p, q, n, **raw):
        return self.inner.accept_prob(p, q, n, **raw)

    def residual(self, p, q, n, **raw):
        return q


class BonusFromP(ResidualFromQ):
    """The bonus row comes from the drafter's last distribution instead of q_{m+1}."""

    residual = AlwaysAccept.residual  # the wrapped rule's: only the bonus row is broken

    def verify(self, draft_probs, target_probs, draft_tokens, generator=None, **kw):
        if draft_probs.shape[1] == 0:  # nothing drafted: no bonus position to get wrong
            return self.inner.verify(draft_probs, target_probs, draft_tokens, generator, **kw)
        bad = torch.cat([target_probs[:, :-1], draft_probs[:, -1:]], 1)
        return self.inner.verify(draft_probs, bad, draft_tokens, generator, **kw)


class OffByOne(BonusFromP):
    """Position j is verified against q_{j+1} (a shifted logits slice)."""

    def verify(self, draft_probs, target_probs, draft_tokens, generator=None, **kw):
        shifted = torch.cat([target_probs[:, 1:], target_probs[:, -1:]], 1)
        return self.inner.verify(draft_probs, shifted, draft_tokens, generator, **kw)


CONTROLS = [AlwaysAccept, ResidualFromQ, BonusFromP, OffByOne]
