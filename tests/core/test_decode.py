"""The decode loop end to end: lossless SpS, exact KV rollback, greedy equality, budgets, EOS, seeds."""

import itertools

import pytest
import torch

from cactus_bench.core.decode import (
    Engine,
    EngineOptions,
    Job,
    autoregressive_generate,
    buckets,
    programs,
    speculative_generate,
)
from cactus_bench.core.decode import cache as cache_mod
from cactus_bench.core.decode import engine as engine_mod
from cactus_bench.core.rules import build_rule

from ..helpers.models import SLIDING, tiny_family, tiny_pair, tiny_qwen3
from ..helpers.reference_laws import CONFIGS
from ..helpers.rules import BonusFromP
from ..helpers.stats import P_THRESHOLD, g_test_pvalue

PROMPT = [1, 2, 3]


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(vocab_size=24, logit_scale=30.0)


def fresh_next_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1]


def fresh_kv(model, ids):
    """Keys/values of a fresh forward over `ids` alone, per layer, by transformers' own cache and masks (its
    sliding layers keep their window's positions only: those are compared)."""
    from transformers import DynamicCache

    tmp = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([ids]), use_cache=True, **{cache_mod.cache_kwarg(model): tmp})
    return [(layer.keys[0], layer.values[0]) for layer in tmp.layers]


def rollback_errors(drafter, verifier, prompts, *, rule="sps", m=3, batch_size=1, new_tokens=40, full=True):
    """Decode `prompts` (batch_size rows, refilled as they finish); after every round, the largest gap
    between what each row's caches hold and a fresh forward over its committed tokens (the verifier holds
    all but the last, the drafter of a row that drafts again all but the last one or two: `row.lag`).
    Rounds with a rejection (and with `full`, rounds that accepted every draft) must have happened."""
    errors, seen = [], {"rejections": 0, "full": 0, "rows": set()}

    def check(engine, slots):
        for b, row in enumerate(slots):
            if row is None:
                continue
            seen["rows"].add(b)
            c = row.committed
            caches = [(engine.vm, verifier, c[:-1])]
            if row.left > 0:  # a row at its token budget drafts no more: its last round may skip the drafter
                caches.append((engine.dm, drafter, c[: -row.lag]))
            for runner, model, held in caches:
                for (k, v), (k0, v0) in zip(runner.row_keys(b, len(held)), fresh_kv(model, held)):
                    n = k0.shape[-2]  # a sliding layer of the fresh forward keeps only its window
                    k, v = k[..., len(held) - n :, :], v[..., len(held) - n :, :]
                    errors.append(float(max((k - k0).abs().max(), (v - v0).abs().max())))
            a, d = row.rounds.accepted[-1], row.rounds.drafted[-1]
            seen["rejections"] += a < d
            seen["full"] += a == d > 0

    engine = Engine(verifier, drafter, build_rule(rule), m, options=EngineOptions(batch_size))
    engine.on_round = check
    jobs = [Job(p, new_tokens, torch.Generator().manual_seed(i)) for i, p in enumerate(prompts)]
    outs = [out for _, out in engine.run(jobs)]
    assert all(len(o.tokens) == new_tokens for o in outs)
    assert seen["rejections"] > 0 and (seen["full"] > 0 or not full), seen  # both kinds of rollback exercised
    assert seen["rows"] == set(range(batch_size))
    return errors


PROMPTS = [PROMPT, [4, 5], [7, 8, 9, 10, 11, 12], [2, 3, 2, 3]]  # several lengths: rows at their own positions


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("rule,m", [("sps", 3), ("cactus", 4), ("tas", 2), ("mentored", 1)])
def test_kv_rollback_equals_a_fresh_forward(pair, rule, m, batch_size):
    """Every row's cache, after every round, holds exactly a fresh forward's keys and values for its committed
    tokens: at batch size 1, and with 3 rows at different positions refilled from 4 prompts."""
    assert max(rollback_errors(*pair, PROMPTS, rule=rule, m=m, batch_size=batch_size)) < 1e-4


