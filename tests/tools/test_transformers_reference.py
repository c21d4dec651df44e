"""transformers' assisted generation as the speed benchmarks run it (`perf.transformers_reference`): each
model warps its logits once, the drafter drafts exactly m a round, and so it accepts drafts as our loop
does; as transformers ships it (the drafter warped twice) it does not, which is what the reference fixes."""

import contextlib
import copy
import statistics
from collections import Counter

import pytest
import torch
import transformers.generation.candidate_generator as candidate_generator
import transformers.generation.utils as generation_utils

from cactus_bench.core.decode import speculative_generate
from cactus_bench.tools.perf.shapes import PAIRS
from cactus_bench.tools.perf.transformers_reference import assistant_setup, model_defaults_off, sampling

M, T, TOP_K, TOP_P = 5, 0.6, 20, 0.95


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return PAIRS["tiny"]()


@pytest.fixture
def rounds(monkeypatch):
    """(drafts, accepted) of every round of transformers' assisted generation while the test runs."""
    seen: list[tuple[int, int]] = []
    real = candidate_generator.AssistedCandidateGenerator.update_candidate_strategy

    def record(self, input_ids, scores, num_matches):
        seen.append((scores.shape[1] - 1, int(num_matches)))
        return real(self, input_ids, scores, num_matches)

    monkeypatch.setattr(candidate_generator.AssistedCandidateGenerator, "update_candidate_strategy", record)
    return seen


def assisted(pair, prompt, seed, new_tokens, assistant_warps="same_law"):
    drafter, verifier = pair
    torch.manual_seed(seed)
    with model_defaults_off(drafter, verifier), assistant_setup(drafter, M), torch.inference_mode():
        kw = sampling(T, TOP_K, TOP_P, new_tokens, assistant_warps=assistant_warps)
        return verifier.generate(torch.tensor([prompt]), assistant_model=drafter, **kw)[0, len(prompt) :].tolist()


def prompts(n):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 512, (32,), generator=g).tolist() for _ in range(n)]


@pytest.mark.parametrize("assistant_warps, copies", [("same_law", 1), ("as_shipped", 2)])
def test_each_model_warps_its_logits_once(pair, monkeypatch, assistant_warps, copies):
    """The warpers transformers builds for each model: one of each kind for both (as_shipped: the drafter
    gets two of each, the behaviour `sampling` works around)."""
    drafter, verifier = pair
    built: dict[str, list[Counter]] = {"drafter": [], "verifier": []}
    real = generation_utils.GenerationMixin._get_logits_processor

    def record(self, *args, **kwargs):
        processors = real(self, *args, **kwargs)
        built["drafter" if self is drafter else "verifier"].append(Counter(type(p).__name__ for p in processors))
        return processors

    monkeypatch.setattr(generation_utils.GenerationMixin, "_get_logits_processor", record)
    assisted(pair, prompts(1)[0], 0, 12, assistant_warps)
    kinds = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"}
    assert built["verifier"] == [Counter(dict.fromkeys(kinds, 1))]
    assert built["drafter"] and all(c == Counter(dict.fromkeys(kinds, copies)) for c in built["drafter"])


def test_the_assistant_drafts_exactly_m_a_round_and_gets_its_config_back(pair, rounds):
    drafter = pair[0]
    before = drafter.generation_config.to_dict()
    out = assisted(pair, prompts(1)[0], 1, 40)
    assert len(out) == 40
    drafts = [d for d, _ in rounds]
    assert len(drafts) > 3 and set(drafts[:-1]) == {M} and drafts[-1] <= M  # the last: what the budget allows
    assert drafter.generation_config.to_dict() == before


def mean_accepted(counts: list[int]) -> tuple[float, float]:
    return statistics.mean(counts), statistics.stdev(counts) / len(counts) ** 0.5


def test_assisted_generation_accepts_drafts_as_our_loop_does(pair, rounds):
    """Accepted drafts per full round (m drafted), ours against transformers' on the same prompts: equal within
    noise under the same law (|z| < 4); the control, transformers as shipped, is far off (z > 8)."""
    drafter, verifier = pair
    ours, same, shipped = [], [], []
    for i, prompt in enumerate(prompts(4)):
        for seed in range(10):
            out = speculative_generate(
                drafter, verifier, prompt, rule="sps", m=M, max_new_tokens=24,
                generator=torch.Generator().manual_seed(100 * i + seed), temperature=T, top_k=TOP_K, top_p=TOP_P,
            )  # fmt: skip
            ours += [a for d, a in zip(out.rounds.drafted, out.rounds.accepted) if d == M]
            for warps, into in (("same_law", same), ("as_shipped", shipped)):
                rounds.clear()
                assisted(pair, prompt, 100 * i + seed, 24, warps)
                into += [a for d, a in rounds if d == M]

    def z(a, b):
        (ma, sa), (mb, sb) = mean_accepted(a), mean_accepted(b)
        return (ma - mb) / (sa**2 + sb**2) ** 0.5

    assert abs(z(ours, same)) < 4, (mean_accepted(ours), mean_accepted(same))
    assert z(ours, shipped) > 8, (mean_accepted(ours), mean_accepted(shipped))


@pytest.mark.parametrize("temperature", [0.0, T])
def test_a_checkpoints_sampling_defaults_never_reach_the_reference(pair, temperature):
    """A verifier whose generation config sets a repetition penalty, min-p and an n-gram ban (as a checkpoint's
    generation_config.json may) decodes, with and without an assistant, the tokens of the same verifier
    without them; the control, `generate` as it ships, takes them in and decodes others."""
    drafter, verifier = pair
    prompt = torch.tensor([prompts(1)[0]])
    kw = sampling(temperature, TOP_K, TOP_P, 24)

    def decode(assistant, defaults_off=True):
        torch.manual_seed(7)
        extra = {"assistant_model": drafter} if assistant else {}
        hide = model_defaults_off(verifier, drafter) if defaults_off else contextlib.nullcontext()
        with hide, assistant_setup(drafter, M), torch.inference_mode():
            return verifier.generate(prompt, **kw, **extra)[0].tolist()

    plain = {assistant: decode(assistant) for assistant in (False, True)}
    own = verifier.generation_config
    verifier.generation_config = copy.deepcopy(own)
    verifier.generation_config.update(repetition_penalty=3.0, min_p=0.5, no_repeat_ngram_size=1)
    try:
        assert {assistant: decode(assistant) for assistant in (False, True)} == plain
        assert decode(False, defaults_off=False) != plain[False]  # the control: the defaults do change tokens
        assert verifier.generation_config.repetition_penalty == 3.0  # its config is restored
    finally:
        verifier.generation_config = own
