"""The vLLM tier's acceptance step (`make test-vllm`, in `.venv-vllm`): the plugin's rules against vLLM's own
rejection sampler, outside the engine and inside it; each rule's law of the first decision through vLLM;
greedy rounds counted by one definition on both backends. SmolLM2-135M-Instruct as verifier, its first 24
layers as drafter; one torch thread."""

import pytest
import torch
from vllm import SamplingParams
from vllm.inputs import TokensPrompt
from vllm.v1.sample import rejection_sampler
from vllm.v1.sample.metadata import SamplingMetadata

from cactus_bench.backends.vllm import decoder as vdecoder
from cactus_bench.backends.vllm import plugin
from cactus_bench.core.decode.warp import Warper
from cactus_bench.core.rules import RULES, Rule, build_rule

from ..helpers.stats import P_THRESHOLD, g_test_pvalue
from .engines import PROMPT, SAMPLED, decode, llm

# one worker, one process: vLLM is imported and each engine started once for both files
pytestmark = [pytest.mark.vllm, pytest.mark.xdist_group("vllm-engines")]


# --- the acceptance step against vLLM's own kernels, outside the engine ---------------------------------


def test_the_sps_rule_is_token_identical_to_vllms_rejection_sampler():
    """300 seeded batches of random p, q and drafts (rows with 0 to 4 drafts): the plugin's verify with the
    SpS rule emits exactly vLLM's kernel's tokens from the same generators; Cactus differs (a control)."""
    original = plugin._ORIGINAL["rejection_sample"]
    differ = 0
    for trial in range(300):
        g = torch.Generator().manual_seed(trial)
        counts = torch.randint(0, 5, (3,), generator=g).tolist()
        N, V = sum(counts), 40
        p = torch.softmax(torch.randn(N, V, generator=g) * 2, -1)
        logits = torch.randn(N, V, generator=g) * 2
        drafts = torch.multinomial(p, 1, generator=g).flatten().int() if N else torch.zeros(0, dtype=torch.int32)
        bonus = torch.randint(0, V, (3, 1), generator=g).int()
        cu = torch.tensor(counts).cumsum(0).int()

        def run(fn, rule):
            meta = _metadata({i: torch.Generator().manual_seed(1000 * trial + i) for i in range(3)})
            plugin._STEP["runner"] = _Runner(rule)
            try:
                return fn(drafts, counts, 4, cu, p, logits.clone(), bonus, meta)
            finally:
                plugin._STEP["runner"] = None

        ours = run(plugin.verify, "sps")
        assert torch.equal(
            ours,
            original(
                drafts,
                counts,
                4,
                cu,
                p,
                logits.clone(),
                bonus,
                _metadata({i: torch.Generator().manual_seed(1000 * trial + i) for i in range(3)}),
            ),
        ), trial
        differ += not torch.equal(ours, run(plugin.verify, "cactus"))
    assert differ > 20  # the rule really decides: cactus accepts more, so tokens differ


class _Request:
    def __init__(self, rule):
        self.sampling_params = SamplingParams(
            extra_args=plugin.request_settings(rule, {"delta": 1.0} if rule == "cactus" else {}, "verifier", "x")
        )
        self.output_token_ids = [0]


class _Runner:
    def __init__(self, rule):
        self.input_batch = type("Batch", (), {"req_ids": ["a", "b", "c"]})()
        self.requests = {r: _Request(rule) for r in "abc"}


def _metadata(generators):
    return SamplingMetadata(
        temperature=torch.ones(3),
        all_greedy=False,
        all_random=True,
        top_p=None,
        top_k=None,
        generators=generators,
        max_num_logprobs=None,
        no_penalties=True,
        prompt_token_ids=None,
        frequency_penalties=torch.zeros(3),
        presence_penalties=torch.zeros(3),
        repetition_penalties=torch.ones(3),
        output_token_ids=[[], [], []],
        allowed_token_ids_mask=None,
        bad_words_token_ids={},
        logitsprocs=None,
    )