@pytest.fixture
def no_rollback(monkeypatch):
    """A realistic bug: write positions never move back within a request, so rejected drafts stay in the
    cache and later tokens attend to them (a new request still starts at its own positions)."""
    real_prefill, real_step = cache_mod.ModelRunner.prefill, programs.decode_step

    def prefill(self, rows, tokens):
        self.cache.fresh = getattr(self.cache, "fresh", set()) | set(rows)  # rows just admitted: their own positions
        return real_prefill(self, rows, tokens)

    def never_back(model, cache, ids, *args):  # every forward of a round's programs
        starts = cache.pos.tolist()
        fresh, reached = getattr(cache, "fresh", set()), getattr(cache, "reached", [0] * len(starts))
        starts = [s if b in fresh else max(s, r) for b, (s, r) in enumerate(zip(starts, reached))]
        cache.fresh, cache.reached = set(), [s + ids.shape[1] for s in starts]
        cache.pos.copy_(torch.tensor(starts))
        return real_step(model, cache, ids, *args)

    monkeypatch.setattr(cache_mod.ModelRunner, "prefill", prefill)
    monkeypatch.setattr(programs, "decode_step", never_back)
    monkeypatch.setattr(engine_mod, "capacity_for", lambda n: buckets.kv_bucket(8 * n))  # room for what piles up


def test_rollback_check_rejects_a_loop_that_forgets_to_roll_back(pair, no_rollback):
    """Negative control: the check above fails when rejected drafts stay in the cache."""
    with pytest.raises(AssertionError):
        assert max(rollback_errors(*pair, PROMPTS[:1])) < 1e-4


# --- the paper's other architectures (Gemma-2, Llama 3, R1-Distill's Qwen2) and Mistral ------------------


@pytest.fixture(scope="module", params=[*SLIDING, "llama3", "qwen2"])
def family_pair(request):
    return tiny_family(request.param, 16, seed=0), tiny_family(request.param, 32, seed=1)


def test_kv_rollback_equals_a_fresh_forward_in_every_family(family_pair):
    """Past a sliding window too: the fresh forward applies the window through the model's own masks; ours
    keeps every position and must attend to the window only (through the masks we build), rows batched."""
    assert max(rollback_errors(*family_pair, PROMPTS, batch_size=2, full=False)) < 1e-4  # a wrong window: > 1e-2


@pytest.mark.parametrize("arch", SLIDING)
def test_a_mask_without_the_window_is_caught(arch, monkeypatch):
    """Negative control: masks that ignore the sliding window attend past it once a row is longer."""
    pair = tiny_family(arch, 16, seed=0), tiny_family(arch, 32, seed=1)
    full = cache_mod.RowCache.masks

    def no_window(self, positions, dtype, impl):
        self.window = 10**9
        return full(self, positions, dtype, impl)

    monkeypatch.setattr(cache_mod.RowCache, "masks", no_window)
    assert max(rollback_errors(*pair, PROMPTS[:1], full=False)) > 1e-2


# --- lossless: the law of the first L tokens under SpS is the verifier's exact AR law ---------------

V_SMALL, L, M_SMALL, RUNS = 5, 3, 2, 3000


@pytest.fixture(scope="module")
def small_pair():
    # Large init: sharp attention, so outputs depend on the whole context (a stale cache entry shows).
    return tiny_pair(vocab_size=V_SMALL, logit_scale=1.0, init_std=0.5)


def exact_ar_law(verifier, prompt, length):
    """P(t_1..t_L | prompt) for every sequence, by enumeration (V^L cells)."""
    law = []
    for seq in itertools.product(range(V_SMALL), repeat=length):
        prob = 1.0
        for i, t in enumerate(seq):
            prob *= float(torch.softmax(fresh_next_logits(verifier, prompt + list(seq[:i])).double(), -1)[t])
        law.append(prob)
    return torch.tensor(law, dtype=torch.float64)


def decode_runs(drafter, verifier, rule, seed=0, eos=()):
    """RUNS replies of L tokens to PROMPT, decoded 64 at a time by one engine with refill, each request on its
    own seeded stream (an item's law is the same at any batch size; one request at a time took minutes)."""
    engine = Engine(verifier, drafter, rule, M_SMALL, eos=eos, options=EngineOptions(batch_size=64))
    jobs = [Job(list(PROMPT), L, torch.Generator().manual_seed(seed * RUNS + i)) for i in range(RUNS)]
    return [out for _, out in engine.run(jobs)]


