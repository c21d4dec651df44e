"""engine=vllm without vLLM: what the default suite can check of the backend (its config, its place in a
run's identity, and how a generation's rounds are rebuilt from the plugin's record); `make test-vllm` runs
it against vLLM itself (tests/vllm/)."""

import importlib.util

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate
from cactus_bench.app.identity import RunIdentity
from cactus_bench.backends.vllm import INSTALL
from cactus_bench.backends.vllm.decoder import build_rounds

from ..helpers.configs import cfg_of
from ..helpers.guards import refuse
from ..helpers.reference_laws import CONFIGS


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_engine_vllm_without_vllm_says_how_to_install_it_before_anything_loads(monkeypatch):
    monkeypatch.setattr(run_mod, "get_decoder", refuse("loaded a model without vLLM"))
    with pytest.raises(ConfigError) as e:
        run_mod.run(cfg_of("engine=vllm", "method=cactus"))
    assert str(e.value) == INSTALL and "make test-vllm" in INSTALL and "engine=auto" in INSTALL


@pytest.mark.parametrize(
    "overrides,match",
    [
        (["engine.settings.drafter_warp=top"], "engine.settings.drafter_warp='top' is not valid: verifier"),
        (["+engine.settings.gpu_util=0.5"], "engine.settings.gpu_util is not a vllm setting"),
        (["engine.settings.kv_cache_gib=0"], "engine.settings.kv_cache_gib=0 is not valid"),
        (["engine.name=fast"], "engine.name='fast' is not valid for engine.backend=vllm"),
    ],
)
def test_bad_vllm_settings_are_one_paragraph(overrides, match):
    with pytest.raises(ConfigError, match=match):
        validate(cfg_of("engine=vllm", *overrides))


def test_tensor_parallelism_needs_a_backend_that_shards():
    with pytest.raises(ConfigError, match="engine.backend=hf does not shard a model: use engine=vllm"):
        validate(cfg_of("pair.tensor_parallel_size=2"))
    with pytest.raises(ConfigError, match="pair.tensor_parallel_size=0 is not valid"):
        validate(cfg_of("pair.tensor_parallel_size=0"))


def test_the_engine_is_part_of_a_runs_identity_only_where_it_changes_the_tokens():
    """hf's engines decode the same tokens (and the key of every hf run is what it was before vLLM came);
    vllm's decode other random streams, and its drafter_warp another law."""
    hf = RunIdentity.of(cfg_of("method=cactus"))
    assert RunIdentity.of(cfg_of("method=cactus", "engine=eager")).key == hf.key
    assert "engine" not in hf.as_dict()
    vllm = RunIdentity.of(cfg_of("method=cactus", "engine=vllm"))
    own = RunIdentity.of(cfg_of("method=cactus", "engine=vllm", "engine.settings.drafter_warp=temperature"))
    assert len({hf.key, vllm.key, own.key}) == 3
    assert vllm.engine == {"backend": "vllm", "drafter_warp": "verifier"}
    assert RunIdentity.of(cfg_of("method=cactus", "engine=vllm", "engine.settings.kv_cache_gib=2")).key == vllm.key
    # a run's references (SpS for Rej, the verifier alone for speedup) are on the same engine
    assert vllm.reference("baseline").engine == vllm.engine


EOS = 9


def round_(before, passes, drafts=(1, 2, 3, 4), kl=0.1):
    """A round as the plugin records it (`plugin.ROUND_FIELDS`): per draft position."""
    k = len(passes)
    return [before, list(drafts[:k]), list(passes), [kl] * k, [0.2] * k, [1] * k, 0.001]


def build(recorded, n_tokens, max_tokens=100):
    return build_rounds(recorded, n_tokens, max_tokens, {EOS}, wall=2.0)


