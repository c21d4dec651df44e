"""`cactus-bench rules`: the registered acceptance rules (built-in and installed packages'), each with its
label and its parameters' defaults, read from the registry and the rules' signatures: what `method=<name>`
composes (app/method_configs.py)."""

from __future__ import annotations

from cactus_bench.core.cli import Command


def table() -> str:
    from cactus_bench.app.method_configs import method_node
    from cactus_bench.core.methods import BASELINE, display_name, method_names

    lines = ["| method | label | parameters (defaults) |", "|---|---|---|"]
    for name in method_names():
        params = {} if name == BASELINE else method_node(name)["params"]
        shown = ", ".join(f"{k}={v}" for k, v in params.items()) or "none"
        lines.append(f"| {name} | {display_name(name)} | {shown} |")
    return "\n".join(lines)


COMMAND = Command(prog="python -m cactus_bench.tools.rules", about=__doc__, keys=())


def main(argv: list[str] | None = None) -> None:
    COMMAND.parse(argv)
    print(table())


if __name__ == "__main__":
    main()