def sequence_samples(drafter, verifier, rule, seed=0):
    cells, rollbacks = [], 0
    for out in decode_runs(drafter, verifier, rule, seed):
        assert len(out.tokens) == L
        cells.append(sum(t * V_SMALL ** (L - 1 - i) for i, t in enumerate(out.tokens)))
        rollbacks += sum(a < d for a, d in zip(out.rounds.accepted, out.rounds.drafted))
    return torch.tensor(cells), rollbacks


@pytest.fixture(scope="module")
def ar_law(small_pair):
    return exact_ar_law(small_pair[1], PROMPT, L)


def test_sps_is_lossless_over_several_rounds(small_pair, ar_law):
    samples, rollbacks = sequence_samples(*small_pair, build_rule("sps"))
    assert rollbacks > RUNS // 4  # rejections and rollbacks really happened
    assert g_test_pvalue(samples, ar_law) > P_THRESHOLD


@pytest.mark.slow  # the lossless test with EOS (3,000 decodes, batched: seconds): CI's slow tier
def test_stopping_the_draft_at_eos_keeps_sps_lossless(small_pair):
    """With EOS = token 0 (frequent here) rounds end their draft early; the law of the whole reply (cut at
    the first EOS) is still the verifier's exact AR law."""
    eos = 0
    law = []
    for seq in itertools.product(range(V_SMALL), repeat=L):  # canonical form: EOS repeated after the first
        first = seq.index(eos) if eos in seq else L
        if any(t != eos for t in seq[first:]):
            law.append(0.0)
            continue
        prob = 1.0
        for i, t in enumerate(seq[: first + 1] if first < L else seq):
            prob *= float(torch.softmax(fresh_next_logits(small_pair[1], PROMPT + list(seq[:i])).double(), -1)[t])
        law.append(prob)
    cells, short_drafts = [], 0
    for out in decode_runs(*small_pair, build_rule("sps"), eos={eos}):
        toks = out.tokens + [eos] * (L - len(out.tokens))
        cells.append(sum(t * V_SMALL ** (L - 1 - i) for i, t in enumerate(toks)))
        budget = L
        for drafted, emitted in zip(out.rounds.drafted, out.rounds.emitted):
            short_drafts += drafted < min(M_SMALL, budget - 1)
            budget -= emitted
    assert short_drafts > RUNS // 20  # drafts really stopped at EOS
    assert g_test_pvalue(torch.tensor(cells), torch.tensor(law)) > P_THRESHOLD


@pytest.mark.slow  # a negative control of the lossless test: CI's slow tier
def test_lossless_test_rejects_a_loop_without_rollback(small_pair, ar_law, no_rollback):
    samples, _ = sequence_samples(*small_pair, build_rule("sps"))
    assert g_test_pvalue(samples, ar_law) < P_THRESHOLD


@pytest.mark.slow  # a negative control of the lossless test: CI's slow tier
def test_lossless_test_rejects_a_bonus_from_the_drafter(small_pair, ar_law):
    samples, _ = sequence_samples(*small_pair, BonusFromP(build_rule("sps")))
    assert g_test_pvalue(samples, ar_law) < P_THRESHOLD


@pytest.mark.slow  # the lossless test's power check: CI's slow tier
def test_lossy_rule_is_not_lossless(small_pair, ar_law):
    """The test has power against a rule that is lossy by design."""
    samples, _ = sequence_samples(*small_pair, build_rule("cactus", delta=1.0))
    assert g_test_pvalue(samples, ar_law) < P_THRESHOLD


# --- greedy, budgets, EOS, context, seeds -------------------------------------------------------------


