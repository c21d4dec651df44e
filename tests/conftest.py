import os
import sys
from pathlib import Path

# Offline by construction: hub ids fail at once instead of retrying for ~30 s; wandb never phones home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).parent))  # test helpers (reference_laws, stats)
