"""The vLLM tier's runs (`make test-vllm`, in `.venv-vllm`): engine=vllm through the app on the SmolLM2 pair
(verifier SmolLM2-135M-Instruct, drafter its first 24 layers), against the transformers backend: greedy
tokens, AL and score, paired timing, a drafter equal to the verifier. One torch thread."""

import json
import math
from pathlib import Path

import pytest

from .engines import HF_BASE, SELF

# one worker, one process: vLLM is imported and each engine started once for both files
pytestmark = [pytest.mark.vllm, pytest.mark.xdist_group("vllm-engines")]


def test_greedy_speculative_decoding_equals_vllms_greedy_verifier(runs):
    """At T = 0 every rule is exact-match acceptance: SpS with the lossy drafter emits the verifier's greedy
    tokens, item by item, through the app (engine=vllm)."""
    greedy = ("data=ifeval", "limit=4", "max_gen_toks=32", "sampling=greedy")
    _, alone = runs("method=ar", *greedy)
    summary, spec = runs("method=sps", *greedy)
    assert summary["acceptance_rate"] < 0.9  # the drafter disagrees: rejections happened
    assert [s["tokens"] for s in spec] == [s["tokens"] for s in alone]


def test_al_and_score_agree_between_backends(runs):
    """A small sampled Cactus run (8 IFEval prompts, 48 tokens): per-item accepted lengths on the two
    backends differ by less than 4 standard errors of their paired mean (AL is noisy at this size: a 95 %
    interval misses 0 one seed in twenty; a broken acceptance step moves AL by far more), the scores agree
    within their paired interval, and every sample carries the same statistics."""
    from cactus_bench.core import intervals

    short = ("data=ifeval", "limit=8", "max_gen_toks=48", "method=cactus", "delta=0.75")
    summary_v, vllm_samples = runs(*short)
    summary_h, hf_samples = runs(*short, base=HF_BASE)
    assert summary_v["run_key"] != summary_h["run_key"]  # two engines, two runs

    def mean_and_se(values):  # 8 items: fewer than an interval is given for (intervals.MIN_ITEMS)
        n = len(values)
        mean = sum(values) / n
        return mean, (sum((v - mean) ** 2 for v in values) / (n - 1) / n) ** 0.5

    al, se = mean_and_se(
        [
            (v["stats"]["accepted_length"] or 0) - (h["stats"]["accepted_length"] or 0)
            for v, h in zip(vllm_samples, hf_samples)
        ]
    )
    assert abs(al) < 4 * se, (al, se)
    score, se = mean_and_se([v["score"] - h["score"] for v, h in zip(vllm_samples, hf_samples)])
    assert abs(score) <= intervals.t95(len(vllm_samples) - 1) * se, (score, se)
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


def test_the_engines_kv_cache_is_what_the_run_needs(runs):
    """The engines a run started hold the KV cache `memory.plan` sized for their rows and longest sequence
    (both models' layers, float32 here), not vLLM's share of the machine."""
    from transformers import AutoConfig

    from cactus_bench.backends.vllm import decoder, memory

    runs("method=sps", "data=ifeval", "limit=2", "max_gen_toks=16", "batch_size=2", "engine.settings.kv_cache_gib=null")
    sized = [(llm, rows) for key, llm, rows in decoder._ENGINES.values() if key[6] is None]  # key[6]: kv_cache_gib
    assert sized
    for llm, rows in sized:
        vllm_config = llm.llm_engine.vllm_config
        models = [vllm_config.model_config.model]
        if vllm_config.speculative_config is not None:
            models.append(vllm_config.speculative_config.model)
        want = memory.sized(
            [AutoConfig.from_pretrained(m) for m in models], 4, rows, vllm_config.model_config.max_model_len
        )
        assert vllm_config.cache_config.kv_cache_memory_bytes == want.bytes < 2**31


def test_a_checkpoints_sampling_defaults_never_reach_a_request(runs, folder, tmp_path):
    """vLLM reads a checkpoint's generation_config.json sampling defaults into requests unless told not to
    (Qwen3's: T 0.6, top-k 20, top-p 0.95). The same weights under a generation config that sets other defaults,
    a repetition penalty and min-p included, decode the same sampled tokens through the app (engine=vllm) as
    without them, and their engine's default request is vLLM's neutral one."""
    from vllm import SamplingParams

    from cactus_bench.backends.vllm import decoder as vdecoder

    twin = tmp_path / "verifier"
    twin.mkdir()
    own = folder / "verifier" / "generation_config.json"
    for f in (folder / "verifier").iterdir():
        if f != own:
            (twin / f.name).symlink_to(f)
    defaults = {**(json.loads(own.read_text()) if own.is_file() else {}), "do_sample": True, "temperature": 0.6}
    defaults.update(top_k=20, top_p=0.95, repetition_penalty=1.5, min_p=0.2, frequency_penalty=0.5)
    (twin / "generation_config.json").write_text(json.dumps(defaults))

    sampled = ("data=ifeval", "limit=3", "max_gen_toks=24", "method=ar", "sampling=plain")
    _, plain = runs(*sampled)
    _, configured = runs(*sampled, f"pair.verifier={twin}")
    assert [s["tokens"] for s in configured] == [s["tokens"] for s in plain]
    engine = next(e for key, e, _ in vdecoder._ENGINES.values() if Path(key[0]).resolve() == twin.resolve())
    neutral, default = SamplingParams(), engine.get_default_sampling_params()
    for key in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "frequency_penalty"):
        assert getattr(default, key) == getattr(neutral, key), key
