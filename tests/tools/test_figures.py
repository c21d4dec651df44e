"""The paper's spec-driven figures (Figure 4, the lossy trade-off) from a fixture store."""

from pathlib import Path

import pytest

from cactus_bench.app import run as run_mod
from cactus_bench.app.compose import compose
from cactus_bench.app.runs import load_runs
from cactus_bench.tools.report import figures, load_spec, run_overrides
from cactus_bench.tools.report.specs import expand_rows, pair_spec, spec_pairs
from tests.helpers.configs import pair_overrides

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"pair": "tiny", "limit": 2, "max_gen_toks": 8, "data": ["arith"], "m": 2}


@pytest.fixture(scope="module")
def figure_store(small_pair_dir, tmp_path_factory):
    """Every run of both figure specs on the small pair, but one lossy point left out (a gap)."""
    results = tmp_path_factory.mktemp("figstore") / "runs"
    pair = pair_overrides(small_pair_dir)
    done = set()
    for name in ("figure4", "lossy_tradeoff"):
        spec = load_spec(ROOT / "sweeps" / f"{name}.yaml", SMALL)
        for _, p in spec_pairs(spec):
            for row in spec["rows"]:
                if row["label"] == "interpolation alpha=0.6":
                    continue  # the missing run
                overrides = run_overrides(pair_spec(spec, p), row, "arith")
                key = tuple(o for o in overrides if not o.startswith("experiment_name"))
                if key in done:
                    continue  # shared between the figures (Verifier, SpS, ...): decoded once
                done.add(key)
                run_mod.run(compose((*overrides, *pair, f"paths.runs={results}", "progress=false")))
    return results, pair


def test_list_parameters_become_curves_in_parameter_order():
    rows = expand_rows([{"label": "Cactus", "method": "cactus", "delta": [0.5, 0.25, 1.0]}])
    assert [r["delta"] for r in rows] == [0.5, 0.25, 1.0] and {r["curve"] for r in rows} == {"Cactus"}
    with pytest.raises(ValueError, match="one parameter may be a list"):
        expand_rows([{"label": "x", "method": "speccas", "alpha": [0.1], "variant": ["opt", "token_v3"]}])


def test_a_pair_override_maps_every_family():
    spec = load_spec(ROOT / "sweeps" / "figure4.yaml", {"pair": "tiny"})
    assert [f for f, _ in spec_pairs(spec)] == ["gemma2_2b_9b", "r1distill_1.5b_7b", "llama3_1b_8b", "qwen3_1.7b_32b"]
    assert {p for _, p in spec_pairs(spec)} == {"tiny"}
    assert {p for _, p in spec_pairs(load_spec(ROOT / "sweeps" / "figure4.yaml"))} == {
        "gemma2_2b_9b",
        "r1distill_1.5b_7b",
        "llama3_1b_8b",
        "qwen3_1.7b_32b",
    }


def test_a_divergence_the_figure_cannot_label_is_refused(tmp_path):
    spec = load_spec(ROOT / "sweeps" / "lossy_tradeoff.yaml", SMALL) | {"divergence": "realised_kl"}
    with pytest.raises(ValueError, match="divergence one of \\['output_kl', 'target_kl'\\]"):
        figures([], tmp_path, [spec])


@pytest.mark.slow  # decodes every run of both figure specs (about a minute): CI's slow tier
@pytest.mark.xdist_group("figure-store")  # one worker: the store is decoded once
def test_both_figures_render_from_a_fixture_store(figure_store, tmp_path):
    results, pair = figure_store
    specs = [load_spec(ROOT / "sweeps" / f"{n}.yaml", SMALL) for n in ("figure4", "lossy_tradeoff")]
    made = figures(load_runs(results), tmp_path, specs, pair)
    for name in ("figure4_arith", "lossy_tradeoff_arith"):
        assert name in made and made[name].stat().st_size > 5000 and made[name].with_suffix(".pdf").exists()
    notes = (tmp_path / "lossy_tradeoff_notes.txt").read_text()
    assert "no run for interpolation alpha=0.6 (a gap in its curve)" in notes
    assert "x axis: acceptance rate (drafts accepted at any position / drafted)" in notes
    assert "divergence panel: output KL(P_out ‖ q) per position" in notes  # output KL by default, named
    assert not (tmp_path / "figure4_notes.txt").exists()  # every Figure 4 run is there


@pytest.mark.slow  # decodes every run of both figure specs (about a minute): CI's slow tier
@pytest.mark.xdist_group("figure-store")
def test_curves_never_join_runs_of_another_setting(figure_store, tmp_path):
    """Asked for greedy runs, the figures find none of the sampled ones: every point is a gap."""
    results, pair = figure_store
    spec = load_spec(ROOT / "sweeps" / "lossy_tradeoff.yaml", SMALL)
    figures(load_runs(results), tmp_path, [spec], [*pair, "sampling=greedy"])
    notes = (tmp_path / "lossy_tradeoff_notes.txt").read_text()
    assert (
        "no stored runs of this figure: nothing drawn" in notes and not (tmp_path / "lossy_tradeoff_arith.png").exists()
    )


