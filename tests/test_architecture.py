"""The layering and the registries: one place per concept, checked where it is registered."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cactus_bench.app.tracking import summary_keys
from cactus_bench.core import metrics
from cactus_bench.core.methods import BASELINE, Method, method_names
from cactus_bench.core.registry import Registry
from cactus_bench.core.rules import RULES, Rule, build_rule, register
from cactus_bench.core.rules.base import gather_last, general_accept
from cactus_bench.tools.report.tables import fmt, label

from .helpers.stats import P_THRESHOLD, g_test_pvalue

ROOT = Path(__file__).resolve().parents[1]
APP_ONLY = ("lm_eval", "hydra", "omegaconf", "datasets", "pandas", "matplotlib", "wandb")


def test_a_new_rule_is_one_registered_class():
    """Registering a class is all the engine, the Method type and the oracle need."""
    with RULES.scoped():

        @register("half_sps")
        class HalfSpS(Rule):  # accepts half as often as SpS; recovery keeps the law a distribution
            def accept_prob(self, p, q, n, **raw):
                return 0.5 * general_accept(gather_last(q, n), gather_last(p, n))

            def residual(self, p, q, n, **raw):
                return q

        assert HalfSpS.name == "half_sps" and "half_sps" in method_names()
        method = Method("half_sps", {}, m=3)
        assert isinstance(method.rule, HalfSpS) and method.tag == "half_sps"
        p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64)
        q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
        law = method.rule.output_law(p, q)
        assert float(law.sum()) == pytest.approx(1.0, abs=1e-12)
        g = torch.Generator().manual_seed(0)
        trials = 50_000
        d = torch.multinomial(p, trials, replacement=True, generator=g)[:, None]
        v = method.rule.verify(p.expand(trials, 1, 3), q.expand(trials, 2, 3), d, g)
        assert g_test_pvalue(v.emitted[:, 0], law) > P_THRESHOLD
    assert "half_sps" not in RULES  # the scope is gone


def test_rule_registration_checks_the_class_and_the_name():
    with RULES.scoped():
        with pytest.raises(TypeError, match="does not implement accept_prob"):

            @register("incomplete")
            class Incomplete(Rule):
                def residual(self, p, q, n, **raw):
                    return q

        with pytest.raises(ValueError, match="registered twice"):
            register("sps")(type("Again", (RULES.get("sps"),), {}))
        with pytest.raises(ValueError, match="identifier"):
            register("two words")(type("Odd", (RULES.get("sps"),), {}))
        with pytest.raises(TypeError, match="not a Rule subclass"):
            register("plain")(dict)


def test_typos_get_a_suggestion():
    with pytest.raises(ValueError, match="unknown acceptance rule 'cactsu' \\(did you mean 'cactus'\\?\\)"):
        build_rule("cactsu")
    reg = Registry("colour")
    reg.add("green", 1)
    with pytest.raises(ValueError, match="valid choices: green"):
        reg.get("purple")


def test_a_new_metric_is_one_definition_read_everywhere():
    with metrics.METRICS.scoped():

        @metrics.pooled_metric("drafts/call", "{:.1f}", cli=True, better="neither")
        def drafted_per_call(c):
            return c["drafted"] / c["verifier_calls"] if c["verifier_calls"] else None

        sample = {
            "stats": {
                "new_tokens": 12,
                "verifier_calls": 4,
                "drafted": 12,
                "accepted": 8,
                "rejected": 4,
                "wall_time": 2.0,
            }
        }
        assert metrics.decode_metrics([sample, sample])["drafted_per_call"] == 3.0  # the summary
        assert label("drafted_per_call") == "drafts/call" and fmt(3.0, "drafted_per_call") == "3.0"  # reports
        assert "drafted_per_call" in summary_keys()  # tracking
        with pytest.raises(ValueError, match="registered twice"):
            metrics.pooled_metric("AL", better="higher")(drafted_per_call)
        with pytest.raises(ValueError, match="say which is better"):

            @metrics.pooled_metric("calls", better="more")
            def calls(c):
                return c["verifier_calls"]

    assert "drafted_per_call" not in metrics.METRICS


def test_one_definition_of_accepted_length():
    """The engine's per-sample AL, a run's pooled AL and Spec-Bench's AL all come from the metric."""
    from cactus_bench.core.decode.stats import GenerationOutput, Rounds

    rounds = Rounds()
    for drafted, accepted in [(4, 4), (4, 1), (4, 0)]:
        rounds.add(
            drafted=drafted,
            accepted=accepted,
            accepted_any=accepted,
            emitted=accepted + 1,
            t_draft=0.0,
            t_verify=0.0,
            t_rule=0.0,
            t_other=0.0,
            kl_sum=0.0,
            kl_count=0,
            out_kl_sum=0.0,
            out_kl_count=0,
            out_kl_skipped=0,
        )
    with pytest.raises(ValueError, match=r"missing \['accepted_any'"):  # ragged columns: refused
        rounds.add(drafted=1, accepted=1, emitted=2)
    out = GenerationOutput([1] * 8, rounds, 0.0, 1.0, "length")
    assert out.accepted_length == metrics.accepted_length(out.counters()) == pytest.approx(5 / 3)
    assert metrics.decode_metrics([{"stats": out.summary()}])["accepted_length"] == pytest.approx(5 / 3)


