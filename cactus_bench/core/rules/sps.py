"""SpS — standard speculative sampling (Leviathan et al. 2023; Chen et al. 2023). Lossless: P_out = q."""

from cactus_bench.core.rules.base import TargetRule, gather_last, general_accept
from cactus_bench.core.rules.registry import register


@register("sps")
class SpS(TargetRule):
    label = "SpS"
    sps_knob = {}

    def target(self, p, q, n, **raw):
        return q

    def accept_prob(self, p, q, n, **raw):  # h = q: no need to build h
        return general_accept(gather_last(q, n), gather_last(p, n))

    def target_kl(self, p, q, n, **raw):
        return q.new_zeros(n.shape)