def test_rounds_are_the_acceptance_steps_calls_and_the_prefills_token_is_not_one():
    """vLLM's prefill emits the first token without a call of the acceptance step: not a round (it was one,
    with zero drafts, so AL and τ came out about 1/R lower than the transformers engine's). A step without
    drafts between two recorded ones is a call that emitted one token; a generation that stops inside its
    last round cuts it there."""
    recorded = [round_(1, [1, 1, 0, 1]), round_(4, [1, 1, 1, 1]), round_(10, [0, 1, 0, 0])]
    r = build(recorded, 12)
    # round at 1 (3 tokens), round at 4 (5), a step without drafts at 9, round at 10 (1), one more step
    assert r.drafted == [4, 4, 0, 4, 0]
    assert r.emitted == [3, 5, 1, 1, 1] and sum(r.emitted) == 12 - 1  # the prefill's token is no round's
    assert r.accepted == [2, 4, 0, 0, 0] and r.accepted_any == [3, 4, 0, 1, 0]
    assert r.t_other[-1] == pytest.approx(2.0 - 3 * 0.001) and r.kl_count == [3, 4, 0, 1, 0]
    assert r.kl_sum == pytest.approx([0.3, 0.4, 0.0, 0.1, 0.0])

    eos = build([round_(1, [1, 1, 1, 1])], 3)  # stopped at its 2nd token (a stop string)
    assert eos.emitted == [2] and eos.accepted == [2] and eos.drafted == [4]

    no_kl = build([[1, [1, 2, 3, 4], [1, 0, 0, 0], None, [0.0] * 4, [1] * 4, 0.0]], 3)
    assert no_kl.kl_count == [0]  # a target-free rule: no target KL counted


def test_drafts_past_a_drafted_eos_do_not_count():
    """vLLM drafts and tests all m past a drafted EOS; the transformers engine's draft stops there. Drafts
    [a, EOS, b, c], the first three accepted: drafted 2, accepted 2, accepted_any 2 (were 4, 3 and 3), and
    the KLs over those 2 positions only."""
    r = build([round_(1, [1, 1, 1, 0], drafts=(5, EOS, 6, 7))], 3)
    assert (r.drafted, r.accepted, r.accepted_any, r.emitted) == ([2], [2], [2], [2])
    assert r.kl_count == [2] and r.kl_sum == pytest.approx([0.2]) and r.out_kl_count == [2]


def test_at_the_token_budget_only_the_drafts_it_left_room_for_count():
    """vLLM drafts m whatever is left; our engine drafts at most the tokens left but one. With 2 tokens of
    budget left, a round that drafted 4 (passing 1, 1, 0, 1) counts 1 draft, accepted, its KL at that one
    position, and emits 2 tokens, as our engine's round would."""
    r = build([round_(1, [1, 1, 0, 1]), round_(4, [1, 1, 0, 1])], 6, max_tokens=6)
    assert r.drafted == [4, 1] and r.accepted == [2, 1] and r.accepted_any == [3, 1]
    assert r.emitted == [3, 2] and r.kl_count == [3, 1] and r.kl_sum == pytest.approx([0.3, 0.1])
    last = build([round_(1, [0, 1, 1, 0])], 2, max_tokens=2)  # one token left
    assert last.drafted == [0] and last.accepted == [0] and last.accepted_any == [0] and last.kl_count == [0]


def test_both_backends_count_a_round_by_one_definition():
    """Given the same accept decisions, the transformers engine's round (`Rule.verify` with the drafts that
    count, then `round_columns`) and vLLM's (every draft tested, counted afterwards by `build_rounds`) give
    the same numbers, whatever is cut: seeded random rounds with drafted EOS ids and token budgets; and so the
    same acceptance per draft position."""
    import torch

    from cactus_bench.core.decode.stats import COUNTED, counted_drafts, draft_budget, position_counts, round_columns

    g = torch.Generator().manual_seed(0)
    m, B = 4, 400
    rounds: dict[str, tuple[list[int], list[int]]] = {"hf": ([], []), "vllm": ([], [])}  # drafted, accepted
    drafts = torch.randint(5, 12, (B, m), generator=g)  # some are EOS (9)
    passes = (torch.rand(B, m, generator=g) < 0.7).long()
    kl, out_kl = torch.rand(B, m, generator=g, dtype=torch.float64), torch.rand(B, m, generator=g)
    fits = torch.rand(B, m, generator=g) < 0.9
    left = torch.randint(1, 8, (B,), generator=g)
    through_eos = torch.where(drafts == EOS, torch.arange(1, m + 1), m).min(-1).values
    n_drafts = counted_drafts(torch.tensor([draft_budget(m, int(x)) for x in left]), through_eos)
    # the transformers engine: the rule tests only the drafts that count
    hf = round_columns(passes * (torch.arange(m) < n_drafts[:, None]), n_drafts, kl, out_kl, fits)
    for b in range(B):
        before, max_tokens = 1, 1 + int(left[b])
        record = [before, drafts[b].tolist(), passes[b].tolist(), kl[b].tolist(), out_kl[b].tolist()]
        vllm = build([[*record, fits[b].int().tolist(), 0.0]], before + 1 + m, max_tokens=max_tokens)
        want = dict(zip(COUNTED, hf[b].tolist()))
        got = {k: getattr(vllm, k)[0] for k in COUNTED}
        assert got == pytest.approx(want), (b, got, want)
        for side, (d, a) in (("hf", (want["drafted"], want["accepted"])), ("vllm", (got["drafted"], got["accepted"]))):
            rounds[side][0].append(int(d))
            rounds[side][1].append(int(a))
    # acceptance per draft position, one definition: the same counts, and so the same figures, on both sides
    hf_counts, vllm_counts = (position_counts(*rounds[side]) for side in ("hf", "vllm"))
    assert hf_counts == vllm_counts and sum(hf_counts["accepted_hist"]) == B
    assert 0 < hf_counts["tested_at"][-1] < hf_counts["tested_at"][0]  # cut rounds test fewer positions


