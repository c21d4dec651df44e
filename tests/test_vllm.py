"""The vLLM tier (`make test-vllm`, in `.venv-vllm`): engine=vllm on the SmolLM2 pair (verifier
SmolLM2-135M-Instruct, drafter its first 24 layers), checked against vLLM's own sampler and against this
project's transformers backend. One torch thread, eager engines with a small KV cache."""

import json
import math

import pytest
import torch

pytest.importorskip("vllm")

from vllm import SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402
from vllm.v1.sample import rejection_sampler  # noqa: E402
from vllm.v1.sample.metadata import SamplingMetadata  # noqa: E402

from cactus_bench.app import config  # noqa: E402
from cactus_bench.app import run as run_mod  # noqa: E402
from cactus_bench.app.compose import compose  # noqa: E402
from cactus_bench.decode.backends.vllm import decoder as vdecoder  # noqa: E402
from cactus_bench.decode.backends.vllm import plugin  # noqa: E402
from cactus_bench.decode.warp import Warper  # noqa: E402
from cactus_bench.embedded import resolve_model  # noqa: E402
from cactus_bench.embedded.smollm2 import ensure_smollm2  # noqa: E402
from cactus_bench.models import load_pair  # noqa: E402
from cactus_bench.rules import RULES, Rule, build_rule  # noqa: E402

from .helpers.stats import P_THRESHOLD, g_test_pvalue  # noqa: E402

pytestmark = pytest.mark.vllm