def reference_greedy(verifier, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(fresh_next_logits(verifier, ids).argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("name,params", CONFIGS, ids=[f"{n}{p}" for n, p in CONFIGS])
def test_temperature_zero_is_the_verifiers_greedy(pair, name, params):
    drafter, verifier = pair
    want = reference_greedy(verifier, PROMPT, 30)
    out = speculative_generate(
        drafter, verifier, PROMPT, rule=build_rule(name, **params), m=4, max_new_tokens=30, temperature=0.0
    )
    assert out.tokens == want
    assert autoregressive_generate(verifier, PROMPT, max_new_tokens=30, temperature=0.0).tokens == want


@pytest.mark.parametrize("m,budget", [(1, 17), (8, 3), (50, 7), (5, 1), (3, 10)])
def test_draft_length_and_budget(pair, m, budget):
    drafter, verifier = pair
    out = speculative_generate(
        drafter, verifier, PROMPT, rule="cactus", m=m, max_new_tokens=budget, generator=torch.Generator().manual_seed(1)
    )
    assert len(out.tokens) == budget and out.stop_reason == "length"
    assert sum(out.rounds.emitted) == budget
    assert all(d <= min(m, budget - 1) for d in out.rounds.drafted)
    assert all(0 <= a <= d for a, d in zip(out.rounds.accepted, out.rounds.drafted))


def test_eos_inside_an_accepted_block(pair):
    """Drafter = verifier at T = 0: every draft is accepted, so the EOS lands inside an accepted block."""
    _, verifier = pair
    greedy = reference_greedy(verifier, PROMPT, 12)
    eos = greedy[5]
    cut = greedy.index(eos)
    out = speculative_generate(
        verifier, verifier, PROMPT, rule="sps", m=8, max_new_tokens=12, temperature=0.0, eos_token_id=[eos, 10_000]
    )
    assert out.tokens == greedy[: cut + 1] and out.stop_reason == "eos"
    # the drafter stopped drafting at its EOS, and the block was cut right after it
    assert out.rounds.drafted[-1] == out.rounds.emitted[-1] < 8
    ar = autoregressive_generate(verifier, PROMPT, max_new_tokens=12, temperature=0.0, eos_token_id=eos)
    assert ar.tokens == out.tokens and ar.stop_reason == "eos"


def test_stop_callback(pair):
    drafter, verifier = pair
    out = speculative_generate(
        drafter,
        verifier,
        PROMPT,
        rule="sps",
        m=4,
        max_new_tokens=50,
        generator=torch.Generator().manual_seed(2),
        stop=lambda toks: len(toks) >= 6,
    )
    assert 6 <= len(out.tokens) <= 6 + 4 and out.stop_reason == "stop"


def test_prompt_longer_than_the_drafters_context_is_a_clear_error():
    drafter, verifier = tiny_pair(vocab_size=24, max_positions=16)
    with pytest.raises(ValueError, match="drafter's context is 16 tokens, but 1 of 1 request\\(s\\) need more"):
        speculative_generate(drafter, verifier, list(range(20)), rule="sps", m=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="needs 23 \\(prompt 10\\)"):
        speculative_generate(drafter, verifier, list(range(10)), rule="sps", m=2, max_new_tokens=10)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"m": 0}, "m \\(draft length\\) must be an integer >= 1"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"top_p": 0.0}, "top_p must be in"),
        ({"rule": "nope"}, "unknown acceptance rule"),
    ],
)
def test_bad_arguments(pair, kwargs, match):
    args = {"rule": "sps", "m": 2, "max_new_tokens": 4} | kwargs
    with pytest.raises(ValueError, match=match):
        speculative_generate(*pair, PROMPT, **args)


def test_two_prompts_to_the_one_prompt_api_is_a_clear_error(pair):
    with pytest.raises(ValueError, match="one prompt at a time"):
        speculative_generate(*pair, torch.tensor([PROMPT, PROMPT]), rule="sps", m=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="at least two tokens"):
        speculative_generate(*pair, [5], rule="sps", m=2, max_new_tokens=4)


