"""CUDA graph trees overwrite a compiled call's outputs at the next call (torch.compile's reduce-overhead mode, the
fast engine on a GPU). A CPU cannot replay CUDA graphs, so `overwritten_outputs()` emulates it: every forward's
raw outputs are filled with NaN (integers: -1) at the next forward. The loop's laws must hold under it, and a
runner that hands out its raw outputs (what the engine did before) must fail them."""

import pytest
import torch

from cactus_bench.core.decode import Engine, EngineOptions, Job, autoregressive_generate, graphs, speculative_generate
from cactus_bench.core.decode import cache as cache_mod
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
def test_a_compiled_round_decodes_the_eager_tokens_when_outputs_are_overwritten(round_pair, name):
    """Issue 51: the fast engine's round is two compiled calls (the whole draft; the verify with the rule's
    decision and statistics), each handing its outputs to the next. Sampled at T = 1 with top-k (the output KL
    measured), every rule's traced round under overwritten outputs decodes the eager engine's tokens, bit for
    bit."""
    pair = round_pair

    def tokens(compile):
        g = torch.Generator().manual_seed(3)
        options = dict(max_new_tokens=30, temperature=1.0, top_k=8, generator=g, compile=compile)
        return speculative_generate(*pair, PROMPT, rule=build_rule(name), m=4, **options).tokens

    want = tokens(None)
    with graphs.overwritten_outputs():
        assert tokens("eager") == want


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
