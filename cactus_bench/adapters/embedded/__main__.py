"""Install (or reuse) the embedded offline pair and print its quality figures. `rebuild=true` trains it
again from the recipe with portable kernels (a few minutes) and says whether every file came out byte for
byte the one the package ships."""

import json
import shutil
import sys
import time

from cactus_bench.adapters.embedded import shipped
from cactus_bench.adapters.embedded.install import ensure_pair, format_quality
from cactus_bench.adapters.embedded.kernels import cpu_class
from cactus_bench.adapters.embedded.recipes import SPEC, default_cache_dir, spec_hash
from cactus_bench.core.cli import Command, Key

COMMAND = Command(
    prog="python -m cactus_bench.adapters.embedded",
    about=__doc__,
    keys=(
        Key("cache_dir", f"where the pair is kept (default: $CACTUS_BENCH_CACHE or {default_cache_dir()})"),
        Key("rebuild", "train it again from the recipe, and compare it with the shipped pair", False, bool),
        Key("ship", "with rebuild: write the rebuilt pair into the package (after a recipe change)", False, bool),
    ),
)


def main(argv=None):
    args = COMMAND.parse(argv)
    if args.ship and not args.rebuild:
        raise SystemExit("error: ship=true writes a rebuilt pair into the package: add rebuild=true")
    start = time.time()
    folder = ensure_pair(args.cache_dir, rebuild=args.rebuild)
    quality = json.loads((folder / "quality.json").read_text())
    built_now = (folder / "quality.json").stat().st_mtime >= start and args.rebuild
    print(f"{folder}\n{format_quality(quality, built_now)}")
    for rel, digest in shipped.weight_hashes(folder).items():
        print(f"  {rel}  sha256 {digest}")
    if args.ship:
        shutil.rmtree(shipped.FOLDER, ignore_errors=True)
        shutil.copytree(folder, shipped.FOLDER, ignore=shutil.ignore_patterns("manifest.json"))
        print(f"shipped: {shipped.FOLDER}")
    elif args.rebuild and shipped.holds(spec_hash(SPEC)):
        differ = shipped.differences(folder)
        if differ:
            here, built = cpu_class(), shipped.built_on()
            print(
                f"the rebuild differs from the shipped pair in {', '.join(differ)}: "
                + (
                    f"it was built on a CPU of class {built} and this one is of class {here}, whose portable "
                    "kernels are known to train other weights (kernels.CPU_CLASSES); the shipped bytes decode "
                    "the same table here"
                    if here != built
                    else "this CPU or torch build does not reproduce it (report it with "
                    "`python -m torch.utils.collect_env`)"
                )
            )
            sys.exit(1)
        print("the rebuild is byte for byte the shipped pair")


if __name__ == "__main__":
    main()