@pytest.mark.parametrize("rule", ["cactus", "speccas", "mentored"])
def test_same_seed_same_tokens_and_statistics(pair, rule):
    def run(seed):
        out = speculative_generate(
            *pair,
            PROMPT,
            rule=rule,
            m=3,
            max_new_tokens=25,
            temperature=0.6,
            top_k=20,
            top_p=0.95,
            generator=torch.Generator().manual_seed(seed),
        )
        r = out.rounds
        return out.tokens, r.drafted, r.accepted, r.emitted, r.kl_sum, r.kl_count

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_statistics_are_consistent(pair):
    out = speculative_generate(
        *pair, PROMPT, rule="cactus", m=4, max_new_tokens=40, generator=torch.Generator().manual_seed(3)
    )
    s = out.summary()
    assert s["new_tokens"] == len(out.tokens) == sum(out.rounds.emitted)
    assert s["tau"] == pytest.approx(s["new_tokens"] / s["verifier_calls"])
    assert s["accepted_length"] == pytest.approx(s["accepted"] / s["verifier_calls"])
    assert s["prefix_acceptance"] == pytest.approx(s["accepted"] / s["drafted"])
    assert s["acceptance_rate"] == pytest.approx(s["accepted_any"] / s["drafted"])
    assert s["acceptance_rate"] >= s["prefix_acceptance"]
    assert s["target_kl"] is not None and s["target_kl"] >= 0
    assert all(e == a + 1 for a, e in zip(out.rounds.accepted, out.rounds.emitted))  # no EOS: accepted + 1
    total = s["t_draft"] + s["t_verify"] + s["t_rule"] + s["t_other"]
    assert total <= s["wall_time"] - s["prefill_time"]  # the phases partition part of the decode's time
    r = out.rounds  # every phase of every round was timed (a share of the wall time would judge the load)
    assert all(t > 0 for phase in (r.t_draft, r.t_verify, r.t_rule, r.t_other) for t in phase)
    ar = autoregressive_generate(pair[1], PROMPT, max_new_tokens=10, generator=torch.Generator().manual_seed(3))
    assert ar.tau == 1.0 and ar.accepted_length is None and ar.acceptance_rate is None and ar.target_kl is None


def test_target_free_rule_reports_no_kl(pair):
    out = speculative_generate(
        *pair, PROMPT, rule="tas", m=3, max_new_tokens=10, generator=torch.Generator().manual_seed(0)
    )
    assert out.target_kl is None and out.summary()["target_kl"] is None


def test_sps_has_zero_target_kl(pair):
    out = speculative_generate(
        *pair, PROMPT, rule="sps", m=3, max_new_tokens=10, generator=torch.Generator().manual_seed(0)
    )
    assert out.target_kl == 0.0


def decode_both(pair, rule, **kw):
    out = speculative_generate(
        *pair,
        PROMPT,
        rule=rule,
        m=4,
        max_new_tokens=50,
        temperature=0.6,
        top_k=20,
        top_p=0.95,
        generator=torch.Generator().manual_seed(5),
        **kw,
    )
    ar = autoregressive_generate(pair[1], PROMPT, max_new_tokens=30, generator=torch.Generator().manual_seed(5), **kw)
    return out.tokens, out.rounds.accepted, ar.tokens


@pytest.mark.parametrize("rule", ["sps", "cactus", "speccas"])
def test_the_traced_forward_gives_the_same_tokens_as_eager(pair, rule):
    """The forward dynamo traces (its `eager` backend: the graph the fast engine compiles, without inductor)."""
    assert decode_both(pair, rule) == decode_both(pair, rule, compile="eager")


@pytest.mark.slow
def test_compiled_path_gives_the_same_tokens_as_eager(pair):
    """torch.compile with inductor on CPU takes about a minute for the first shapes: slow suite."""
    assert decode_both(pair, "cactus") == decode_both(pair, "cactus", compile="inductor")


