import importlib.util
import os

# Offline by construction: hub ids fail at once instead of retrying for ~30 s; wandb never phones home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

from cactus_bench.adapters.embedded.install import ensure_pair  # noqa: E402

from .helpers.paths import DATA, SMALL_SPEC  # noqa: E402

os.environ.setdefault("CACTUS_BENCH_DATA", str(DATA))
os.environ.setdefault("NLTK_DATA", str(DATA / "nltk_data"))


@pytest.fixture(scope="session")
def small_pair_dir(tmp_path_factory):
    """A tiny trained pair (drafter/, verifier/ folders), built once per test session."""
    return ensure_pair(tmp_path_factory.mktemp("pair-cache"), spec=SMALL_SPEC, log=lambda s: None)


# The vLLM tier's folder needs vLLM, which lives in its own venv (`make test-vllm`): not collected without it.
collect_ignore = [] if importlib.util.find_spec("vllm") else ["vllm"]
