"""Paired timing of several methods (`decode.api.PairedGroup`): one verifier-alone decode per request shared
by every member, an order that rotates, and members that must take the same requests in turn."""

import pytest

from cactus_bench.core.decode.api import Generation, PairedGroup, Request, paired_decoder
from cactus_bench.core.decode.stats import GenerationOutput, Rounds
from cactus_bench.core.metrics.cost_model import paired_speedup_vs_sps


class Clocked:
    """A decoder whose every decode is logged and takes `seconds` (its wall time), one round per token."""

    device = "cpu"
    tokenizer_name = "fake"

    def __init__(self, name: str, seconds: float, log: list):
        self.name, self.seconds, self.log = name, seconds, log

    def generate(self, requests):
        for req in requests:
            self.log.append((self.name, req.key))
            rounds = Rounds()
            rounds.drafted, rounds.t_draft, rounds.t_verify = [1, 1], [0.0, 0.0], [0.0, 0.0]
            out = GenerationOutput([1, 2], rounds, 0.0, self.seconds * (1 + len(self.log) / 100), "eos")
            yield Generation(req, out, "", "")


def group_of(names, log):
    members = {n: Clocked(n, 0.1 * (i + 1), log) for i, n in enumerate(names)}
    return PairedGroup(members, Clocked("verifier", 1.0, log))


def test_a_group_decodes_each_request_once_with_the_verifier_alone_in_an_order_that_rotates():
    log: list = []
    group = group_of(["sps", "cactus", "tas"], log)
    taken = {n: [] for n in ("sps", "cactus", "tas")}
    for k in range(4):
        req = Request("prompt", k)
        for name in ("tas", "sps", "cactus"):  # the order members ask in does not matter
            taken[name].append(next(group.member(name).generate([req])))
    orders = [[name for name, key in log if key == k] for k in range(4)]
    assert orders == [
        ["verifier", "sps", "cactus", "tas"],
        ["sps", "cactus", "tas", "verifier"],
        ["cactus", "tas", "verifier", "sps"],
        ["tas", "verifier", "sps", "cactus"],
    ]
    for k in range(4):
        base = {taken[n][k].paired["paired_baseline_time"] for n in taken}
        assert len(base) == 1  # one verifier-alone decode, its time in every member's record
        for name in taken:
            record = taken[name][k].paired
            assert record["paired_methods"] == 3
            assert record["paired_baseline_first"] == (orders[k].index("verifier") < orders[k].index(name))
    # two members' records share the verifier's time: their ratio over SpS is the ratio of their own times
    sps = [{"id": k, "stats": g.paired} for k, g in enumerate(taken["sps"])]
    cactus = [{"id": k, "stats": g.paired} for k, g in enumerate(taken["cactus"])]
    direct = sum(s["stats"]["paired_method_time"] for s in sps) / sum(c["stats"]["paired_method_time"] for c in cactus)
    assert paired_speedup_vs_sps(cactus, sps).value == pytest.approx(direct, rel=1e-12)


def test_a_paired_decoder_is_a_group_of_one_that_alternates_which_goes_first():
    log: list = []
    paired = paired_decoder(Clocked("sps", 0.1, log), Clocked("verifier", 1.0, log))
    firsts = [g.paired["paired_baseline_first"] for g in paired.generate([Request("p", k) for k in range(4)])]
    assert firsts == [True, False, True, False] and len(log) == 8


def test_a_group_decodes_only_the_members_expected_and_refuses_members_out_of_step():
    log: list = []
    group = group_of(["sps", "cactus"], log)
    group.expect(["cactus"])  # a resume: SpS has this item's timing already
    gen = next(group.member("cactus").generate([Request("p", 0)]))
    assert [name for name, _ in log] == ["verifier", "cactus"] and gen.paired["paired_methods"] == 1
    with pytest.raises(ValueError, match="not expected"):
        next(group.member("sps").generate([Request("p", 1)]))
    group.expect(["sps", "cactus"])
    next(group.member("sps").generate([Request("p", 2)]))
    with pytest.raises(ValueError, match="take the same requests in turn"):
        next(group.member("cactus").generate([Request("other prompt", 3)]))
    with pytest.raises(KeyError):
        group.expect(["medusa"])