def test_the_verifier_alone_is_one_method_everywhere():
    """One name (`methods.BASELINE`) and one predicate: the identity drops the drafter and m for it, its own
    baseline reference is itself, and W&B files it under that name."""
    from cactus_bench.app.identity import RunIdentity
    from cactus_bench.app.tracking import wandb_config

    from .helpers.configs import cfg_of

    assert [n for n in method_names() if not Method(n, {}, m=3).uses_drafter] == [BASELINE]
    ar = RunIdentity.of(cfg_of(f"method={BASELINE}", "m=7"))
    assert ar.is_baseline and ar.drafter is None and ar.m is None and ar.reference("baseline") == ar
    assert RunIdentity.of(cfg_of(f"method={BASELINE}", "m=9")) == ar  # m does not matter without a drafter
    sps = RunIdentity.of(cfg_of("method=sps", "m=7"))
    assert sps.reference("baseline") == ar and sps.reference("sps") == sps
    assert wandb_config(cfg_of(f"method={BASELINE}"))["method"] == BASELINE


def test_the_baseline_method_uses_no_drafter():
    ar, sps = Method(BASELINE, {}, m=10), Method("sps", {}, m=10)
    assert not ar.uses_drafter and ar.rule is None and ar.run_name == "ar"
    assert sps.uses_drafter and sps.run_name == "sps_m10"


