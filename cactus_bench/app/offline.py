"""No network, no waiting: a run on a machine that cannot reach the Hugging Face hub switches the hub and
`datasets` to offline mode at once (instead of tens of seconds of retries per file), reads the benchmark
files from the local copy beside the checkout when no data folder is set, and names in one paragraph every
model and dataset that is not here, with the setting that fixes each."""

from __future__ import annotations

import logging
import os
import socket
import sys
from urllib.parse import urlparse

from cactus_bench.app.schema import PROJECT_DIR

log = logging.getLogger("cactus_bench")
LOCAL_DATA = PROJECT_DIR.parent / "shared" / "data"  # the layout docs/usage.md documents (../shared/data)
PROBE_TIMEOUT_S = 2.0


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the hub's host answers a TCP connection within `timeout` (a failed DNS lookup answers at once)."""
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE") == "1"


def go_offline_without_network() -> None:
    """Before the hub's libraries are imported (they read the switch once): offline mode when the hub cannot
    be reached. A set HF_HUB_OFFLINE is left as it is."""
    if "HF_HUB_OFFLINE" in os.environ or hub_reachable():
        return
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    # printed: this runs before the app's logging is set up
    print("the Hugging Face hub cannot be reached: running offline (HF_HUB_OFFLINE=1)", file=sys.stderr)


def use_local_data(cfg) -> None:
    """Offline with no data folder set: the local copy of the benchmark files, when there is one."""
    if is_offline() and cfg.paths.data is None and cfg.data.get("root", None) is None and LOCAL_DATA.is_dir():
        cfg.paths.data = str(LOCAL_DATA)
        log.info("offline: reading the benchmark files from %s (paths.data)", LOCAL_DATA)