def test_padded_embeddings_of_different_sizes_use_the_shared_vocabulary():
    """Like Qwen3 pairs whose embedding matrices are padded differently: only shared ids are ever emitted, by
    the speculative loop and by the verifier alone given the pair's vocabulary; and SpS's law of a token is
    the verifier alone's, over that vocabulary, even where the verifier's padded rows carry mass."""
    drafter = tiny_qwen3(vocab_size=24, hidden_size=16, logit_scale=3.0, seed=0)
    verifier = tiny_qwen3(vocab_size=40, hidden_size=32, num_layers=2, logit_scale=3.0, seed=1)
    law = torch.softmax(fresh_next_logits(verifier, PROMPT)[:24].double(), -1)
    assert float(torch.softmax(fresh_next_logits(verifier, PROMPT).double(), -1)[24:].sum()) > 0.2  # padded mass

    def first_tokens(verifier_only: bool, vocab) -> list[int]:  # 3,000 decodes, 64 rows at a time
        engine = Engine(
            verifier,
            None if verifier_only else drafter,
            None if verifier_only else build_rule("sps"),
            0 if verifier_only else 1,
            vocab=vocab,
            options=EngineOptions(64),
        )
        todo = [Job(PROMPT, 1 if verifier_only else 2, torch.Generator().manual_seed(i)) for i in range(RUNS)]
        return [out.tokens[0] for _, out in engine.run(todo)]

    first = {
        "sps": first_tokens(False, None),
        "ar": first_tokens(True, 24),
        "ar_unrestricted": first_tokens(True, None),
    }
    assert max(first["sps"]) < 24 and max(first["ar"]) < 24
    assert g_test_pvalue(torch.tensor(first["sps"]), law) > P_THRESHOLD
    assert g_test_pvalue(torch.tensor(first["ar"]), law) > P_THRESHOLD
    assert max(first["ar_unrestricted"]) >= 24  # control: the verifier's own vocabulary does emit padded ids


# --- the warpers: the same distributions as transformers' (and vLLM's) ------------------------------


def hf_warp(logits, temperature, top_k, top_p):
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    scores = logits.float() / temperature
    if top_k:
        scores = TopKLogitsWarper(top_k)(None, scores)
    if top_p < 1:
        scores = TopPLogitsWarper(top_p)(None, scores)
    return torch.softmax(scores, -1)


@pytest.mark.parametrize("top_k,top_p", [(20, 0.95), (5, 1.0), (0, 0.9), (3, 0.5)])
def test_warper_matches_transformers(top_k, top_p):
    """Untied logits (transformers' sort is not stable: how it splits exact ties is its kernel's choice)."""
    from cactus_bench.core.decode import Warper

    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64).float() * 3
    torch.testing.assert_close(Warper(0.6, top_k, top_p)(logits), hf_warp(logits, 0.6, top_k, top_p))


def vllm_v0_warp(logits, temperature, top_k, top_p, tie_order=1):
    """The authors' sampler (vLLM V0's top-k/top-p: one ascending sort, top-k by the k-th largest, top-p
    dropping from the low end, at least one kept), with a stable sort: exactly tied logits in token-id order
    (`tie_order=-1`: the reverse, for the control)."""
    scaled = logits.float() / temperature
    ids = torch.arange(scaled.shape[-1]).expand_as(scaled)
    flip = tie_order < 0
    asc, idx = torch.sort(scaled.flip(-1) if flip else scaled, dim=-1, stable=True)
    idx = (ids.shape[-1] - 1 - idx) if flip else idx
    if top_k:
        asc = asc.masked_fill(asc < asc[..., -top_k : -top_k + 1 or None], float("-inf"))
    drop = torch.softmax(asc, -1).cumsum(-1) <= 1 - top_p
    drop[..., -1] = False
    asc = asc.masked_fill(drop, float("-inf"))
    return torch.softmax(torch.empty_like(asc).scatter(-1, idx, asc), -1)