def test_a_batch_the_plugin_cannot_read_stops_the_run_in_one_paragraph(monkeypatch):
    """vLLM handing the hooks a batch of another shape made `verify` return vLLM's own SpS and `draft` vLLM's
    unseeded drafter, silently (a Cactus run became SpS, its rounds uncounted): now one paragraph."""
    import types

    import torch

    from cactus_bench.backends.vllm import plugin

    params = types.SimpleNamespace(extra_args={plugin.KEY: {"rule": "cactus", "tag": "t"}}, top_k=0)
    state = types.SimpleNamespace(sampling_params=params, output_token_ids=[1])
    runner = types.SimpleNamespace(input_batch=types.SimpleNamespace(req_ids=["a", "b"]), requests={"a": state})
    monkeypatch.setitem(plugin._STEP, "runner", runner)
    monkeypatch.setitem(plugin._ORIGINAL, "rejection_sample", lambda *a: pytest.fail("vLLM's own step decided"))
    monkeypatch.setitem(plugin._ORIGINAL, "compute_probs", lambda *a: pytest.fail("vLLM's own drafter drafted"))
    metadata = types.SimpleNamespace(all_greedy=False, all_random=True, generators={})
    with pytest.raises(RuntimeError, match=r"acceptance step: draft counts for 3 requests, 2 sampled.*vLLM 0\.32\.0"):
        plugin.verify(torch.zeros(6, dtype=torch.long), [2, 2, 2], 2, None, None, torch.zeros(6, 8), None, metadata)
    with pytest.raises(RuntimeError, match="the drafter: 3 rows of logits for 2 requests.*engine=eager"):
        plugin.draft(torch.zeros(3, 8), metadata)
    runner.requests = {}  # no request of this project's: vLLM's own step, as before (the control)
    monkeypatch.setitem(plugin._ORIGINAL, "compute_probs", lambda *a: "vLLM's own")
    assert plugin.draft(torch.zeros(3, 8), metadata) == "vLLM's own"


def test_a_slurm_job_asks_for_the_gpus_its_verifier_is_sharded_over():
    from cactus_bench.tools.sweep import gpus_per_job

    assert gpus_per_job([cfg_of("method=sps"), cfg_of("engine=vllm", "pair.tensor_parallel_size=4")]) == 4
    assert gpus_per_job([cfg_of("method=sps")]) == 1