def test_a_new_figure_family_is_one_registered_draw(tmp_path):
    """Figures are a registry (entry-point group `cactus_bench.figures`): a family registered as driven by a
    spec is drawn for a `figure:` spec naming it; a name registered for the other source is refused."""
    from cactus_bench.tools.report import figures
    from cactus_bench.tools.report.figures.common import FAMILIES, figure_family

    assert FAMILIES.group == "cactus_bench.figures" and FAMILIES.get("cross_architecture").source == "spec"
    drawn = []
    with FAMILIES.scoped():

        @figure_family("mine", "spec")
        def draw(sink, spec, runs, overrides):
            drawn.append(spec["name"])
            return ["drawn"]

        figures([], tmp_path, specs=[{"name": "my_figure", "figure": "mine"}])
        assert drawn == ["my_figure"]
        with pytest.raises(ValueError, match="'tradeoff' is drawn from a store, not a spec"):
            figures([], tmp_path, specs=[{"name": "x", "figure": "tradeoff"}])
        with pytest.raises(ValueError, match="source is one of"):
            figure_family("odd", "elsewhere")(draw)
    assert "mine" not in FAMILIES


# --- every figure family over a store of awkward runs -------------------------------------------------------


@pytest.fixture(scope="module")
def awkward_store(small_pair_dir, tmp_path_factory):
    """Runs no figure can assume complete: two items (every interval withheld), m = 6 against an 8-token
    budget (positions no round reaches), a batched run with no timing sample, a method alone on a dataset
    with no verifier-alone run, and a Spec-Bench run."""
    from tests.helpers.configs import cfg_of

    results = tmp_path_factory.mktemp("awkward") / "runs"
    few = ("pair=tiny", "m=6", "max_gen_toks=8", "limit=2", "progress=false")
    cells = [
        ("data=arith", "method=ar"),
        ("data=arith", "method=cactus", "delta=0.75", "paired_timing=true"),
        ("data=arith", "method=cactus", "delta=1.5", "paired_timing=true"),
        ("data=arith", "method=sps", "batch_size=2", "timing_sample=null"),
        ("data=gsm8k", "method=cactus", "delta=0.75"),
        ("data=specbench", "method=ar"),
        ("data=specbench", "method=sps", "batch_size=2", "timing_sample=null"),
    ]
    for cell in cells:
        run_mod.run(cfg_of(*few, *cell, results=results, pair_dir=small_pair_dir))
    return results


def test_every_figure_family_draws_from_a_store_of_awkward_runs(awkward_store, tmp_path):
    """No family fails on small n, withheld intervals, unreached positions, untimed or batched runs, a
    method alone or a dataset without its verifier run: it leaves out what it cannot draw, and says so."""
    from cactus_bench.tools.report.figures.common import FAMILIES

    runs = load_runs(awkward_store)
    made = figures(runs, tmp_path)
    drawn = {name.split("_")[0] for name in made}
    assert {"fig1", "positions", "fig3", "fig2"} <= drawn, sorted(made)
    assert any(name.startswith("fig_") for name in made), sorted(made)  # Spec-Bench's, from a batched run
    notes = "\n".join(p.read_text() for p in tmp_path.glob("positions_*_notes.txt"))
    assert "no round reached position(s)" in notes and "interval withheld" in notes
    families = {f for r in runs for f in r.kind.figures}
    assert families <= set(FAMILIES) and {"positions", "speedup", "tradeoff", "delta_grid"} <= families


def test_speedup_labels_never_print_over_each_other(awkward_store, tmp_path, monkeypatch):
    """Two methods at nearly the same AL and speedup (the demo's 2.06× and 2.11× at AL 2.61 and 2.67): every
    text on the figure has its own place; each speedup is read from the legend."""
    from cactus_bench.core import metrics
    from cactus_bench.core.intervals import Estimate
    from cactus_bench.tools.report.figures import common, speedup

    runs = [r for r in load_runs(awkward_store) if r.data_label == "arith"]
    close = iter([(2.61, 2.06), (2.67, 2.11), (2.64, 2.08)])
    fixed = {}
    for r in runs:
        if not r.is_baseline:
            r.summary["accepted_length"], fixed[r.key] = next(close)
    monkeypatch.setattr(
        speedup,
        "speedup_of",
        lambda run, ar: (
            metrics.Reading(Estimate(fixed[run.key], fixed[run.key] - 0.05, fixed[run.key] + 0.05, 20)),
            "paired",
        ),
    )
    boxes = []

    def keep(self, fig, name):
        if not name.startswith("fig3"):
            return
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            texts = [t for t in ax.texts if t.get_text()]
            if ax.get_legend() is not None:
                texts += ax.get_legend().get_texts()
            boxes.append([t.get_window_extent(renderer) for t in texts])

    monkeypatch.setattr(common.Sink, "save", keep)
    figures(runs, tmp_path)
    assert boxes and len(boxes[0]) >= 4, "no speedup figure with its labels drawn"
    for texts in boxes:
        for i, a in enumerate(texts):
            assert not any(a.overlaps(b) for b in texts[i + 1 :]), "two labels print over each other"
