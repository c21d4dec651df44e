"""The points of a spec-driven figure: for each row of a figure spec, the stored run of its cell.

Curves are honest: every point is the run whose identity matches its cell, error bars are the score's
standard error, a missing run is a gap in its curve and is listed under the figure, and runs of different
settings are never joined (the identity includes sampling, max_gen_toks and seed)."""

from __future__ import annotations

from cactus_bench.app.identity import RunIdentity
from cactus_bench.app.runs import Run, find
from cactus_bench.tools.report.specs import compose_cell, pair_spec

X_AXES = {
    "acceptance_rate": "acceptance rate (drafts accepted at any position / drafted)",
    "prefix_acceptance": "prefix acceptance (accepted before the first rejection / drafted = AL/m)",
    "accepted_length": "accepted length AL",
}
# What "how far from the verifier" means on a trade-off figure's divergence panel; output KL by default,
# because target KL is the budget a rule verified against, not the law of what it emitted.
DIVERGENCES = {
    "output_kl": "output KL(P_out ‖ q) per position",
    "target_kl": "target KL(h ‖ q) per position (the budget verified against)",
}


def points(spec: dict, runs: list[Run], data: str, pair: str, overrides: list[str]) -> list[dict]:
    """One record per row: the run's metrics (None where the run is missing)."""
    sub = pair_spec(spec, pair)
    # composing a cell's config takes Hydra a third of a second: only where a run of this dataset exists. The
    # pair is matched by the cell's identity (a pair filed under its models' names has no spec name to match)
    runs = [r for r in runs if r.config["data"]["name"] == data]
    out = []
    for row in spec["rows"]:
        run = find(runs, RunIdentity.of(compose_cell(sub, row, data, overrides))) if runs else None
        s = run.summary if run is not None else {}
        out.append(
            {
                "row": row,
                "run": run,
                "score": s.get("score"),
                "stderr": s.get("score_stderr"),
                **{k: s.get(k) for k in (*X_AXES, *DIVERGENCES)},
            }
        )
    return out