def test_the_kv_cache_is_sized_from_the_runs_rows_and_longest_sequence():
    """engine=vllm left vLLM's CPU KV cache at its default share of the machine (a 135M pair peaked at 19.7 GB
    of 24 GB, or refused to start where a NUMA node held less): the cache is the run's rows × its longest
    sequence for both models' layers, auto fills at most half the free memory, and one that does not fit
    is one paragraph."""
    from transformers import LlamaConfig

    from cactus_bench.backends.vllm import memory
    from cactus_bench.core.decode.api import ModelLoadError

    smol = LlamaConfig(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)
    drafter = LlamaConfig(num_hidden_layers=24, num_attention_heads=9, num_key_value_heads=3, hidden_size=576)
    assert memory.bytes_per_token(smol, 4) == 2 * 30 * 3 * 64 * 4
    one = memory.plan([smol, drafter], 4, 1, 4149, free=2**34)
    assert one.bytes == int(4224 * (2 * 54 * 3 * 64 * 4) * memory.MARGIN)  # 4149 tokens in whole 128-blocks
    assert memory.plan([smol, drafter], 4, 6, 4149, free=2**34).bytes == pytest.approx(6 * one.bytes, rel=1e-6)
    weights = memory.weight_bytes(smol, 4) + memory.weight_bytes(drafter, 4)
    auto = memory.plan([smol, drafter], 4, "auto", 4149, free=2**34)
    left = 2**34 - weights  # what the weights leave of the free memory
    assert auto.rows == min(memory.AUTO_ROWS, int(left * memory.AUTO_SHARE // one.bytes)) and auto.bytes <= left / 2
    with pytest.raises(ModelLoadError, match=r"GiB of weights and a KV cache of .* 64 row\(s\) × 4149 tokens"):
        memory.plan([smol, drafter], 4, 64, 4149, free=2**30)


def test_the_vllm_plan_counts_the_weights_and_shares_both_over_tensor_parallel_gpus():
    """A 7B-sized verifier's weights (13.5 GB in bfloat16) do not fit a 12 GiB GPU with any cache; over two
    GPUs each holds half the weights and half the cache, which vLLM is given per device."""
    from transformers import LlamaConfig

    from cactus_bench.backends.vllm import memory
    from cactus_bench.core.decode.api import ModelLoadError

    big = LlamaConfig(num_hidden_layers=32, num_attention_heads=32, hidden_size=4096, intermediate_size=11008)
    assert memory.weight_bytes(big, 2) == pytest.approx(2 * 6.74e9, rel=0.01)  # Llama-2-7B: 6.74B parameters
    with pytest.raises(ModelLoadError, match="GiB of weights"):
        memory.plan([big], 2, 1, 4096, free=12 * 2**30)
    two = memory.plan([big], 2, 1, 4096, free=12 * 2**30, devices=2)
    assert two.devices == 2 and two.per_device == two.bytes // 2 and "on each of 2 GPUs" in two.describe()


class _StreamingEngine:
    """vLLM's LLMEngine as the decoder drives it: `add_request`, and `step` giving each request in flight one
    new token a step (DELTA outputs) until its `max_tokens`; it notes how many requests were in flight at each
    step and which were aborted."""

    def __init__(self, clock):
        self.clock, self.live, self.in_flight, self.aborted = clock, {}, [], []

    def add_request(self, tag, prompt, params):
        self.live[tag] = [params.max_tokens, 0, prompt["prompt_token_ids"][0]]

    def step(self):
        from types import SimpleNamespace as NS

        self.in_flight.append(len(self.live))
        self.clock.now += 1.0
        outs = []
        for tag, state in list(self.live.items()):
            state[1] += 1
            done = state[1] == state[0]
            completion = NS(token_ids=[100 * state[2] + state[1]], finish_reason="length" if done else None)
            outs.append(NS(request_id=tag, outputs=[completion], finished=done))
            if done:
                del self.live[tag]
        return outs

    def abort_request(self, tags):
        self.aborted += tags
        for t in tags:
            self.live.pop(t)


def _streaming_decoder(monkeypatch, batch_size, clock):
    from types import SimpleNamespace as NS

    from cactus_bench.backends.vllm import decoder as vdecoder

    monkeypatch.setattr(vdecoder.time, "perf_counter", clock)
    monkeypatch.setattr(vdecoder, "reply_text", lambda tokenizer, out: "")
    d = vdecoder.VLLMDecoder.__new__(vdecoder.VLLMDecoder)
    d.spec = NS(batch_size=batch_size, method=NS(uses_drafter=False))
    d.llm = NS(llm_engine=_StreamingEngine(clock))
    d.eos, d.tokenizer = {2}, None
    d._params = lambda req, tag: NS(max_tokens=req.max_new_tokens)
    return d


def test_vllm_keeps_batch_size_requests_in_flight_and_times_each_from_its_admission(monkeypatch):
    """A finished request's slot takes the next one at once (as the transformers engine's rows do), each reply
    is yielded as it finishes with its wall time from its admission, and its first token's time is the step
    that streamed it: request c, admitted when a (2 tokens) finished at t = 2, streams at 3 and ends at 5."""
    from cactus_bench.core.decode import Request

    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    clock = Clock()
    d = _streaming_decoder(monkeypatch, 2, clock)
    requests = [
        Request((1,), "a", max_new_tokens=2),
        Request((2,), "b", max_new_tokens=4),
        Request((3,), "c", max_new_tokens=3),
    ]
    got = [(g.request.key, g.output.tokens, g.output.wall_time, g.output.chunk_times) for g in d.generate(requests)]
    a, b, c = [1.0, 2.0], [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0]  # one token a step, from each one's admission
    assert got == [("a", [101, 102], 2.0, a), ("b", [201, 202, 203, 204], 4.0, b), ("c", [301, 302, 303], 3.0, c)]
    assert d.llm.llm_engine.in_flight == [2, 2, 2, 2, 1]  # c took a's slot at once; never more than 2

    stopped = _streaming_decoder(monkeypatch, 2, clock)
    stream = stopped.generate(requests)
    next(stream)
    stream.close()  # a consumer that stops early leaves nothing in the engine for the next generate
    assert sorted(stopped.llm.llm_engine.aborted) and not stopped.llm.llm_engine.live


def test_engines_are_reused_for_fewer_rows_and_kept_per_setting(monkeypatch):
    """A serving sweep's cells share an engine per draft length (one started for the most rows serves fewer, as
    the decoder keeps at most its batch size in flight); past KEPT_ENGINES the least recently used goes."""
    from types import SimpleNamespace as NS

    from cactus_bench.backends.vllm import decoder as vdecoder

    started = []

    class LLM:
        def __init__(self, **options):
            started.append((options["speculative_config"]["num_speculative_tokens"], options["max_num_seqs"]))

        def collective_rpc(self, fn):
            return ["hooked"]

    monkeypatch.setitem(__import__("sys").modules, "vllm", NS(LLM=LLM))
    monkeypatch.setattr(vdecoder, "_ENGINES", {})
    monkeypatch.setattr(vdecoder, "kv_cache", lambda *a: NS(per_device=2**20, describe=lambda: "1 MiB"))
    models = NS(verifier="v", revision=None, verifier_dtype=None, dtype="float32", device="cpu", tensor_parallel_size=1)

    def spec(m, rows):
        return NS(settings={}, engine="eager", method=NS(m=m), seed=0, batch_size=rows, max_new_tokens=8)

    for m, rows in [(2, 16), (2, 4), (2, 1), (4, 16), (2, 8), (4, 1), (2, 32)]:
        vdecoder.engine(models, spec(m, rows), "d")
    assert started == [(2, 16), (4, 16), (2, 32)]
    for m in (6, 8, 10, 12):
        vdecoder.engine(models, spec(m, 1), "d")
    assert len(vdecoder._ENGINES) == vdecoder.KEPT_ENGINES and [k[4] for k in vdecoder._ENGINES] == [6, 8, 10, 12]


BINDING_BUDGET = ("approximate", {"max_regret": 3.0, "budget": 1})


@pytest.mark.parametrize(
    "name,params", [*CONFIGS, BINDING_BUDGET], ids=[f"{n}{p}" for n, p in [*CONFIGS, BINDING_BUDGET]]
)
def test_the_plugin_decides_vllms_flat_drafts_as_the_rule_decides_its_rounds(name, params):
    """vLLM hands the acceptance step every request's drafts end to end ([N] tokens, ragged); the plugin's
    accept tests, regridded per request, are `Rule.verify`'s on the same uniforms, for every rule (approximate
    SD's budget included: its test reads the round's earlier positions in order)."""
    import torch

    from cactus_bench.backends.vllm.plugin import _Layout, accept_tests
    from cactus_bench.core.rules import build_rule

    rule = build_rule(name, **params)
    if rule.needs_raw:
        pytest.skip("a rule that reads raw logits is refused on vLLM")
    g = torch.Generator().manual_seed(4)
    counts, M, V = [3, 0, 2, 3, 1] * 8, 3, 6
    B, t = len(counts), {"dtype": torch.float64}
    p = torch.softmax(2.5 * torch.randn(B, M, V, generator=g, **t), -1)
    q = torch.softmax(2.5 * torch.randn(B, M + 1, V, generator=g, **t), -1)
    drafts = torch.multinomial(p.view(-1, V), 1, generator=g).view(B, M)
    u = torch.rand(B, M + 1, generator=g, **t)
    want = rule.verify(p, q, drafts, uniforms=u, n_drafts=torch.tensor(counts)).passed

    rows = [(b, j) for b in range(B) for j in range(counts[b])]  # vLLM's flat order
    flat = lambda x: torch.stack([x[b, j] for b, j in rows])  # noqa: E731
    layout = _Layout(counts, M, len(rows), torch.device("cpu"))
    n = flat(drafts)
    got = accept_tests(rule, layout, flat(u), flat(p), flat(q[:, :M]), n, rule.prepare(flat(p), flat(q[:, :M]), n))
    assert torch.equal(got, want)
    if (name, params) == BINDING_BUDGET:  # control: a test blind to the round's order decides otherwise
        blind = layout.per_request(flat(u) < rule.accept_prob(flat(p), flat(q[:, :M]), n)) & layout.valid
        assert not torch.equal(blind, want)