def _imports_without(modules: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess:
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None  # importing it now raises ImportError\n"
        f"import {modules}\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)


def test_the_core_imports_with_torch_and_transformers_alone():
    out = _imports_without(
        "cactus_bench.core.methods, cactus_bench.core.metrics, cactus_bench.core.decode, cactus_bench.core.rules, "
        "cactus_bench.backends.hf.loader, cactus_bench.adapters.embedded, cactus_bench.core.utils",
        APP_ONLY,
    )
    assert out.returncode == 0, out.stderr
    broken = _imports_without("cactus_bench.tools.report", APP_ONLY)  # control: the app does need them
    assert broken.returncode != 0


def test_reports_and_config_do_not_import_lm_eval():
    out = _imports_without(
        "cactus_bench.tools.report, cactus_bench.app.config, cactus_bench.app.tracking", ("lm_eval",)
    )
    assert out.returncode == 0, out.stderr


def test_rej_reproduces_the_papers_column_from_its_own_accepted_lengths():
    """Rej's formula is inferred. From Table 1's AL values (m = 20; per call AL accepted, AL + 1 emitted,
    20 − AL rejected) it gives −30/−35/−33 % on GSM8K and −45/−46/−49 % on GPQA, against the printed
    −32/−36/−34 and −46/−46/−50: within 2 points everywhere."""

    def samples(al):  # one verifier call per sample, scaled so AL is exact
        return [{"id": 0, "stats": {"new_tokens": al + 1, "rejected": 20 - al, "drafted": 20, "accepted": al}}]

    table = {
        "gsm8k": (5.11, [(6.78, -32), (7.15, -36), (7.00, -34)]),
        "gpqa": (3.84, [(6.41, -46), (6.46, -46), (6.74, -50)]),
    }
    ours = {}
    for data, (sps_al, rows) in table.items():
        ours[data] = [round(metrics.rej(samples(al), samples(sps_al)).value) for al, _ in rows]
        assert all(abs(o - printed) <= 2 for o, (_, printed) in zip(ours[data], rows))
    assert ours == {"gsm8k": [-30, -35, -33], "gpqa": [-45, -46, -49]}


def test_one_identity_from_the_cli_to_the_store_report_sweep_plan_and_wandb(small_pair_dir, tmp_path):
    """A cell composed by a spec (what sweep, report and plan do) and the same run from the CLI's overrides
    (what a user types) agree: one key for the store's folder, the summary, the manifest, the report's
    lookup, the sweep's "finished" check, the plan's stored-run lookup and W&B's run id and config."""
    import json

    from cactus_bench.app import run as run_mod
    from cactus_bench.app.compose import compose
    from cactus_bench.app.config import validate
    from cactus_bench.app.identity import RunIdentity
    from cactus_bench.app.runs import find_run, load_runs
    from cactus_bench.app.store import run_dir
    from cactus_bench.app.tracking import wandb_config
    from cactus_bench.tools.report import compose_cell, load_spec
    from cactus_bench.tools.report.specs import pair_spec
    from cactus_bench.tools.sweep import shard_finished

    from .helpers.configs import pair_overrides

    spec = load_spec(ROOT / "sweeps" / "demo.yaml", {"pair": "tiny", "limit": 1, "max_gen_toks": 4, "m": 2})
    row = next(r for r in spec["rows"] if r["method"] == "cactus")
    extra = [*pair_overrides(small_pair_dir), f"paths.runs={tmp_path}", "progress=false"]
    cell = compose_cell(pair_spec(spec, "tiny"), row, "arith", extra)
    typed = compose(
        (
            "pair=tiny",
            "data=arith",
            "method=cactus",
            f"delta={row['delta']}",
            "m=2",
            "limit=1",
            "max_gen_toks=4",
            *extra,
        )
    )
    ident = RunIdentity.of(typed)
    assert RunIdentity.of(cell) == ident and not shard_finished(validate(cell), "0/1")
    run_mod.run(typed)

    folder = run_dir(cell)
    assert folder == ident.folder(tmp_path) and folder.name.endswith(ident.key)
    summary = json.loads((folder / "summary.json").read_text())
    manifest = json.loads((folder / "manifest.json").read_text())
    stored = find_run(load_runs(tmp_path), cell)
    assert (
        stored is not None and stored.key == summary["run_key"] == ident.key == RunIdentity(**manifest["identity"]).key
    )
    assert shard_finished(validate(cell), "0/1")
    assert wandb_config(cell)["run_key"] == ident.key and wandb_config(cell)["pair"] == stored.pair_name == "small"
    other = compose_cell(pair_spec(spec, "tiny"), row | {"delta": 0.5}, "arith", extra)
    assert RunIdentity.of(other).key != ident.key and find_run(load_runs(tmp_path), other) is None  # control


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, read from the code at any depth (imports inside functions
    and under TYPE_CHECKING are arrows all the same)."""
    import ast

    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(target: str) -> str | None:  # `pkg.mod.name` -> `pkg.mod`: the module that defines it
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]
        graph[module] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
                prefix = ".".join([*base, *([node.module] if node.module else [])])
                targets = [f"{prefix}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph[module] |= {t for t in map(resolve, targets) if t and t != module}
    return graph


def layer_of(module: str, layers: tuple[str, ...]) -> int | None:
    """A module's layer is its first folder under the package; the package's own `__init__` and `__main__`
    (the entry points) are above every layer; None: a module outside every layer."""
    parts = module.split(".")
    if parts[1:] in ([], ["__main__"]):
        return len(layers)
    return layers.index(parts[1]) if parts[1] in layers else None


def upward_imports(package: Path, layers: tuple[str, ...]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a module imports from a layer above its own."""
    graph = import_graph(package)
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer_of(b, layers) > layer_of(a, layers))


