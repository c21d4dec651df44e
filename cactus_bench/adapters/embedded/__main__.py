"""Install (or reuse) the embedded offline pair and print its quality figures. `rebuild=true` trains it
again from the recipe with portable kernels (about 25 minutes) and says whether every file came out byte for
byte what this recipe gives on this class of CPU: on the class that built the shipped pair, the shipped
files; on another, its recorded build (`class_builds.json`), or that none is recorded."""

import json
import shutil
import sys
import textwrap
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
        Key("record", "with rebuild: record the rebuild as this CPU class's build of the shipped recipe", False, bool),
    ),
)


def main(argv=None):
    args = COMMAND.parse(argv)
    if args.ship and not args.rebuild:
        raise SystemExit("error: ship=true writes a rebuilt pair into the package: add rebuild=true")
    if args.record and not (args.rebuild and shipped.holds(spec_hash(SPEC))):
        raise SystemExit(
            "error: record=true records a rebuild of the shipped recipe as this CPU class's build: add rebuild=true"
            if shipped.holds(spec_hash(SPEC))
            else "error: record=true records a rebuild of the shipped recipe, and the recipe (recipes.SPEC) is not "
            "the shipped one: ship its pair with rebuild=true ship=true (which records it)"
        )
    start = time.time()
    folder = ensure_pair(args.cache_dir, rebuild=args.rebuild)
    quality = json.loads((folder / "quality.json").read_text())
    built_now = (folder / "quality.json").stat().st_mtime >= start and args.rebuild
    print(folder)
    print(textwrap.fill(format_quality(quality, built_now), 120, subsequent_indent="  ", break_on_hyphens=False))
    for rel, digest in shipped.weight_hashes(folder).items():
        print(f"  {rel}  sha256 {digest}")
    if args.ship:
        shutil.rmtree(shipped.FOLDER, ignore_errors=True)
        shutil.copytree(folder, shipped.FOLDER, ignore=shutil.ignore_patterns("manifest.json"))
        shipped.record_build(folder, cpu_class())
        print(f"shipped: {shipped.FOLDER}, recorded as the {cpu_class()} class's build ({shipped.CLASS_BUILDS})")
    elif args.rebuild and shipped.holds(spec_hash(SPEC)):
        sys.exit(compare_with_record(folder, args.record))


def compare_with_record(folder, record: bool) -> int:
    """Say whether the rebuild in `folder` is this CPU class's recorded build of the shipped recipe (after
    recording it, with `record`); the exit status: 0 when it is."""
    here, built = cpu_class(), shipped.built_on()
    if record:
        shipped.record_build(folder, here)
        print(f"recorded as the {here} class's build ({shipped.CLASS_BUILDS})")
    expected = shipped.class_builds().get(here)
    if expected is None:
        print(
            f"no build of this recipe is recorded for CPUs of class {here} (kernels.CPU_CLASSES), so this rebuild "
            f"cannot be checked here; the package ships the {built} class's build, which decodes the same table "
            "here. `rebuild=true record=true` records this one"
        )
        return 1
    differ = shipped.differences(folder, expected["files"])
    if differ:
        print(
            f"the rebuild differs from the {here} class's recorded build (on {expected['cpu']}, torch "
            f"{expected['torch']}) in {', '.join(differ)}: this CPU or torch build does not reproduce it (report "
            "it with `python -m torch.utils.collect_env`)"
        )
        return 1
    if here == built:
        print("the rebuild is byte for byte the shipped pair")
    else:
        print(
            f"the rebuild is byte for byte the {here} class's recorded build (on {expected['cpu']}); the package "
            f"ships the {built} class's build (kernels.CPU_CLASSES: the classes train other bytes), which "
            "decodes the same table here"
        )
    return 0


if __name__ == "__main__":
    main()
