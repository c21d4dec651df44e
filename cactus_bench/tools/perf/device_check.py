"""Device check: how fast the decode engine is on this machine, and what limits it.

Needs only torch, transformers and this package's core (the GPU box has nothing else). Builds random
models with the real shapes of Qwen3-0.6B (drafter) and Qwen3-8B (verifier) in bf16 on CUDA, or, with
small=true, small shapes in fp32 on whatever device there is (the CPU dry run), and measures, saving both
files after every section (a crash or the device's time limit keeps what was measured):

  1. smoke: the small shapes on this device, eager vs the fast engine, tokens equal in fp32 (a fault of the
     CUDA-graph class shows here within a minute, before any full-shape compile);
  2. the verifier alone, eager engine: ms/token and the bandwidth it reaches (weights + live KV bucket);
  3. a speculative round (Cactus, m = 10, an EOS id set, so the round's real EOS handling is in it), eager:
     round ms (no synchronisation inside it), time inside forwards (a separate, synchronised decode), host
     reads per round, bytes read per drafter and verifier step;
  4-5. the same with the fast engine (compiled forwards, CUDA graphs), compile time apart (the engine's
     warm-up); then the cost model: the speedup predicted at the paper's accepted lengths;
  6. hidden syncs: one fast decode under torch.cuda.set_sync_debug_mode("warn"), its warnings counted;
  7. a long context (~3,500 tokens): the verifier alone and a round, fast engine;
  8. eager vs fast agreement: one step's logits in the run's dtype (bf16 logits differ by rounding, so a
     tolerance), and tokens in fp32 on small shapes (where they must be equal);
  9. batched decoding: tokens/s at B = 1 and 4, fast engine;
  10. the rule kernels at V = 151,936;
  11. a small serving sweep (`tools/perf/serving.py`): the verifier alone, SpS and Cactus at B = 1 and 4,
     2·B requests at once: tokens/s, TTFT/TPOT P50/P90/P99, the speedup at each batch size.
Each section is guarded: one that fails saves its traceback and the check goes on. A section that would
run past the time budget is skipped with the reason saved; its estimate counts the graphs it must compile
at the first compile's measured time.

    python scripts/device_check.py out=$OUT/h200          # on the lent GPU machine (files come back)
    python scripts/device_check.py small=true out=results/gpu/cpu_small
"""

from __future__ import annotations

import json
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch

from cactus_bench.core.cli import Command, Key
from cactus_bench.core.decode import Engine, EngineOptions, ForwardTimer, Job, Warper
from cactus_bench.core.decode.buckets import buckets_between, kv_bucket
from cactus_bench.core.decode.graphs import COMPILES
from cactus_bench.core.decode.memory import bytes_per_position, weight_bytes
from cactus_bench.core.rules import build_rule
from cactus_bench.core.utils import environment_info, write_text_atomic
from cactus_bench.tools.perf.device_report import PAPER_AL, markdown
from cactus_bench.tools.perf.launch import count_host_reads
from cactus_bench.tools.perf.results import median_time, sync
from cactus_bench.tools.perf.shapes import SHAPES, qwen3_of_shape

PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # bytes/s, HBM
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
            "failed": [],
        }
        self.compile_s = 60.0 if self.device.type == "cuda" else 20.0  # a graph's compile, until one is measured
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
            self.save("skipped", self.report["skipped"])  # the files say so at once, like a finished section
            return False
        return True

    def section(self, name: str, run: Callable[[], object], needs_s: float, graphs: int = 0) -> None:
        """Run one section if its estimate (seconds, plus `graphs` new compiled graphs at the measured compile
        time) fits the budget; save its result, or its traceback if it fails, and go on either way."""
        if not self.within_budget(name, needs_s + graphs * self.compile_s):
            return
        before = (COMPILES.graphs, COMPILES.seconds)
        try:
            value = run()
        except Exception:  # noqa: BLE001  (a section's failure is a result: saved, and the check goes on)
            value = {"error": traceback.format_exc(limit=8)}
            self.report["failed"].append(name)
        graphs_done = COMPILES.graphs - before[0]
        if graphs_done:
            self.compile_s = (COMPILES.seconds - before[1]) / graphs_done  # the estimate for later sections
        self.save(name, value)

    def graphs(self, rule: str | None, context: int, rows: int = 1) -> int:
        """Graphs a fast decode at `context` compiles: forward widths x the key buckets it passes through."""
        widths = 3 if rule else 1
        end = context + self.args.new_tokens + self.args.m + 2
        return widths * len(buckets_between(context, kv_bucket(end)))

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

    def prompt_of(self, context: int | None) -> list[int]:
        n = context or self.args.context
        return (self.prompt * (n // len(self.prompt) + 1))[:n]

    def decode(self, engine: Engine, n: int, tokens: int, seed: int = 0, prompt: list[int] | None = None) -> list:
        jobs = [Job(prompt or self.prompt, tokens, torch.Generator().manual_seed(seed + i)) for i in range(n)]
        return [out for _, out in engine.run(jobs)]

    def smoke(self) -> dict:
        """The small shapes on this device, eager vs fast (fp32: tokens must be equal), before any full-shape
        compile: the class of fault that only CUDA graphs show (outputs overwritten by the next replay)."""
        small = [
            qwen3_of_shape(n, i, torch.float32, self.device) for i, n in enumerate(("small-drafter", "small-verifier"))
        ]
        tokens = {}
        for name, compile in (("eager", None), ("fast", "inductor")):
            for rule in ("cactus", None):
                e = Engine(
                    small[1],
                    small[0] if rule else None,
                    build_rule(rule) if rule else None,
                    4 if rule else 0,
                    WARP,
                    options=EngineOptions(1, compile),
                )
                g = torch.Generator().manual_seed(3)
                tokens[(name, rule)] = [out.tokens for _, out in e.run([Job(list(range(5, 40)), 48, g)])]
        return {
            "speculative_tokens_equal": tokens[("eager", "cactus")] == tokens[("fast", "cactus")],
            "verifier_alone_tokens_equal": tokens[("eager", None)] == tokens[("fast", None)],
        }

    def hidden_syncs(self) -> dict:
        """One fast decode with CUDA's sync debug mode on: every synchronising call warns. One host read per
        round is expected (the verdict); more means a hidden sync."""
        if self.device.type != "cuda":
            return {"skipped": "no CUDA device (torch.cuda.set_sync_debug_mode needs one)"}
        engine = self.engine("cactus", "inductor")
        self.decode(engine, 1, 2 * self.args.m)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                (out,) = self.decode(engine, 1, self.args.new_tokens, seed=2)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [str(w.message)[:160] for w in caught if "synchroniz" in str(w.message).lower()]
        return {
            "rounds": out.verifier_calls,
            "syncs": len(syncs),
            "per_round": len(syncs) / out.verifier_calls,
            "first": syncs[:5],
        }

    def ar(self, compile, context: int | None = None) -> dict:
        engine = self.engine(None, compile)
        prompt = self.prompt_of(context)
        start = time.perf_counter()
        self.decode(engine, 1, 8, prompt=prompt)  # warm-up (the engine compiles every graph first)
        warm = time.perf_counter() - start
        (out,) = self.decode(engine, 1, self.args.new_tokens, prompt=prompt)
        ms = 1e3 * (out.wall_time - out.prefill_time) / len(out.tokens)
        live = kv_bucket(len(prompt) + len(out.tokens))
        moved = weight_bytes(self.verifier) + live * bytes_per_position(self.verifier)
        peak = next((v for k, v in PEAK_BANDWIDTH.items() if k in self.report["device"]), None)
        gbps = moved / (ms / 1e3) / 1e9
        return {
            "ms_per_token": ms,
            "bandwidth_GBps": gbps,
            "pct_of_peak": 100 * gbps * 1e9 / peak if peak else None,
            "warmup_s": warm,
            "weights_GB": weight_bytes(self.verifier) / 1e9,
            "context": len(prompt),
            "tokens": out.tokens,
        }

    def rounds(self, compile, context: int | None = None) -> dict:
        """Round time from a decode with no synchronisation inside it; time inside forwards from a second,
        synchronised decode of the same item (a per-forward sync would inflate the round's own time)."""
        prompt = self.prompt_of(context)
        engine = self.engine("cactus", compile)
        self.decode(engine, 1, 2 * self.args.m, prompt=prompt)  # warm-up (the engine compiles every graph first)
        reads = Counter()
        with count_host_reads(reads):
            (out,) = self.decode(engine, 1, self.args.new_tokens, seed=1, prompt=prompt)
        timer = ForwardTimer(sync=True)
        timed = self.engine("cactus", compile, timer=timer)
        (synced,) = self.decode(timed, 1, self.args.new_tokens, seed=1, prompt=prompt)
        decode_s = out.wall_time - out.prefill_time
        synced_s = synced.wall_time - synced.prefill_time
        m, ctx = self.args.m, len(prompt)
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
            "context": ctx,
            "rounds": out.verifier_calls,
            "round_ms": 1e3 * decode_s / out.verifier_calls,
            "forward_ms": 1e3 * timer.seconds / synced.verifier_calls,
            "outside_forwards_pct": 100 * (1 - timer.seconds / synced_s),
            "host_reads_per_round": sum(reads.values()) / out.verifier_calls,
            "accepted_length": out.accepted_length,
            "tokens_per_s": len(out.tokens) / out.wall_time,
            "bytes_per_step": step_bytes,
            "tokens": out.tokens,
        }

    def agreement(self) -> dict:
        """One verifier step eager vs compiled (this dtype); tokens eager vs fast in fp32 (small shapes)."""
        from cactus_bench.core.decode.cache import ModelRunner

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
        compiled_one = "error" not in self.report.get("round_fast", {"error": 1})  # B = 1's graphs exist
        for rows in self.args.batches:
            graphs = self.graphs("sps", self.args.context) if compile and (rows > 1 or not compiled_one) else 0
            if not self.within_budget(f"batched B={rows}", 15 + graphs * self.compile_s):
                break
            engine = self.engine("sps", compile, rows)
            self.decode(engine, rows, 8)  # warm-up (compiles this batch size's shapes)
            start = time.perf_counter()
            outs = self.decode(engine, 2 * rows, self.args.new_tokens, seed=7)
            sync(self.device)
            out[rows] = {"tokens_per_s": sum(len(o.tokens) for o in outs) / (time.perf_counter() - start)}
        return out

    def serving(self, compile) -> dict:
        """A small serving sweep (`serving.engine_sweep`) of this device's engines."""
        from cactus_bench.tools.perf import serving

        a, engine = self.args, "fast" if compile else "eager"
        return serving.engine_sweep(
            lambda rule, rows: self.engine(rule, compile, rows), a.batches, a.m, a.new_tokens, self.prompt, engine,
            self.log,
        )  # fmt: skip

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
            if not ar or not rd or "error" in ar or "error" in rd:
                continue
            out[engine] = {name: (al + 1) * ar["ms_per_token"] / rd["round_ms"] for name, al in PAPER_AL.items()}
        return out

    def run(self) -> None:
        a, fast = self.args, not self.args.no_compile
        self.log(f"building {self.names[0]} + {self.names[1]} on {self.report['device']} ({self.dtype})")
        self.drafter = qwen3_of_shape(self.names[0], 0, self.dtype, self.device)
        self.verifier = qwen3_of_shape(self.names[1], 1, self.dtype, self.device)
        self.save("built_s", time.perf_counter() - self.t0)
        long = a.long_context
        if fast:
            self.section("smoke", self.smoke, 20, graphs=4)
        self.section("ar_eager", lambda: self.ar(None), 20)
        self.section("round_eager", lambda: self.rounds(None), 30)
        if fast:
            self.section("ar_fast", lambda: self.ar("inductor"), 20, graphs=self.graphs(None, a.context))
            self.section("round_fast", lambda: self.rounds("inductor"), 30, graphs=self.graphs("cactus", a.context))
        self.save("cost_model", self.cost_model())  # right after the rounds: the figure the check is for
        if fast:
            self.section("hidden_syncs", self.hidden_syncs, 20)
            if long:
                self.section("ar_fast_long", lambda: self.ar("inductor", long), 30, graphs=self.graphs(None, long))
                self.section(
                    "round_fast_long", lambda: self.rounds("inductor", long), 40, graphs=self.graphs("cactus", long)
                )
            self.section("agreement", self.agreement, 20, graphs=2)
        else:
            self.report["skipped"].append("fast engine (no_compile=true)")
        compiled_one = "error" not in self.report.get("round_fast", {"error": 1})
        batched_graphs = (
            sum(self.graphs("sps", a.context) for rows in a.batches if rows > 1 or not compiled_one) if fast else 0
        )
        self.section("batched", lambda: self.batched("inductor" if fast else None), 30, graphs=batched_graphs)
        self.section("rules_ms", self.rules, 20)
        # the verifier alone's graphs at each batch size above 1 (SpS's and Cactus's are the batched section's)
        serving_graphs = sum(self.graphs(None, a.context) for rows in a.batches if rows > 1) if fast else 0
        self.section("serving", lambda: self.serving("inductor" if fast else None), 60, graphs=serving_graphs)
        print(markdown(self.report))


def main(argv=None):
    args = Command(
        prog="python -m cactus_bench.tools.perf.device_check",
        about=__doc__,
        keys=(
            Key("small", "small fp32 shapes (a CPU dry run)", False, bool),
            Key("out", "result files' path without suffix (.md, .json)", "results/gpu/device_check"),
            Key("context", "prompt tokens of the main sections", 400, int),
            Key("new_tokens", "tokens per decode", 96, int),
            Key("m", "draft length", 10, int),
            Key("batches", "batch sizes of the batched section, comma-separated", [1, 4], list, item=int),
            Key("long_context", "the long-context sections' prompt (0: none)", 3500, int),
            Key("budget_s", "skip sections that would run past this (default 450; small: 240)", None, float),
            Key("no_compile", "skip the fast engine", False, bool),
        ),
    ).parse(argv)
    if args.budget_s is None:
        args.budget_s = 240 if args.small else 450  # a CPU compiles slowly: the dry run in a test's time
    if args.small:
        args.context, args.new_tokens = min(args.context, 128), min(args.new_tokens, 48)
        args.long_context = min(args.long_context, 400)
    Check(args).run()


if __name__ == "__main__":
    main()