# one engine of each kind serves every test (engine start-up is most of this tier's time)
BASE = (
    "pair=smollm2",
    "engine=vllm",
    "engine.name=eager",
    "m=4",
    "batch_size=32",
    "engine.settings.kv_cache_gib=0.5",
    "engine.settings.max_model_len=1024",
    "progress=false",
)
HF_BASE = ("pair=smollm2", "engine=eager", "m=4", "batch_size=8", "progress=false")  # the transformers backend
SELF = "pair.drafter=embedded:smollm2/verifier"  # the verifier as its own drafter: p = q
PROMPT = "Q: What is 7 times 8?\nA:"  # drafter and verifier disagree here: a broken residual shows
SAMPLED = SamplingParams(temperature=1.0, top_k=20, top_p=1.0, max_tokens=3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    from vllm.platforms import current_platform

    current_platform.import_kernels()  # what an engine does first: the CPU build's kernels, for tests
    current_platform.register_triton_kernel_overrides()  # that call vLLM's own sampler outside one
    plugin.register()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    vdecoder._ENGINES.clear()
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folder():
    return ensure_smollm2(log=lambda s: None)


@pytest.fixture(scope="module")
def pair(folder):
    return load_pair(str(folder / "drafter"), str(folder / "verifier"), dtype="float32", device="cpu")


def llm(*overrides):
    """The backend's engine for these overrides (started once, shared with the app's runs of them)."""
    cfg = compose((*BASE, *overrides))
    spec = config.validate(cfg)
    models = spec.loading(lambda n: resolve_model(n, log=lambda s: None))
    return vdecoder.engine(models, spec.decode, models.drafter)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    results = tmp_path_factory.mktemp("vllm") / "runs"

    def run(*overrides, base=BASE):
        cfg = compose((*base, *overrides, f"paths.runs={results}"))
        summary = run_mod.run(cfg)
        folder = next(results.glob(f"{cfg.data.name}/*/*_{summary['run_key']}"))
        samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        return summary, sorted(samples, key=lambda s: s["index"])

    run.results = results
    return run


def decode(engine, prompt_ids, n, rule, params=SAMPLED, seed0=0, warp="verifier"):
    """n decodes of one prompt, request i seeded seed0 + i; `rule` None: vLLM's own acceptance step (with
    this project's seeded drafter)."""
    tags = [f"t{seed0 + i}" for i in range(n)]
    sampling = [params.clone() for _ in range(n)]
    for i, s in enumerate(sampling):
        s.seed = seed0 + i
        s.extra_args = plugin.request_settings(rule, {}, warp, tags[i])
    outs = engine.generate([TokensPrompt(prompt_token_ids=prompt_ids)] * n, sampling, use_tqdm=False)
    rounds = engine.collective_rpc(plugin.take_rounds, args=(tags,))[0]
    return [tuple(o.outputs[0].token_ids) for o in outs], [rounds[t] for t in tags]


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


# --- inside the engine ---------------------------------------------------------------------------------------


def test_sps_through_the_plugin_equals_vllms_own_acceptance_in_the_engine(pair):
    """The same requests, seeds and drafts (the plugin's seeded drafter): SpS through the plugin emits the
    tokens vLLM's own kernel emits, 16 replies of 24 tokens each."""
    engine = llm("method=sps")
    prompt = pair.tokenizer(PROMPT)["input_ids"]
    params = SamplingParams(temperature=0.6, top_k=20, top_p=0.95, max_tokens=24)
    ours, rounds = decode(engine, prompt, 16, "sps", params)
    own, _ = decode(engine, prompt, 16, None, params)
    assert ours == own
    assert sum(r[1] for rs in rounds for r in rs) > 100  # drafts were made and judged
    again, _ = decode(engine, prompt, 16, "sps", params)
    assert again == ours  # the drafter draws from each request's own seed: a rerun is token-identical


def test_greedy_speculative_decoding_equals_vllms_greedy_verifier(runs):
    """At T = 0 every rule is exact-match acceptance: SpS with the lossy drafter emits the verifier's greedy
    tokens, item by item, through the app (engine=vllm)."""
    greedy = ("data=ifeval", "limit=4", "max_gen_toks=32", "sampling=greedy")
    _, alone = runs("method=ar", *greedy)
    summary, spec = runs("method=sps", *greedy)
    assert summary["acceptance_rate"] < 0.9  # the drafter disagrees: rejections happened
    assert [s["tokens"] for s in spec] == [s["tokens"] for s in alone]


def two_token_law(pair, rule, warper, prompt):
    """P(t1, t2 | prompt) through vLLM: t1 is the prefill's verifier sample, t2 the rule's first decision
    (drafts of p(.|prompt, t1) judged against q(.|prompt, t1)): q(t1) * rule.output_law(p, q)(t2), float64;
    a reply that ends at t1 (EOS) is the cell (t1,)."""
    with torch.inference_mode():
        q1 = warper(pair.verifier(torch.tensor([prompt])).logits[0, -1].double().unsqueeze(0))[0]
        law = {}
        for t in q1.nonzero().flatten().tolist():
            if t in pair.eos_token_id:
                law[(t,)] = float(q1[t])
                continue
            ids = torch.tensor([prompt + [t]])
            q2 = warper(pair.verifier(ids).logits[0, -1].double().unsqueeze(0))[0]
            p2 = warper(pair.drafter(ids).logits[0, -1].double().unsqueeze(0))[0]
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


@pytest.mark.parametrize("rule", ["sps", "cactus", "tas", "topk", "broken"])
def test_the_first_decision_follows_the_rules_law_through_vllm(pair, rule):
    """For each rule, (t1, t2) through vLLM follows the same rule's exact law on the transformers models
    (G-test, 128 decodes); a rule that accepts every draft is rejected by the same test."""
    if rule == "broken" and "accept_every_draft" not in RULES.names():
        RULES.add("accept_every_draft", AcceptEveryDraft)
    name = "accept_every_draft" if rule == "broken" else rule
    params = {"cactus": {"delta": 0.75}}.get(rule, {})
    engine = llm("method=sps")
    prompt = pair.tokenizer(PROMPT)["input_ids"]
    exact = build_rule("sps") if rule == "broken" else build_rule(name, **params)
    law = two_token_law(pair, exact, Warper(1.0, 20, 1.0), prompt)
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


def test_greedy_acceptance_is_the_same_on_both_backends(runs):
    """At T = 0 nothing is random: item by item, vLLM and the transformers backend emit the same tokens and
    accept the same drafts in the same number of verifier calls (vLLM's prefill call, which emits a token,
    stands where our engine's last call, which drafts nothing, does)."""
    greedy = ("data=ifeval", "limit=4", "max_gen_toks=32", "sampling=greedy", "method=sps")
    _, on_vllm = runs(*greedy)
    _, on_hf = runs(*greedy, base=HF_BASE)
    for key in ("accepted", "verifier_calls", "new_tokens"):
        assert [s["stats"][key] for s in on_vllm] == [s["stats"][key] for s in on_hf], key
    assert [s["tokens"] for s in on_vllm] == [s["tokens"] for s in on_hf]


def test_al_and_score_agree_between_backends(runs):
    """A small sampled Cactus run (8 IFEval prompts, 48 tokens): per-item accepted lengths on the two
    backends differ by less than 4 standard errors of their paired mean (AL is noisy at this size: a 95 %
    interval misses 0 one seed in twenty; a broken acceptance step moves AL by far more), the scores agree
    within their paired interval, and every sample carries the same statistics."""
    from cactus_bench import intervals

    short = ("data=ifeval", "limit=8", "max_gen_toks=48", "method=cactus", "delta=0.75")
    summary_v, vllm_samples = runs(*short)
    summary_h, hf_samples = runs(*short, base=HF_BASE)
    assert summary_v["run_key"] != summary_h["run_key"]  # two engines, two runs
    al = [
        (v["stats"]["accepted_length"] or 0) - (h["stats"]["accepted_length"] or 0)
        for v, h in zip(vllm_samples, hf_samples)
    ]
    est = intervals.mean_interval(al)
    assert est is not None
    se = (est.high - est.low) / 2 / intervals.t95(len(al) - 1)
    assert abs(est.value) < 4 * se, est
    score = intervals.paired_difference(vllm_samples, hf_samples)
    assert score is None or score.low <= 0 <= score.high, score
    for key in ("accepted_length", "tau", "acceptance_rate", "prefix_acceptance", "target_kl", "output_kl"):
        assert summary_v[key] is not None and math.isfinite(summary_v[key]), key
    assert set(vllm_samples[0]["stats"]) == set(hf_samples[0]["stats"])
    for s in vllm_samples:
        st = s["stats"]
        assert st["new_tokens"] == len(s["tokens"]) and st["rejected"] == st["drafted"] - st["accepted"]


def test_paired_timing_times_each_item_beside_the_verifier_alone_on_vllm(runs):
    """paired_timing on vLLM: each item decoded alone by the method and by a verifier-alone vLLM engine, back
    to back (the same engines the runs above started), and the paired speedup computed from those times."""
    summary, samples = runs(
        "data=ifeval", "limit=2", "max_gen_toks=16", "method=sps", "paired_timing=true", "batch_size=1"
    )
    timing = [
        json.loads(line)
        for f in runs.results.glob(f"ifeval/*/*_{summary['run_key']}/timing.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert sorted(t["index"] for t in timing) == [s["index"] for s in samples]
    assert all(t["stats"]["paired_baseline_time"] > 0 and t["stats"]["paired_method_time"] > 0 for t in timing)
    assert summary["paired_speedup"] is not None and summary["paired_speedup"] > 0


# --- the drafter equal to the verifier (its own engine: last, as it replaces the speculative one) ------------


@pytest.mark.parametrize("method", [["method=sps"], ["method=cactus", "delta=0.75"]])
def test_a_drafter_equal_to_the_verifier_has_every_draft_accepted(runs, method):
    """p = q (p warped like q, the default): every draft is accepted, bar float rounding between the
    drafter's one-token forwards and the verifier's five-token one; what is emitted follows q (output KL 0)."""
    summary, samples = runs(SELF, "pair.name=smollm2-self", "data=ifeval", "limit=2", "max_gen_toks=48", *method)
    assert summary["acceptance_rate"] > 0.99 and summary["accepted_length"] > 3.0
    assert summary["output_kl"] < 1e-6
    assert sum(s["stats"]["drafted"] for s in samples) > 40


def test_vllms_own_drafter_warp_accepts_less_with_the_same_drafter(runs):
    """drafter_warp=temperature (vLLM 0.32's own drafter: no top-k/top-p on p): with p = q before warping,
    acceptance drops below the default's; a different law, so a different run."""
    args = (SELF, "pair.name=smollm2-self", "data=ifeval", "limit=2", "max_gen_toks=48", "method=sps")
    own, _ = runs(*args, "engine.settings.drafter_warp=temperature")
    like_q, _ = runs(*args)
    assert own["run_key"] != like_q["run_key"]
    assert own["acceptance_rate"] < like_q["acceptance_rate"] - 0.02