def test_expand_is_torch_native_and_correct():
    """The CPU build's expand kernel left its output uninitialised; the plugin's replacement repeats each
    request's value over its draft tokens (greedy's temperature 0 replaced by 1, as vLLM asks)."""
    x = torch.tensor([0.6, 0.0, 1.3])
    out = rejection_sampler.expand_batch_to_tokens(x, torch.tensor([2, 2, 5]), 5, replace_from=0, replace_to=1)
    assert out.tolist() == pytest.approx([0.6, 0.6, 1.3, 1.3, 1.3])
    k = rejection_sampler.expand_batch_to_tokens(torch.tensor([20, 7]), torch.tensor([1, 3]), 3)
    assert k.tolist() == [20, 7, 7]


def test_sps_through_the_plugin_equals_vllms_own_acceptance_in_the_engine(pair):
    """The same requests, seeds and drafts (the plugin's seeded drafter): SpS through the plugin emits the
    tokens vLLM's own kernel emits, 16 replies of 24 tokens each."""
    engine = llm("method=sps")
    prompt = pair.tokenizer(PROMPT)["input_ids"]
    params = SamplingParams(temperature=0.6, top_k=20, top_p=0.95, max_tokens=24)
    ours, rounds = decode(engine, prompt, 16, "sps", params)
    own, _ = decode(engine, prompt, 16, None, params)
    assert ours == own
    assert sum(len(r[1]) for rs in rounds for r in rs) > 100  # drafts were made and judged
    again, _ = decode(engine, prompt, 16, "sps", params)
    assert again == ours  # the drafter draws from each request's own seed: a rerun is token-identical


@pytest.fixture(scope="module")
def first_two_steps(pair):
    """What the two-token laws are built from, computed once for every rule: the prompt's ids, q(t1 | prompt)
    and for each t1 in its support (p, q)(t2 | prompt, t1), warped as the tests sample (T = 1, top-k 20)."""
    warper, prompt = Warper(1.0, 20, 1.0), pair.tokenizer(PROMPT)["input_ids"]
    with torch.inference_mode():
        q1 = warper(pair.verifier(torch.tensor([prompt])).logits[0, -1].double().unsqueeze(0))[0]
        nexts = {}
        for t in q1.nonzero().flatten().tolist():
            if t not in pair.eos_token_id:
                ids = torch.tensor([prompt + [t]])
                q2 = warper(pair.verifier(ids).logits[0, -1].double().unsqueeze(0))[0]
                p2 = warper(pair.drafter(ids).logits[0, -1].double().unsqueeze(0))[0]
                nexts[t] = (p2, q2)
    return prompt, q1, nexts


def two_token_law(rule, q1, nexts):
    """P(t1, t2 | prompt) through vLLM: t1 is the prefill's verifier sample, t2 the rule's first decision
    (drafts of p(.|prompt, t1) judged against q(.|prompt, t1)): q(t1) * rule.output_law(p, q)(t2), float64;
    a reply that ends at t1 (EOS) is the cell (t1,)."""
    law = {}
    for t in q1.nonzero().flatten().tolist():
        if t not in nexts:
            law[(t,)] = float(q1[t])
            continue
        p2, q2 = nexts[t]
        support = ((p2 + q2) > 0).nonzero().flatten()  # the law on the union of the warped supports
        out = rule.output_law(p2[support], q2[support])
        for u, w in zip(support.tolist(), out.tolist()):
            if w > 0:
                law[(t, u)] = float(q1[t]) * w
    return law


class AcceptEveryDraft(Rule):
    """A realistic bug (a test that always passes): every draft accepted, so what is emitted follows p."""

    def accept_prob(self, p, q, n, **raw):
        return torch.ones_like(n, dtype=p.dtype)

    def residual(self, p, q, n, **raw):
        return q


RELAXED = {
    "cactus": {"delta": 0.75},
    "lenience": {"lenience": 0.5},
    "fuzzy": {"threshold": 0.3},
    "nucleus": {"top_p": 0.8},
    "approximate": {"max_regret": 1.0, "budget": 1},
    "speccas": {"variant": "chow", "alpha": 0.5, "confidence": "warped"},
}


