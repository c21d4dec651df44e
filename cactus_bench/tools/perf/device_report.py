"""The device check's report as Markdown (`device_check.py` writes it beside its JSON after every section);
sections not measured (yet, or skipped) are left out, failed ones named."""

from __future__ import annotations

PAPER_AL = {"SpS (GSM8K, m=20 → m=10)": 3.5, "Cactus δ=1": 5.0, "AL=2": 2.0, "AL=4": 4.0, "AL=6": 6.0}  # cost model


def markdown(r: dict) -> str:
    """The report as Markdown; sections not measured (yet, or skipped) are left out."""
    lines = [
        f"# Device check: {r['drafter']} + {r['verifier']} on {r['device']} ({r['dtype']}), context {r['context']}"
    ]
    engines = {"eager": "eager", "fast": "fast", "fast_long": "fast"}

    def measured(kind: str) -> list:
        return [(e, r[f"{kind}_{k}"]) for k, e in engines.items() if "error" not in r.get(f"{kind}_{k}", {"error": 1})]

    if r.get("smoke"):
        lines += ["", f"smoke (small shapes on this device, eager vs fast, fp32): {_fields(r['smoke'])}"]
    ars = measured("ar")
    if ars:
        lines += [
            "",
            "| verifier alone | context | ms/token | GB/s | % of peak | warm-up s |",
            "|---|---|---|---|---|---|",
        ]
        for e, a in ars:
            pct = f"{a['pct_of_peak']:.0f}%" if a.get("pct_of_peak") else "–"
            lines.append(
                f"| {e} | {a.get('context', r['context'])} | {a['ms_per_token']:.2f} | {a['bandwidth_GBps']:.0f} "
                f"| {pct} | {a['warmup_s']:.0f} |"
            )
    rds = measured("round")
    if rds:
        lines += [
            "",
            f"| round (Cactus, m={r['m']}, EOS set) | context | round ms | in forwards ms | outside | host reads/round "
            "| AL | tok/s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for e, x in rds:
            lines.append(
                f"| {e} | {x.get('context', r['context'])} | {x['round_ms']:.2f} | {x['forward_ms']:.2f} | "
                f"{x['outside_forwards_pct']:.1f}% | {x['host_reads_per_round']:.2f} | {x['accepted_length']:.2f} | "
                f"{x['tokens_per_s']:.1f} |"
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
    if r.get("hidden_syncs"):
        lines += ["", f"hidden syncs (torch.cuda sync debug mode, one fast decode): {_fields(r['hidden_syncs'])}"]
    if "agreement" in r and "error" not in r["agreement"]:
        a = r["agreement"]
        lines += [
            "",
            f"eager vs fast: one verify step's logits differ by at most {a['logits_max_abs_diff']:.3g} (largest logit "
            f"{a['logits_max_abs']:.3g}: {'within' if a['logits_agree'] else 'OUTSIDE'} 2 %); fp32 tokens equal: "
            f"{a['fp32_tokens_equal']}",
        ]
    if r.get("batched") and "error" not in r["batched"]:
        lines += ["", "| batch size | tokens/s (SpS) |", "|---|---|"]
        lines += [f"| {rows} | {x['tokens_per_s']:.0f} |" for rows, x in r["batched"].items()]
    if "rules_ms" in r and "error" not in r["rules_ms"]:
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
    if r.get("serving") and "error" not in r["serving"]:
        lines += ["", "Serving sweep (2·B requests at once, 2 interleaved repeats):", "", r["serving"]["table"]]
    if r.get("skipped"):
        lines += ["", "Skipped: " + "; ".join(r["skipped"])]
    for name in r.get("failed", []):
        last = r[name]["error"].strip().splitlines()[-1]
        lines += ["", f"FAILED {name}: {last} (traceback in the .json)"]
    pk = r["env"]["packages"]
    lines.append(f"\n(took {r.get('seconds', 0):.0f}s; torch {pk.get('torch')}, transformers {pk.get('transformers')})")
    return "\n".join(lines) + "\n"


def _fields(d: dict) -> str:
    return "; ".join(f"{k} {v}" for k, v in d.items() if k != "first") if "error" not in d else "failed"
