from cactus_bench.core.metrics import pooled_metric


@pooled_metric("drafts/call", "{:.2f}", ratio=("drafted", "verifier_calls"), better="neither")
def drafts_per_call(c):
    return c["drafted"] / c["verifier_calls"] if c["verifier_calls"] else None
