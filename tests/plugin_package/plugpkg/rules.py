from cactus_bench.core.rules import Rule, register
from cactus_bench.core.rules.base import gather_last, general_accept


@register("half_sps")
class HalfSpS(Rule):
    """Accepts half as often as SpS; the verifier's law as recovery keeps the output a distribution."""

    label = "Half-SpS"

    def accept_prob(self, p, q, n, **raw):
        return 0.5 * general_accept(gather_last(q, n), gather_last(p, n))

    def residual(self, p, q, n, **raw):
        return q