@pytest.mark.parametrize("rule", ["sps", "tas", "topk", *RELAXED, "broken"])
def test_the_first_decision_follows_the_rules_law_through_vllm(first_two_steps, rule):
    """For each rule, (t1, t2) through vLLM follows the same rule's exact law on the transformers models
    (G-test, 128 decodes); a rule that accepts every draft is rejected by the same test."""
    if rule == "broken" and "accept_every_draft" not in RULES.names():
        RULES.add("accept_every_draft", AcceptEveryDraft)
    name = "accept_every_draft" if rule == "broken" else rule
    params = RELAXED.get(rule, {})
    engine = llm("method=sps")
    prompt, q1, nexts = first_two_steps
    exact = build_rule("sps") if rule == "broken" else build_rule(name, **params)
    law = two_token_law(exact, q1, nexts)
    cells = {key: i for i, key in enumerate(law)}
    tags = [f"{rule}{i}" for i in range(128)]
    sampling = []
    for i, tag in enumerate(tags):
        s = SAMPLED.clone()
        s.seed, s.extra_args = 10_000 + i, plugin.request_settings(name, params, "verifier", tag)
        sampling.append(s)
    outs = engine.generate([TokensPrompt(prompt_token_ids=prompt)] * len(tags), sampling, use_tqdm=False)
    engine.collective_rpc(plugin.take_rounds, args=(tags,))
    seen = [tuple(o.outputs[0].token_ids)[:2] for o in outs]
    p_value = g_test_pvalue(torch.tensor([cells.get(s, len(cells)) for s in seen]), torch.tensor([*law.values(), 0.0]))
    if rule == "broken":
        assert p_value < P_THRESHOLD, p_value
    else:
        assert p_value > P_THRESHOLD, p_value


def greedy_rounds(pair, prompt, tokens, m, max_tokens, start):
    """The rounds the one definition (`stats.round_columns`) gives a greedy reply, from the drafter's
    teacher-forced argmax at each position: a round starting at token `start` drafts min(m, tokens left − 1),
    accepts while the drafter's argmax is the reply's token, and emits those plus one (cut at the reply's
    end). The transformers engine's first round starts at the reply's first token; vLLM's prefill writes that
    one, so its first round starts at the second. (drafted, accepted, emitted) per round."""
    with torch.inference_mode():
        guess = pair.drafter(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].argmax(-1).tolist()
    rounds, at = [], start
    while at < len(tokens):
        drafted = min(m, max_tokens - at - 1)
        accepted = 0
        while accepted < drafted and at + accepted < len(tokens) and guess[at + accepted] == tokens[at + accepted]:
            accepted += 1
        emitted = min(accepted + 1, len(tokens) - at)
        rounds.append((drafted, min(accepted, emitted), emitted))
        at += emitted
    return rounds


def test_both_backends_count_greedy_rounds_by_the_one_definition(pair):
    """At T = 0 nothing is random: the transformers engine and vLLM emit the same tokens, and each backend's
    rounds (drafted, accepted, emitted) are what the one definition gives from the drafter's own argmaxes,
    with vLLM's first round a token later (its prefill writes the first). Before, vLLM counted its prefill
    as a call with no drafts (AL and τ about 1/R lower) and drafts past a drafted EOS and the budget."""
    from cactus_bench.core.decode import speculative_generate

    engine = llm("method=sps")
    eos = set(pair.eos_token_id)
    greedy = SamplingParams(temperature=0.0, max_tokens=32)
    for text in (PROMPT, "The capital of France is", "def fibonacci(n):"):
        prompt = pair.tokenizer(text)["input_ids"]
        (tokens,), (recorded,) = decode(engine, prompt, 1, "sps", greedy)
        on_vllm = vdecoder.build_rounds(recorded, len(tokens), 32, eos, wall=0.0)
        on_hf = speculative_generate(
            pair.drafter,
            pair.verifier,
            prompt,
            rule="sps",
            m=4,
            max_new_tokens=32,
            temperature=0.0,
            eos_token_id=pair.eos_token_id,
        )
        assert list(tokens) == on_hf.tokens, text
        for rounds, start in ((on_hf.rounds, 0), (on_vllm, 1)):
            got = list(zip(rounds.drafted, rounds.accepted, rounds.emitted))
            assert got == greedy_rounds(pair, prompt, list(tokens), 4, 32, start), (text, start)