@pytest.mark.parametrize("sort_below", [0, 10**9], ids=["top_k_picks", "full_sort"])
@pytest.mark.parametrize("top_k,top_p", [(20, 0.95), (20, 0.5), (5, 0.9), (0, 0.9), (50, 0.99)])
def test_warper_matches_the_authors_sampler_on_tied_bf16_logits(top_k, top_p, sort_below, monkeypatch):
    """bf16-rounded logits (many exact ties, some at the nucleus's edge): the same law as vLLM V0's algorithm
    with a stable sort, row for row, by either of the warper's two ways (sorting top-k's picks, or the whole
    vocabulary when it is small). Control: splitting the ties in the other order changes rows, so the data
    does test the tie rule."""
    from cactus_bench.core.decode import Warper, warp

    monkeypatch.setattr(warp, "SORT_BELOW", sort_below)
    logits = (torch.randn(192, 400, generator=torch.Generator().manual_seed(1)) * 1.5).bfloat16().float()
    logits = torch.round(logits * 2) / 2  # coarser still: ties at the k-th logit and at the nucleus's edge
    ours = Warper(0.6, top_k, top_p)(logits)
    torch.testing.assert_close(ours, vllm_v0_warp(logits, 0.6, top_k, top_p), atol=1e-6, rtol=0)
    reversed_ties = vllm_v0_warp(logits, 0.6, top_k, top_p, tie_order=-1)
    assert int(((ours > 0) != (reversed_ties > 0)).any(-1).sum()) > 10


def test_top_k_then_top_p_sorts_top_ks_picks_not_the_vocabulary():
    """A position's top-p sorts the k values top-k picked (plus ties found by a cumulative sum), never the
    vocabulary (V = 151,936 in the paper's pairs: 18 ms a call for 4 rows on a CPU thread). Control: top-p
    alone sorts the vocabulary."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from cactus_bench.core.decode import Warper

    class Sorts(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.widths = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket in (torch.ops.aten.sort, torch.ops.aten.argsort):
                self.widths.append(args[0].shape[-1])
            return func(*args, **(kwargs or {}))

    logits = torch.randn(4, 10000)  # above SORT_BELOW
    with Sorts() as sorts:
        Warper(0.6, 20, 0.95)(logits)
    assert sorts.widths and max(sorts.widths) == 20
    with Sorts() as sorts:
        Warper(0.6, 0, 0.95)(logits)
    assert max(sorts.widths) == 10000


def test_ties_at_the_top_k_boundary_are_kept_before_top_p():
    """19 logits from linspace(2, 1) and three tied at 0.9 (k = 20 keeps all three), T = 0.6, top-p 0.95:
    transformers and vLLM keep 19 tokens. Dropping the ties before top-p (18 kept) was the bug."""
    from cactus_bench.core.decode import Warper

    logits = torch.cat([torch.linspace(2, 1, 19), torch.full((3,), 0.9), torch.full((10,), 0.1)])[None]
    kept = int((Warper(0.6, 20, 0.95)(logits) > 0).sum())
    assert kept == int((hf_warp(logits, 0.6, 20, 0.95) > 0).sum()) == 19


# --- the output KL measures what is emitted -----------------------------------------------------------


def test_output_kl_is_what_is_emitted_not_the_target():
    """A drafter equal to the verifier: Cactus accepts every draft, so it emits the verifier's law (output KL
    ~0) though its targets h are not q (target KL > 0: the figure that was reported as 'realised KL');
    SpS's output KL is 0 with any drafter; a lossy rule's is positive."""
    pair = tiny_pair(vocab_size=24, logit_scale=4.0)
    _, verifier = pair

    def run(drafter, rule):
        kw = {"temperature": 0.6, "top_k": 20, "top_p": 0.95, "generator": torch.Generator().manual_seed(4)}
        return speculative_generate(drafter, verifier, PROMPT, rule=rule, m=4, max_new_tokens=60, **kw)

    same = run(verifier, build_rule("cactus", delta=1.0))
    assert same.acceptance_rate > 0.999 and same.output_kl < 1e-6 and same.target_kl > 1e-3
    assert run(pair[0], build_rule("sps")).output_kl < 1e-9
    assert run(pair[0], build_rule("cactus", delta=1.0)).output_kl > 1e-3
    assert run(pair[0], build_rule("tas")).output_kl is not None  # a target-free rule still has one


def test_without_top_k_the_output_kl_is_skipped_and_says_so(pair):
    out = speculative_generate(
        *pair,
        PROMPT,
        rule="cactus",
        m=3,
        max_new_tokens=20,
        temperature=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    s = out.summary()
    assert s["output_kl"] is None and s["output_kl_skipped"] == 1.0 and s["target_kl"] is not None
