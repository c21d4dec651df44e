"""One command-line convention (cactus_bench/core/cli.py): every tool and benchmark script takes key=value, prints
a generated --help, and answers bad input (an unknown key, a flag in another style, a bad value, a missing
required setting) with one paragraph and exit status 2, before any work."""

import importlib
import importlib.util
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from cactus_bench.core.cli import Command, Key

from ..helpers.cli import run_main

ROOT = Path(__file__).resolve().parents[2]

COMMAND = Command(
    prog="python -m tool",
    about="Does a thing.",
    positional=(Key("spec", "a spec", required=True), Key("extra", "optional word")),
    keys=(
        Key("shards", "jobs", 1, int),
        Key("gpu", "the card", "h100", choices=("h100", "a100")),
        Key("dry_run", "print only", False, bool),
        Key("batches", "sizes", [1], list, item=int),
        Key("entity", "who", required=True),
        Key("items", "a setting named like a dict method", 64, int),
    ),
    overrides="Hydra overrides",
)


def parse_error(command: Command, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        command.parse(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "usage: python -m tool" in err
    return err


def test_settings_are_typed_and_the_rest_are_overrides():
    args = COMMAND.parse(["s.yaml", "SHARDS=8", "dry_run=yes", "batches=1,4", "entity=me", "sampling=greedy", "+x=1"])
    assert args.items == 64 and COMMAND.parse(["s", "entity=me", "items=16"]).items == 16  # not dict.items
    assert (args.spec, args.extra, args.shards, args.gpu, args.dry_run) == ("s.yaml", None, 8, "h100", True)
    assert args.batches == [1, 4] and args.entity == "me" and args.overrides == ["sampling=greedy", "+x=1"]
    args.shards = 2  # a preset (small=true) changes the setting itself
    assert vars(args)["shards"] == 2


@pytest.mark.parametrize(
    "argv,message",
    [
        (["s.yaml", "entity=me", "--shards", "8"], "--shards is spelled shards=8 here"),
        (["s.yaml", "entity=me", "--dry-run"], "--dry-run is spelled dry_run=true here"),
        (["s.yaml", "entity=me", "--verbose"], "--verbose is not an option of python -m tool"),
        (["s.yaml", "entity=me", "shards=many"], "shards='many' is not valid: an int"),
        (["s.yaml", "entity=me", "gpu=h300"], "gpu='h300' is not valid: choose one of h100, a100"),
        (["s.yaml", "entity=me", "batches=1,x"], "batches='1,x' is not valid: an int"),
        (["s.yaml", "entity=me", "dry_run=maybe"], "dry_run='maybe' is not valid: true or false"),
        (["s.yaml"], "entity= is required"),
        (["entity=me"], "SPEC is required"),
        (["a", "b", "c", "entity=me"], "unexpected 'c': settings are key=value"),
    ],
)
def test_bad_input_is_one_paragraph_naming_the_setting(argv, message, capsys):
    assert message in parse_error(COMMAND, argv, capsys)


def test_the_command_line_of_parsed_settings_gives_them_back():
    """What a benchmark stores as the command that reproduces it: parsing it again gives the same settings
    (quoted where a value has a space), and settings left at their defaults are not written."""
    import shlex

    argv = ["a spec", "shards=3", "dry_run=true", "batches=1,4", "entity=me", "temperature=0.7"]
    args = COMMAND.parse(argv)
    line = COMMAND.command_line(args)
    assert line.startswith("python -m tool 'a spec' ") and "gpu=" not in line and "items=" not in line
    again = COMMAND.parse(shlex.split(line)[3:])
    assert vars(again) == vars(args)
    assert "shards=" not in COMMAND.command_line(args, leave_out=("shards",))


def test_an_unknown_key_is_refused_with_the_closest_setting(capsys):
    strict = Command(prog="python -m tool", about="x", keys=(Key("results", "runs"), Key("out", "where")))
    assert "resluts= is not a setting of python -m tool: did you mean results=?" in parse_error(
        strict, ["resluts=x"], capsys
    )
    assert "takes results=, out=" in parse_error(strict, ["colour=red"], capsys)


def test_help_lists_every_setting_with_its_default(capsys):
    with pytest.raises(SystemExit) as e:
        COMMAND.parse(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith("usage: python -m tool SPEC [EXTRA] [shards=...]")
    for line in ("SPEC", "shards=", "jobs (default 1)", "the card (one of h100, a100) (default h100)", "OVERRIDES"):
        assert line in out


TOOLS = ["cactus_bench.tools.sweep", "cactus_bench.tools.plan", "cactus_bench.tools.report", "cactus_bench.tools.score"]
TOOLS += ["cactus_bench.tools.dashboard", "cactus_bench.adapters.embedded", "cactus_bench.tools.perf.device_check"]
SCRIPTS = sorted(p for p in (ROOT / "scripts").glob("bench_*.py"))


def _main_of(target):
    if isinstance(target, Path):
        return lambda: runpy.run_path(str(target), run_name="__main__")
    module = importlib.import_module(target)
    return getattr(module, "main", None) or importlib.import_module(f"{target}.__main__").main


@pytest.mark.parametrize("target", TOOLS + SCRIPTS, ids=lambda t: t.stem if isinstance(t, Path) else t)
def test_every_entry_point_takes_key_value_and_generates_its_help(target):
    """Each tool and script: `--help` is the generated one (exit 0); a flag in another style is answered with
    its key=value spelling (exit 2). Both happen before any model, dataset or network is touched."""
    main = _main_of(target)
    helped = run_main(main, "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python "), helped.stderr[-2000:]
    assert "=" in helped.stdout.splitlines()[0]  # its settings are key=value
    refused = run_main(main, "--out", "x")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "is spelled out=x here" in refused.stderr or "is not an option of" in refused.stderr


def test_one_console_command_fronts_every_entry_point():
    """`cactus-bench <verb>` runs the verb's `python -m` entry point as it is (same help, same keys); an
    unknown verb gets a suggestion and the list; pyproject installs the command."""
    import tomllib

    from cactus_bench.tools import console

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"cactus-bench": "cactus_bench.tools.console:main"}
    for verb, (module, _) in console.VERBS.items():
        assert f"  {verb}  " in console.usage() + "  "
        assert importlib.util.find_spec(module) is not None and _main_of(module) is not None

    def out(*args):
        r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
        return r.returncode, r.stdout, r.stderr

    assert out("-m", "cactus_bench.tools.console", "plan", "--help") == out("-m", "cactus_bench.tools.plan", "--help")
    code, _, err = out("-m", "cactus_bench.tools.console", "plna")
    assert code != 0 and "unknown verb 'plna' (did you mean 'plan'?)" in err and "device-check" in err
