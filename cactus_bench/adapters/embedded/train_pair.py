"""The embedded pair's build in a process of its own, started with the portable kernels (`kernels.py`):

    python -m cactus_bench.adapters.embedded.train_pair build OUT SPEC.json   train the recipe in SPEC.json into OUT
    python -m cactus_bench.adapters.embedded.train_pair fingerprint ROLE      the hash of ROLE's weights after the
                                                                     default recipe's first FINGERPRINT_STEPS

`build.build_portably` and the tests start it through `kernels.run_portably`; started otherwise it refuses,
since its weights would then depend on the CPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from cactus_bench.adapters.embedded.build import FINGERPRINT_STEPS, SPEC, build, prepare, train_role
from cactus_bench.adapters.embedded.kernels import PORTABLE, is_portable


def main(argv: list[str]) -> int:
    if not is_portable():
        settings = " ".join(f"{k}={v}" for k, v in PORTABLE.items())
        print(f"train_pair runs with portable kernels only ({settings}): start it with kernels.run_portably")
        return 2
    torch.use_deterministic_algorithms(True)
    if len(argv) == 3 and argv[0] == "build":
        build(Path(argv[1]), json.loads(Path(argv[2]).read_text()), log=lambda s: print(s, flush=True))
        return 0
    if len(argv) == 2 and argv[0] == "fingerprint":
        role = argv[1]
        _, examples, configs = prepare(SPEC, log=lambda s: None)
        model = train_role(SPEC, role, examples[role], configs[role], log=lambda s: None, stop_after=FINGERPRINT_STEPS)
        print(model.fingerprint)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
