"""SpS — standard speculative sampling (Leviathan et al. 2023; Chen et al. 2023). Lossless: P_out = q."""

from abc import abstractmethod

from torch import Tensor

from cactus_bench.core.rules.base import Rule, gather_last, general_accept
from cactus_bench.core.rules.registry import register


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


@register("sps")
class SpS(TargetRule):
    label = "SpS"

    def target(self, p, q, n, **raw):
        return q

    def accept_prob(self, p, q, n, **raw):  # h = q: no need to build h
        return general_accept(gather_last(q, n), gather_last(p, n))

    def target_kl(self, p, q, n, **raw):
        return q.new_zeros(n.shape)