def circles(package: Path) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan's algorithm)."""
    graph = import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_every_module_lives_in_a_layer_folder():
    """The folders are the layers (`cactus_bench.LAYERS`, lowest first): no loose module, no folder that is
    not a layer."""
    import cactus_bench

    package = ROOT / "cactus_bench"
    loose = [m for m in import_graph(package) if layer_of(m, cactus_bench.LAYERS) is None]
    assert loose == []
    folders = sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(cactus_bench.LAYERS)


def test_no_import_points_up_a_layer_and_none_closes_a_circle(tmp_path):
    """core < backends < adapters < app < tools, read from the imports in the code. Before: `metrics` and
    `timing_conditions` imported each other (at type level), `decode/api.py` imported its own backends, the
    layers were a hand list of 14 loose modules."""
    import shutil

    import cactus_bench

    package = ROOT / "cactus_bench"
    assert upward_imports(package, cactus_bench.LAYERS) == []
    assert circles(package) == []

    # controls, each on a copy of the package: an upward import and a circle are found
    def planted(name: str, module: str, code: str) -> Path:
        copy = tmp_path / name / "cactus_bench"
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("conf", "tiny_pair", "__pycache__"))
        with copy.joinpath(*module.split("/")).open("a") as f:
            f.write(code)
        return copy

    up = planted("up", "core/rules/base.py", "\n\ndef _planted():\n    from ...backends.hf import loader  # noqa\n")
    assert upward_imports(up, cactus_bench.LAYERS) == [
        ("cactus_bench.core.rules.base", "cactus_bench.backends.hf.loader")
    ]
    circle = planted(
        "circle",
        "core/intervals.py",
        "\nif False:\n    from cactus_bench.core.metrics.registry import Metric  # noqa\n",
    )
    assert upward_imports(circle, cactus_bench.LAYERS) == []
    assert circles(circle) == [["cactus_bench.core.intervals", "cactus_bench.core.metrics.registry"]]


@pytest.mark.slow
def test_the_type_checker_holds_a_backend_to_the_decoder_protocol():
    """`make lint` type-checks the core and its protocols: a backend whose decoder lacks part of `Decoder`
    (here its `device` and chat template) is an error before anything runs; a whole one passes."""
    head = "from cactus_bench.core.decode.api import Backend, DecodeSpec, ModelSpec\n"
    body = (
        "class D:\n"
        "    {extra}\n"
        "    def generate(self, requests): return iter(())\n"
        "    @property\n"
        "    def tokenizer_name(self) -> str: return 'd'\n"
        "def load(models: ModelSpec, spec: DecodeSpec) -> D: return D()\n"
        "Backend(load=load, engines=('x',), devices=('cpu',))\n"
    )
    whole = body.format(
        extra="device = 'cpu'\n    def apply_chat_template(self, chat, add_generation_prompt=True) -> str: return ''"
        "\n    @property\n    def special_tokens(self) -> tuple[str, ...]: return ()"
    )
    broken = body.format(extra="pass")

    def mypy(code: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "mypy",
                "--config-file",
                os.devnull,
                "--ignore-missing-imports",
                "--follow-imports=silent",
                "-c",
                head + code,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )

    assert mypy(whole).returncode == 0, mypy(whole).stdout
    out = mypy(broken)
    assert out.returncode == 1 and 'Argument "load" to "Backend" has incompatible type' in out.stdout


