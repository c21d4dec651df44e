"""`python -m cactus_bench.embedded [--cache-dir DIR] [--rebuild]`: build (or reuse) the offline pair and
print its quality figures."""

import argparse
import json
import time

from .build import default_cache_dir, ensure_pair, format_quality


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cache-dir", default=None, help=f"default: $CACTUS_BENCH_CACHE or {default_cache_dir()}")
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()
    start = time.time()
    folder = ensure_pair(args.cache_dir, rebuild=args.rebuild)
    quality = json.loads((folder / "quality.json").read_text())
    built_now = (folder / "quality.json").stat().st_mtime >= start
    print(f"{folder}\n{format_quality(quality, built_now)}")


if __name__ == "__main__":
    main()
