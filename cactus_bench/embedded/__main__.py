"""Build (or reuse) the embedded offline pair and print its quality figures."""

import json
import time

from ..cli import Command, Key
from .build import default_cache_dir, ensure_pair, format_quality

COMMAND = Command(
    prog="python -m cactus_bench.embedded",
    about=__doc__,
    keys=(
        Key("cache_dir", f"where the pair is built (default: $CACTUS_BENCH_CACHE or {default_cache_dir()})"),
        Key("rebuild", "build it again even if the cache holds it", False, bool),
    ),
)


def main(argv=None):
    args = COMMAND.parse(argv)
    start = time.time()
    folder = ensure_pair(args.cache_dir, rebuild=args.rebuild)
    quality = json.loads((folder / "quality.json").read_text())
    built_now = (folder / "quality.json").stat().st_mtime >= start
    print(f"{folder}\n{format_quality(quality, built_now)}")


if __name__ == "__main__":
    main()
