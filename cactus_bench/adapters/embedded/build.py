"""Training the embedded `tiny` pair from its recipe (`recipes.SPEC`) and measuring its quality; run in a
process of its own with portable kernels (`train_pair.py`, started by `install.build_portably`), so the same
recipe gives the same bytes on every CPU of a class (`kernels.py`). `install.py` keeps the cache.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from cactus_bench.adapters.embedded import arith
from cactus_bench.adapters.embedded.install import format_quality
from cactus_bench.adapters.embedded.kernels import describe
from cactus_bench.adapters.embedded.recipes import SPEC, spec_hash
from cactus_bench.adapters.embedded.tokenizer import chat_text, train_tokenizer
from cactus_bench.adapters.embedded.train import LazyExamples, model_config, train
from cactus_bench.core.decode import speculative_generate
from cactus_bench.core.decode.warp import Warper
from cactus_bench.core.utils import write_text_atomic

ROLES = ("verifier", "drafter")
FINGERPRINT_STEPS = 25  # the weights' hash after this many steps is kept: a check of the build in seconds


class Progress:
    """The build's share done and its expected remaining time, logged every ~10 %. Work is counted in
    steps x layers x width (a step's cost on a CPU is about proportional), and the rate is measured."""

    def __init__(self, total_work: float, log: Callable[[str], None]):
        self.total, self.done, self.log = total_work, 0.0, log
        self.start, self.next_report = time.perf_counter(), 0.1

    def step_fn(self, work_per_step: float) -> Callable[[], None]:
        def step():
            self.done += work_per_step
            share = self.done / self.total
            if share >= self.next_report:
                elapsed = time.perf_counter() - self.start
                left = elapsed * (1 - share) / share
                self.log(
                    f"  building the embedded pair: {share:.0%} done, {elapsed:.0f}s so far, about {left:.0f}s left"
                )
                self.next_report = share + 0.1

        return step


def prepare(spec: dict, log: Callable[[str], None] = print) -> tuple[PreTrainedTokenizerFast, dict, dict]:
    """The recipe's tokenizer, and per role its training examples (encoded as training draws them) and model
    config."""
    t0 = time.perf_counter()
    seed = spec["seed"]
    train_items = {
        role: arith.generate("train", arith.TRAIN_SIZE, seed, arith.Writer.from_dict(w))
        for role, w in spec["writers"].items()
    }
    texts = (chat_text(i.question, i.answer) for i in train_items["verifier"][:5000])
    tok = train_tokenizer(texts, spec["tokenizer_vocab"])
    eos, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.pad_token_id
    assert isinstance(eos, int)  # one token's id
    log(f"embedded pair: tokenizer ({len(tok)} tokens) ready ({time.perf_counter() - t0:.0f}s)")
    examples, configs = {}, {}
    for role in ROLES:
        s, items = spec[role], train_items[role]
        examples[role] = LazyExamples(
            tok, [chat_text(i.question) for i in items], [i.answer + "<|im_end|>" for i in items]
        )
        configs[role] = model_config(
            len(tok),
            s["hidden"],
            s["layers"],
            s["heads"],
            s["kv_heads"],
            s["intermediate"],
            eos,
            pad,
            spec["max_positions"],
        )
    return tok, examples, configs


def train_role(
    spec: dict, role: str, examples: list, config, log: Callable[[str], None] = print, **options
) -> PreTrainedModel:
    """One model of the pair, trained as the recipe says (`options`: `train`'s on_step, stop_after, ...)."""
    s = spec[role]
    return train(
        config,
        examples,
        steps=s["steps"],
        batch_size=s["batch"],
        lr=s["lr"],
        seed=spec["seed"] + (role == "drafter"),
        log=log,
        fingerprint_at=FINGERPRINT_STEPS,
        **options,
    )


def build(out: Path, spec: dict = SPEC, log: Callable[[str], None] = print) -> dict:
    """Train the tokenizer, verifier and drafter on `arith`, measure quality, write everything (the cache
    adds the manifest). Deterministic in one process; the same bytes on every CPU of a class when the process
    runs the portable kernels (`install.build_portably`)."""
    t0 = time.perf_counter()
    torch.manual_seed(spec["seed"])
    tok, examples, configs = prepare(spec, log)
    eos, pad = configs["verifier"].eos_token_id, tok.pad_token_id
    progress = Progress(sum(spec[r]["steps"] * spec[r]["layers"] * spec[r]["hidden"] for r in ROLES), log)
    models: dict[str, PreTrainedModel] = {}
    for role in ROLES:
        s = spec[role]
        log(f"training the {role} ({s['layers']} layers x {s['hidden']} wide, {s['steps']} steps)")
        step = progress.step_fn(s["layers"] * s["hidden"])
        models[role] = train_role(spec, role, examples[role], configs[role], log, on_step=step)
        models[role].generation_config.eos_token_id = eos
        models[role].generation_config.pad_token_id = pad
        models[role].save_pretrained(out / role)
        tok.save_pretrained(out / role)
    quality = measure_quality(models["drafter"], models["verifier"], tok, spec)
    quality.update(
        build_seconds=round(time.perf_counter() - t0, 1),
        spec=spec,
        spec_hash=spec_hash(spec),
        kernels=describe(),
        fingerprints={role: {"steps": FINGERPRINT_STEPS, "sha256": m.fingerprint} for role, m in models.items()},
        params={r: sum(p.numel() for p in m.parameters()) for r, m in models.items()},
    )
    write_text_atomic(out / "quality.json", json.dumps(quality, indent=1))
    log("embedded pair quality: " + format_quality(quality))
    return quality


def critical_slip_probability(model, tok, items: list[arith.Item], warper: Warper) -> dict[str, dict]:
    """Per event (carry, borrow): the probability, after the sampling warpers, that `model` writes the
    slipped tens digit where the gold solution has the right one (teacher-forced on gold answers): its mean
    over the events, and its 10th and 90th percentiles (how evenly the model is unsure)."""
    found: dict[str, list[float]] = {}
    for item in items:
        for offset, event, _right, slip in arith.critical_digits(item):
            prefix = chat_text(item.question) + item.answer[:offset]
            ids = tok(prefix, add_special_tokens=False)["input_ids"]
            slipped = tok(prefix + slip, add_special_tokens=False)["input_ids"]
            assert slipped[: len(ids)] == ids, "the slipped digit must start a new token"
            with torch.no_grad():
                probs = warper(model(torch.tensor([ids])).logits[0, -1])
            found.setdefault(event, []).append(probs[slipped[len(ids)]].item())
    out = {}
    for event, values in sorted(found.items()):
        values.sort()
        out[event] = {
            "mean": round(sum(values) / len(values), 4),
            "p10": round(values[len(values) // 10], 4),
            "p90": round(values[(9 * len(values)) // 10], 4),
        }
    return out


def measure_quality(drafter, verifier, tok, spec: dict) -> dict:
    """Test accuracy of each model (strict match, sampled with the demo's warpers) and SpS acceptance."""
    e = spec["eval"]
    items = arith.generate("test", e["items"], spec["seed"])
    sampling = {"temperature": e["temperature"], "top_k": e["top_k"], "top_p": e["top_p"]}
    tok.padding_side = "left"
    enc = tok([chat_text(i.question) for i in items], return_tensors="pt", padding=True, add_special_tokens=False)
    acc = {}
    for role, model in (("verifier", verifier), ("drafter", drafter)):
        torch.manual_seed(spec["seed"])
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=e["max_new_tokens"],
                do_sample=True,
                **sampling,
                eos_token_id=model.generation_config.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        acc[role] = sum(arith.strict_match(t, i.gold) for t, i in zip(texts, items)) / len(items)
    slips = {
        role: critical_slip_probability(model, tok, items, Warper(**sampling))
        for role, model in (("verifier", verifier), ("drafter", drafter))
    }
    drafted = accepted = 0
    g = torch.Generator().manual_seed(spec["seed"])
    for item in items[: e["accept_prompts"]]:
        ids = tok(chat_text(item.question), add_special_tokens=False)["input_ids"]
        res = speculative_generate(
            drafter,
            verifier,
            ids,
            rule="sps",
            m=e["m"],
            max_new_tokens=e["max_new_tokens"],
            generator=g,
            eos_token_id=verifier.generation_config.eos_token_id,
            **sampling,
        )
        drafted += sum(res.rounds.drafted)
        accepted += sum(res.rounds.accepted)
    return {
        "verifier_accuracy": acc["verifier"],
        "drafter_accuracy": acc["drafter"],
        "sps_acceptance": accepted / max(drafted, 1),
        "slip_probability": slips,
        "eval_items": len(items),
        "m": e["m"],
        **sampling,
    }