def test_defaults_live_once():
    """Top-level defaults were written twice (the schema and config.yaml) and sampling's three times (the
    schema, conf/sampling/paper.yaml, and the decoder's settings with defaults of their own)."""
    import dataclasses

    import yaml

    from cactus_bench.app.schema import CONF_DIR, RunConfig, SamplingConfig
    from cactus_bench.core.decode.api import DecodeSpec

    config = yaml.safe_load((CONF_DIR / "config.yaml").read_text())
    schema = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    restated = [k for k, v in config.items() if k not in ("defaults", "hydra") and schema.get(k) == v]
    assert restated == []
    assert all(f.default == "???" for f in dataclasses.fields(SamplingConfig))  # the group file's values
    with_defaults = [
        f.name
        for f in dataclasses.fields(DecodeSpec)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    ]
    # run-level switches, not decode values
    assert with_defaults == ["paired_timing", "statistics", "settings", "options"]


def test_a_run_computes_its_identity_once(small_pair_dir, tmp_path, monkeypatch):
    """`RunIdentity.of(cfg)` was recomputed at least five times per run (store, log line, summary, references,
    tracking); now the run computes it once and hands it down."""
    from cactus_bench.app import run as run_mod
    from cactus_bench.app.identity import RunIdentity

    from .helpers.configs import cfg_of

    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = cfg_of(
        "pair=tiny",
        "data=arith",
        "method=sps",
        "m=2",
        "max_gen_toks=8",
        "limit=2",
        "progress=false",
        "tracking=wandb",
        results=tmp_path,
        pair_dir=small_pair_dir,
    )
    calls = []
    real = RunIdentity.of.__func__

    def counted(cls, c):
        calls.append(c is cfg)  # this run's config (stored runs read back are other configs)
        return real(cls, c)

    monkeypatch.setattr(RunIdentity, "of", classmethod(counted))
    run_mod.run(cfg)
    assert calls.count(True) == 1


def test_a_new_rule_is_one_module_in_the_rules_folder(tmp_path):
    """On a copy of the package, one new file in core/rules/ is a rule every consumer sees: `method=<name>`
    composes with its parameters' defaults (generated from its signature), Method builds it, `cactus-bench
    rules` and bench-rules list it. The oracle tests then ask for its reference law (the one other file)."""
    import shutil

    copy = tmp_path / "cactus_bench"
    shutil.copytree(ROOT / "cactus_bench", copy, ignore=shutil.ignore_patterns("tiny_pair", "__pycache__"))
    before = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file()}
    (copy / "core" / "rules" / "throwaway.py").write_text(
        "from cactus_bench.core.rules.base import Rule, gather_last, general_accept\n"
        "from cactus_bench.core.rules.registry import register\n\n\n"
        '@register("throwaway")\n'
        "class Throwaway(Rule):\n"
        "    def __init__(self, share: float = 0.5):\n"
        "        self.share = share\n\n"
        "    def accept_prob(self, p, q, n, **raw):\n"
        "        return self.share * general_accept(gather_last(q, n), gather_last(p, n))\n\n"
        "    def residual(self, p, q, n, **raw):\n"
        "        return q\n"
    )
    added = {p.relative_to(copy) for p in copy.rglob("*") if p.is_file()} - before
    assert added == {Path("core/rules/throwaway.py")}
    code = (
        "from cactus_bench.app.compose import compose\n"
        "from cactus_bench.core.methods import Method\n"
        "from cactus_bench.core.rules import RULES\n"
        "from cactus_bench.tools.rules import table\n"
        "cfg = compose(('pair=tiny', 'data=arith', 'method=throwaway'))\n"
        "assert dict(cfg.method.params) == {'share': 0.5}, cfg.method\n"
        "cfg = compose(('pair=tiny', 'data=arith', 'method=throwaway', 'method.params.share=0.25'))\n"
        "assert Method(cfg.method.name, dict(cfg.method.params)).rule.share == 0.25\n"
        "assert '| throwaway | throwaway | share=0.5 |' in table()\n"
        "assert RULES.get('throwaway').timed_variants == ({},)  # what bench-rules times\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
