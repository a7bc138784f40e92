"""Prefect flows: thin wiring of stages. Importing this package turns Prefect's telemetry off.

Prefect reads these at import time, so they are set before any flow module imports it; a value
the user already exported wins.
"""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import warnings  # noqa: E402

# transformers 5.24 renamed gradient_checkpointing; the old name is what 5.17 (vLLM's pin) knows.
warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)
