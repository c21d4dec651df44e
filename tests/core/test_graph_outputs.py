"""CUDA graph trees overwrite a compiled call's outputs at the next call (torch.compile's reduce-overhead mode, the
fast engine on a GPU). A CPU cannot replay CUDA graphs, so `overwritten_outputs()` emulates it: every forward's
raw outputs are filled with NaN (integers: -1) at the next forward. The loop's laws must hold under it, and a
runner that hands out its raw outputs (what the engine did before) must fail them."""

import pytest
import torch

from cactus_bench.core.decode import Engine, EngineOptions, Job, autoregressive_generate, graphs, speculative_generate
from cactus_bench.core.decode import cache as cache_mod
from cactus_bench.core.decode.reference import reference_decode
from cactus_bench.core.decode.warp import Warper
from cactus_bench.core.rules import RULES, build_rule

from ..helpers.models import tiny_pair
from ..helpers.reference_laws import CONFIGS
from ..helpers.stats import P_THRESHOLD, g_test_pvalue
from .test_decode import M_SMALL, PROMPT, RUNS, V_SMALL, L, ar_law, reference_greedy, small_pair  # noqa: F401  (fixtures)


@pytest.fixture
def overwritten():
    with graphs.overwritten_outputs():
        yield


@pytest.fixture
def raw_outputs(monkeypatch):
    """What the runner did before: the compiled call's outputs handed to the loop as they are."""
    monkeypatch.setattr(graphs, "copy_out", lambda out: out)


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab_size=24, logit_scale=30.0)


def greedy_tokens(pair, name, params, compile=None):
    drafter, verifier = pair
    return speculative_generate(
        drafter,
        verifier,
        PROMPT,
        rule=build_rule(name, **params),
        m=4,
        max_new_tokens=30,
        temperature=0.0,
        compile=compile,
    ).tokens


@pytest.mark.parametrize("name,params", CONFIGS, ids=[f"{n}{p}" for n, p in CONFIGS])
def test_greedy_is_the_verifiers_greedy_when_outputs_are_overwritten(pair, name, params, overwritten):
    want = reference_greedy(pair[1], PROMPT, 30)
    assert greedy_tokens(pair, name, params) == want
    assert autoregressive_generate(pair[1], PROMPT, max_new_tokens=30, temperature=0.0).tokens == want


def test_the_traced_forward_survives_overwritten_outputs(pair, overwritten):
    """The path the fast engine takes (dynamo-traced forwards), with SpeCas's raw logits as well."""
    want = reference_greedy(pair[1], PROMPT, 30)
    assert greedy_tokens(pair, "sps", {}, compile="eager") == want
    assert greedy_tokens(pair, "speccas", {"variant": "token_v3", "alpha": 0.5}, compile="eager") == want


@pytest.fixture(scope="module")
def round_pair():
    """One pair for every rule: the draft's graphs do not depend on the rule, so they trace once."""
    return tiny_pair(vocab_size=24, logit_scale=3.0)


@pytest.mark.parametrize("name", sorted(RULES))
def test_both_engines_decode_the_reference_rounds_tokens(round_pair, name):
    """Issues 51 and 67: the reference round (`decode.reference`: the paper's round in plain code, full
    re-forwards, the same 2m + 1 uniforms a round) is the oracle; the eager engine and the fast engine's two
    compiled calls a round (under overwritten outputs, as CUDA graphs hand them on) decode its tokens, bit for
    bit, for every rule: sampled at T = 1 with top-k (the output KL measured) and greedy, with a budget that
    ends mid-round and an EOS the reply reaches."""
    drafter, verifier = round_pair
    rule, prompt = build_rule(name), PROMPT

    def engine_tokens(compile, budget, eos, sampling):
        g = torch.Generator().manual_seed(3)
        options = dict(max_new_tokens=budget, generator=g, compile=compile, eos_token_id=sorted(eos), **sampling)
        return speculative_generate(drafter, verifier, prompt, rule=rule, m=4, **options).tokens

    def reference(budget, eos, sampling):
        g = torch.Generator().manual_seed(3)
        return reference_decode(drafter, verifier, prompt, rule, 4, Warper(**sampling), budget, g, eos)

    for sampling in ({"temperature": 1.0, "top_k": 8}, {"temperature": 0.0}):
        free = reference(30, set(), sampling)
        absent = min(set(range(verifier.config.vocab_size)) - set(free))
        # one reply stops at an EOS it reaches, one at its budget (one EOS id each: one graph to trace)
        for budget, eos, length in ((30, {free[7]}, free.index(free[7]) + 1), (11, {absent}, 11)):
            want = reference(budget, eos, sampling)
            assert len(want) == length, (sampling, budget, eos)
            assert engine_tokens(None, budget, eos, sampling) == want, (sampling, budget, eos)
            with graphs.overwritten_outputs():
                assert engine_tokens("eager", budget, eos, sampling) == want, (sampling, budget, eos)


def test_sps_is_lossless_when_outputs_are_overwritten(small_pair, ar_law, overwritten):  # noqa: F811
    """3,000 decodes, 32 rows at a time: the law of the first L tokens is the verifier's exact law."""
    drafter, verifier = small_pair
    engine = Engine(verifier, drafter, build_rule("sps"), M_SMALL, options=EngineOptions(32))
    todo = [Job(PROMPT, L, torch.Generator().manual_seed(i)) for i in range(RUNS)]
    outs = [out for _, out in engine.run(todo)]
    cells = torch.tensor([sum(t * V_SMALL ** (L - 1 - i) for i, t in enumerate(o.tokens)) for o in outs])
    assert sum(a < d for o in outs for a, d in zip(o.rounds.accepted, o.rounds.drafted)) > RUNS // 4
    assert g_test_pvalue(cells, ar_law) > P_THRESHOLD


@pytest.mark.parametrize("rule", ["sps", "cactus", "speccas"])
def test_batched_equals_unbatched_when_outputs_are_overwritten(pair, rule, overwritten):
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10], [11, 12, 13], [2, 2]]
    drafter, verifier = pair

    def tokens(rows, speculative=True):
        engine = (
            Engine(verifier, drafter, build_rule(rule), 3, options=EngineOptions(rows))
            if speculative
            else Engine(verifier, options=EngineOptions(rows))
        )
        todo = [Job(list(p), 20, torch.Generator().manual_seed(i)) for i, p in enumerate(prompts)]
        done = {id(job): out.tokens for job, out in engine.run(todo)}
        return [done[id(job)] for job in todo]

    assert tokens(1) == tokens(4)
    assert tokens(1, speculative=False) == tokens(3, speculative=False)


def test_raw_outputs_fail_when_overwritten(pair, overwritten, raw_outputs):
    """Negative control: without the copy, drafts and probabilities are garbage at the next forward (a NaN
    probability or a -1 token id), as on a GPU at the second drafter step."""
    with pytest.raises((IndexError, RuntimeError, AssertionError, ValueError)):
        assert greedy_tokens(pair, "sps", {}) == reference_greedy(pair[1], PROMPT, 30)


def test_outputs_are_copied_only_under_cuda_graphs(pair):
    """Eager and CPU-compiled runners hand out their outputs as they are (no copy to pay for); a runner
    compiled with inductor on CUDA (CUDA graphs) copies them out."""
    drafter, verifier = pair
    assert not cache_mod.ModelRunner(verifier, 1, 64).graph_outputs
    assert not cache_mod.ModelRunner(verifier, 1, 64, compile="eager").graph_outputs
    assert graphs.uses_cuda_graphs(verifier, "inductor") is (verifier.device.type == "cuda")
