#!/usr/bin/env python3
"""CI's tiers, timed: one line per tier (wall time, test counts), a total, and one paragraph when a tier
fails or the run outgrows its limit. Standard library only: it runs before any venv exists.

    tiers.py run NAME -- CMD ...   run CMD as tier NAME: its output to the terminal and to NAME.log,
                                   then the tier's line; exit with CMD's status (a failure's paragraph first)
    tiers.py log NAME -- CMD ...   the same, output to NAME.log only (a tier run in the background)
    tiers.py report                every tier's line, the total wall time from the first tier's start, and
                                   a failure naming the slowest tiers when the total exceeds the limit

Records go to $CI_TIERS_DIR (default .ci/logs): one JSON file per tier, written when it ends. The limit is
$CI_LIMIT_S seconds (default 3600: CI stops a run at 90 minutes; 60 leaves room to see a slowdown coming).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

LIMIT_S = 3600
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def records_dir() -> Path:
    return Path(os.environ.get("CI_TIERS_DIR", ".ci/logs"))


def clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def test_counts(output: str) -> dict[str, int]:
    """The counts of pytest's summary lines in `output` ("905 passed, 8 skipped in 253.59s"), summed over
    every pytest session the tier ran; {} when it ran none."""
    counts: dict[str, int] = {}
    for line in output.splitlines():
        text = line.strip("= \n")
        if not re.search(r" in [\d.]+s( \(\d+:\d\d:\d\d\))?$", text):
            continue
        for n, kind in COUNT.findall(text):
            kind = "errors" if kind.startswith("error") else kind
            counts[kind] = counts.get(kind, 0) + int(n)
    return counts


def line(record: dict) -> str:
    counts = ", ".join(f"{n} {kind}" for kind, n in record["counts"].items()) or "no tests"
    where = " (in the background)" if record.get("background") else ""
    status = "ok" if record["status"] == 0 else f"FAILED (exit {record['status']})"
    return f"tier {record['name']:<14} {clock(record['seconds']):>8}  {status}{where}; {counts}"


def run(name: str, cmd: list[str], background: bool) -> int:
    folder = records_dir()
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{name}.log"
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for text in proc.stdout:
            out.write(text)
            if not background:
                sys.stdout.write(text)
                sys.stdout.flush()
        status = proc.wait()
    end = time.time()
    output = log.read_text(errors="replace")
    record = {
        "name": name,
        "command": " ".join(cmd),
        "start": start,
        "end": end,
        "seconds": end - start,
        "status": status,
        "counts": test_counts(output),
        "background": background,
        "log": str(log),
    }
    tmp = folder / f".{name}.json.tmp"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, folder / f"{name}.json")
    print(line(record), flush=True)
    if status != 0:
        print(failure_paragraph(record, output), file=sys.stderr, flush=True)
    return status


def failure_paragraph(record: dict, output: str) -> str:
    tail = "\n".join("    " + t for t in output.rstrip().splitlines()[-25:])
    return (
        f"\nCI failed in tier {record['name']!r} after {clock(record['seconds'])}: `{record['command']}` exited "
        f"with status {record['status']}. Its whole output is in {record['log']}; its last lines:\n{tail}\n"
        f"Run that command on a checkout to reproduce it; the tiers after it did not run.\n"
    )


def load_records() -> list[dict]:
    return sorted(
        (json.loads(p.read_text()) for p in records_dir().glob("*.json")), key=lambda r: (r["start"], r["name"])
    )


def report(limit_s: float) -> int:
    records = load_records()
    if not records:
        print("no tier has run", file=sys.stderr)
        return 1
    print("\nCI tiers (wall time; background tiers overlap the ones beside them):")
    for r in records:
        print("  " + line(r))
    total = max(r["end"] for r in records) - min(r["start"] for r in records)
    tests = sum(r["counts"].get("passed", 0) for r in records)
    print(f"  total {clock(total)} wall, {tests} tests passed (limit {clock(limit_s)})")
    if total > limit_s:
        slowest = sorted((r for r in records if not r.get("background")), key=lambda r: -r["seconds"])[:3]
        named = ", ".join(f"{r['name']} ({clock(r['seconds'])})" for r in slowest)
        print(
            f"\nCI took {clock(total)}, over its {clock(limit_s)} limit (CI stops a run at 90 minutes): the slowest "
            f"tiers were {named}. Find what grew in them (each tier's log is in {records_dir()}, pytest's "
            "--durations=20 names its slowest tests) before adding more.",
            file=sys.stderr,
        )
        return 1
    return 0 if all(r["status"] == 0 for r in records) else 1


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] in ("run", "log") and argv[2] == "--":
        return run(argv[1], argv[3:], background=argv[0] == "log")
    if argv == ["report"]:
        return report(float(os.environ.get("CI_LIMIT_S", LIMIT_S)))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
