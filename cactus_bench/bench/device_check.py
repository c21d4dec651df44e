"""Device check: how fast the decode engine is on this machine, and what limits it.

Needs only torch, transformers and this package's core (the GPU box has nothing else). Builds random
models with the real shapes of Qwen3-0.6B (drafter) and Qwen3-8B (verifier) in bf16 on CUDA, or, with
--small, small shapes in fp32 on whatever device there is (the CPU dry run), and measures, saving both
files after every section (a crash or the device's time limit keeps what was measured):

  1. the verifier alone, eager engine: ms/token and the bandwidth it reaches (weights + live KV bucket);
  2. a speculative round (Cactus, m = 10, an EOS id set, so the round's real EOS handling is in it), eager:
     round ms, time inside forwards, host reads per round, bytes read per drafter and verifier step;
  3-4. the same with the fast engine (compiled forwards, CUDA graphs), compile time apart;
  5. eager vs fast agreement: one step's logits in the run's dtype (bf16 logits differ by rounding, so a
     tolerance), and tokens in fp32 on small shapes (where they must be equal);
  6. batched decoding: tokens/s at B = 1, 4, 16, fast engine;
  7. the rule kernels at V = 151,936;
  8. the speedup a cost model predicts from these measurements at the paper's accepted lengths.
Sections past the time budget are skipped, and say so.

    python scripts/device_check.py --out $OUT/h200          # on the lent GPU machine (files come back)
    python scripts/device_check.py --small --out results/gpu/cpu_small
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch

from ..decode import Engine, EngineOptions, ForwardTimer, Job, Warper
from ..decode.cache import bytes_per_position, kv_bucket, weight_bytes
from ..rules import build_rule
from ..utils import environment_info, write_text_atomic
from .launch import count_host_reads
from .models import SHAPES, qwen3_of_shape
from .timing import median_time, sync

PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # bytes/s, HBM
PAPER_AL = {"SpS (GSM8K, m=20 → m=10)": 3.5, "Cactus δ=1": 5.0, "AL=2": 2.0, "AL=4": 4.0, "AL=6": 6.0}
WARP = Warper(0.6, 20, 0.95)
EOS = 151_645  # Qwen3's <|im_end|> (any id in the vocabulary: random weights make it rare but possible)


class Check:
    def __init__(self, args):
        self.args = args
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = torch.float32 if args.small else torch.bfloat16
        self.names = ("small-drafter", "small-verifier") if args.small else ("qwen3-0.6b", "qwen3-8b")
        self.vocab = SHAPES[self.names[1]]["vocab_size"]
        self.t0 = time.perf_counter()
        self.out = Path(args.out)
        self.report = {
            "device": torch.cuda.get_device_name(0) if self.device.type == "cuda" else "cpu",
            "dtype": str(self.dtype),
            "drafter": self.names[0],
            "verifier": self.names[1],
            "context": args.context,
            "m": args.m,
            "env": environment_info(),
            "skipped": [],
        }
        g = torch.Generator().manual_seed(0)
        self.prompt = torch.randint(0, self.vocab, (args.context,), generator=g).tolist()

    def log(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.t0:.0f}s] {text}", flush=True)

    def save(self, section: str, value) -> None:
        self.report[section] = value
        self.report["seconds"] = time.perf_counter() - self.t0
        write_text_atomic(self.out.with_suffix(".json"), json.dumps(self.report, indent=1, default=str))
        write_text_atomic(self.out.with_suffix(".md"), markdown(self.report))
        self.log(f"{section}: {json.dumps(value, default=str)[:400]}")

    def within_budget(self, section: str, needs_s: float) -> bool:
        left = self.args.budget_s - (time.perf_counter() - self.t0)
        if left < needs_s:
            self.report["skipped"].append(f"{section} (needs ~{needs_s:.0f}s, {left:.0f}s left)")
            self.log(f"skipping {section}: {left:.0f}s left")
            return False
        return True

    # --- the sections ------------------------------------------------------------------------------
    def engine(self, rule: str | None, compile, rows: int = 1, timer=None) -> Engine:
        drafter = self.drafter if rule else None
        return Engine(
            self.verifier,
            drafter,
            build_rule(rule) if rule else None,
            self.args.m if rule else 0,
            WARP,
            self.vocab,
            {EOS},
            EngineOptions(rows, compile, forward_timer=timer),
        )

    def decode(self, engine: Engine, n: int, tokens: int, seed: int = 0) -> list:
        jobs = [Job(self.prompt, tokens, torch.Generator().manual_seed(seed + i)) for i in range(n)]
        return [out for _, out in engine.run(jobs)]

    def ar(self, compile) -> dict:
        engine = self.engine(None, compile)
        start = time.perf_counter()
        self.decode(engine, 1, 8)  # warm-up (compiles)
        warm = time.perf_counter() - start
        (out,) = self.decode(engine, 1, self.args.new_tokens)
        ms = 1e3 * (out.wall_time - out.prefill_time) / len(out.tokens)
        live = kv_bucket(self.args.context + len(out.tokens))
        moved = weight_bytes(self.verifier) + live * bytes_per_position(self.verifier)
        peak = next((v for k, v in PEAK_BANDWIDTH.items() if k in self.report["device"]), None)
        gbps = moved / (ms / 1e3) / 1e9
        return {
            "ms_per_token": ms,
            "bandwidth_GBps": gbps,
            "pct_of_peak": 100 * gbps * 1e9 / peak if peak else None,
            "warmup_s": warm,
            "weights_GB": weight_bytes(self.verifier) / 1e9,
            "tokens": out.tokens,
        }

    def rounds(self, compile) -> dict:
        self.decode(self.engine("cactus", compile), 1, 2 * self.args.m)  # warm-up (compiles)
        timer = ForwardTimer(sync=True)
        engine = self.engine("cactus", compile, timer=timer)
        reads = Counter()
        with count_host_reads(reads):
            (out,) = self.decode(engine, 1, self.args.new_tokens, seed=1)
        decode_s = out.wall_time - out.prefill_time
        m, ctx = self.args.m, self.args.context
        live = kv_bucket(ctx + len(out.tokens) + m + 1)
        whole = kv_bucket(ctx + self.args.new_tokens + m + 1)
        step_bytes = {
            name: {
                "live_bucket_GB": (weight_bytes(model) + live * bytes_per_position(model)) / 1e9,
                "weights_GB": weight_bytes(model) / 1e9,
                "kv_live_GB": live * bytes_per_position(model) / 1e9,
                "kv_if_whole_budget_GB": whole * bytes_per_position(model) / 1e9,
            }
            for name, model in (("drafter", self.drafter), ("verifier", self.verifier))
        }
        return {
            "rounds": out.verifier_calls,
            "round_ms": 1e3 * decode_s / out.verifier_calls,
            "forward_ms": 1e3 * timer.seconds / out.verifier_calls,
            "outside_forwards_pct": 100 * (1 - timer.seconds / decode_s),
            "host_reads_per_round": sum(reads.values()) / out.verifier_calls,
            "accepted_length": out.accepted_length,
            "tokens_per_s": len(out.tokens) / out.wall_time,
            "bytes_per_step": step_bytes,
            "tokens": out.tokens,
        }

    def agreement(self) -> dict:
        """One verifier step eager vs compiled (this dtype); tokens eager vs fast in fp32 (small shapes)."""
        from ..decode.cache import ModelRunner

        ids = torch.tensor([self.prompt[-self.args.m - 1 :]], device=self.device)
        logits = {}
        for name, compile in (("eager", None), ("fast", "inductor")):
            runner = ModelRunner(self.verifier, 1, kv_bucket(self.args.context + 64), compile)
            with torch.inference_mode():  # the engine's caches are inference tensors
                runner.prefill([0], [self.prompt[: -self.args.m - 1]])
                runner.set_positions([self.args.context - self.args.m - 1])
                logits[name] = runner.forward(ids, self.args.context, self.args.m + 1, self.vocab, WARP, logits=True)[
                    0
                ].float()
        diff = float((logits["eager"] - logits["fast"]).abs().max())
        scale = float(logits["eager"].abs().max())
        small = [
            qwen3_of_shape(n, i, torch.float32, self.device) for i, n in enumerate(("small-drafter", "small-verifier"))
        ]
        tokens = {}
        for name, compile in (("eager", None), ("fast", "inductor")):
            e = Engine(small[1], small[0], build_rule("cactus"), 4, WARP, options=EngineOptions(1, compile))
            g = torch.Generator().manual_seed(3)
            tokens[name] = [out.tokens for _, out in e.run([Job(list(range(5, 40)), 48, g)])]
        return {
            "logits_max_abs_diff": diff,
            "logits_max_abs": scale,
            "logits_agree": diff <= 2e-2 * scale,
            "fp32_tokens_equal": tokens["eager"] == tokens["fast"],
        }

    def batched(self, compile) -> dict:
        out = {}
        for rows in self.args.batches:
            if not self.within_budget(f"batched B={rows}", 45):
                break
            engine = self.engine("sps", compile, rows)
            self.decode(engine, rows, 8)  # warm-up (compiles this batch size's shapes)
            start = time.perf_counter()
            outs = self.decode(engine, 2 * rows, self.args.new_tokens, seed=7)
            sync(self.device)
            out[rows] = {"tokens_per_s": sum(len(o.tokens) for o in outs) / (time.perf_counter() - start)}
        return out

    def rules(self) -> dict:
        V, m = 151_936, self.args.m
        g = torch.Generator(self.device).manual_seed(0)
        p = torch.softmax(torch.randn(1, m, V, device=self.device, generator=g), -1)
        q = torch.softmax(torch.randn(1, m + 1, V, device=self.device, generator=g), -1)
        d = torch.multinomial(p[0], 1, generator=g).T
        u = torch.rand(1, m + 1, device=self.device, generator=g, dtype=torch.float64)
        row = {"softmax": 1e3 * median_time(lambda: torch.softmax(q, -1), self.device)}
        for name in ("sps", "cactus", "tas", "topk"):
            rule = build_rule(name)
            row[name] = 1e3 * median_time(
                lambda: rule.verify(p, q, d, uniforms=u, check=False, return_kl=True), self.device
            )
        return row

    def cost_model(self) -> dict:
        """Speedup = (AL + 1) · t_token(verifier alone) / t_round, with the round's time from its measured
        parts (m drafter steps, one verify, the loop's own share) scaled to each AL."""
        out = {}
        for engine in ("eager", "fast"):
            ar, rd = self.report.get(f"ar_{engine}"), self.report.get(f"round_{engine}")
            if not ar or not rd:
                continue
            out[engine] = {name: (al + 1) * ar["ms_per_token"] / rd["round_ms"] for name, al in PAPER_AL.items()}
        return out

    def run(self) -> None:
        a = self.args
        self.log(f"building {self.names[0]} + {self.names[1]} on {self.report['device']} ({self.dtype})")
        self.drafter = qwen3_of_shape(self.names[0], 0, self.dtype, self.device)
        self.verifier = qwen3_of_shape(self.names[1], 1, self.dtype, self.device)
        self.save("built_s", time.perf_counter() - self.t0)
        self.save("ar_eager", self.ar(None))
        self.save("round_eager", self.rounds(None))
        if a.no_compile:
            self.report["skipped"].append("fast engine (--no-compile)")
        else:
            if self.within_budget("fast engine", 120):
                self.save("ar_fast", self.ar("inductor"))
            if self.within_budget("fast rounds", 120):
                self.save("round_fast", self.rounds("inductor"))
            if self.within_budget("agreement", 90):
                self.save("agreement", self.agreement())
        if self.within_budget("batched", 60):
            self.save("batched", self.batched(None if a.no_compile else "inductor"))
        if self.within_budget("rules", 20):
            self.save("rules_ms", self.rules())
        self.save("cost_model", self.cost_model())
        print(markdown(self.report))


def markdown(r: dict) -> str:
    """The report as Markdown; sections not measured (yet, or skipped) are left out."""
    lines = [
        f"# Device check: {r['drafter']} + {r['verifier']} on {r['device']} ({r['dtype']}), context {r['context']}"
    ]
    ars = [(e, r[f"ar_{e}"]) for e in ("eager", "fast") if f"ar_{e}" in r]
    if ars:
        lines += ["", "| verifier alone | ms/token | GB/s | % of peak | warm-up s |", "|---|---|---|---|---|"]
        for e, a in ars:
            pct = f"{a['pct_of_peak']:.0f}%" if a.get("pct_of_peak") else "–"
            lines.append(f"| {e} | {a['ms_per_token']:.2f} | {a['bandwidth_GBps']:.0f} | {pct} | {a['warmup_s']:.0f} |")
    rds = [(e, r[f"round_{e}"]) for e in ("eager", "fast") if f"round_{e}" in r]
    if rds:
        lines += [
            "",
            f"| round (Cactus, m={r['m']}, EOS set) | round ms | in forwards ms | outside | host reads/round | AL "
            "| tok/s |",
            "|---|---|---|---|---|---|---|",
        ]
        for e, x in rds:
            lines.append(
                f"| {e} | {x['round_ms']:.2f} | {x['forward_ms']:.2f} | {x['outside_forwards_pct']:.1f}% | "
                f"{x['host_reads_per_round']:.2f} | {x['accepted_length']:.2f} | {x['tokens_per_s']:.1f} |"
            )
        b = rds[0][1]["bytes_per_step"]
        lines += [
            "",
            "| bytes read per step (GB) | weights | KV, live bucket | KV, if the whole budget |",
            "|---|---|---|---|",
        ]
        for name, x in b.items():
            lines.append(
                f"| {name} | {x['weights_GB']:.3f} | {x['kv_live_GB']:.3f} | {x['kv_if_whole_budget_GB']:.3f} |"
            )
    if "agreement" in r:
        a = r["agreement"]
        lines += [
            "",
            f"eager vs fast: one verify step's logits differ by at most {a['logits_max_abs_diff']:.3g} (largest logit "
            f"{a['logits_max_abs']:.3g}: {'within' if a['logits_agree'] else 'OUTSIDE'} 2 %); fp32 tokens equal: "
            f"{a['fp32_tokens_equal']}",
        ]
    if r.get("batched"):
        lines += ["", "| batch size | tokens/s (SpS) |", "|---|---|"]
        lines += [f"| {rows} | {x['tokens_per_s']:.0f} |" for rows, x in r["batched"].items()]
    if "rules_ms" in r:
        names = list(r["rules_ms"])
        lines += [
            "",
            f"| rule kernel ms, V=151,936, m={r['m']} | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        lines.append("| | " + " | ".join(f"{v:.3f}" for v in r["rules_ms"].values()) + " |")
    if r.get("cost_model"):
        names = list(PAPER_AL)
        lines += [
            "",
            "Predicted speedup over the verifier alone (measured parts):",
            "",
            "| engine | " + " | ".join(names) + " |",
        ]
        lines.append("|---|" + "---|" * len(names))
        for e, by in r["cost_model"].items():
            lines.append(f"| {e} | " + " | ".join(f"{by[n]:.2f}×" for n in names) + " |")
    if r.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(r["skipped"])]
    pk = r["env"]["packages"]
    lines.append(f"\n(took {r.get('seconds', 0):.0f}s; torch {pk.get('torch')}, transformers {pk.get('transformers')})")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true", help="small fp32 shapes (a CPU dry run)")
    ap.add_argument("--out", default="results/gpu/device_check")
    ap.add_argument("--context", type=int, default=400)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--m", type=int, default=10)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--budget-s", type=float, default=450, help="skip sections that would run past this")
    ap.add_argument("--no-compile", action="store_true", help="skip the fast engine")
    args = ap.parse_args(argv)
    if args.small:
        args.context, args.new_tokens = min(args.context, 128), min(args.new_tokens, 48)
    Check(args).run()


if __name__ == "__main__":
    main()
