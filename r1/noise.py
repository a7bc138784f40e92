"""Known, harmless library messages that a normal run does not show (``--verbose`` keeps them).

Each was read in the library's source and is benign here: DeepSpeed's "Setting accelerator to
CPU" on a machine without a GPU (it is the CPU we asked for); the Trainer's missing
``lm_head.weight`` after a resume of a model with tied embeddings (the head *is* the embedding,
which was loaded); its "mtime may not be reliable" when two checkpoints were saved within a
second (it then orders them by step, which is what we want); transformers' deprecation of the
``past_key_values`` name inside its own ``generate``; and the load report of a reward model built
from a language model, whose only missing weight is the new ``score`` head (a reward model starts
that way; any other missing weight is still shown).
"""

from __future__ import annotations

import logging
import os
import re

_BENIGN = (
    "Setting accelerator to CPU",
    "There were missing keys in the checkpoint model loaded: ['lm_head.weight']",
    "mtime may not be reliable",
    "`past_key_values`/`cache_params` are deprecated",
)


_MISSING_ROW = re.compile(r"^(\S+)\s*\|\s*MISSING", re.M)


def _new_score_head_only(message: str) -> bool:
    """A ``...ForSequenceClassification LOAD REPORT`` whose only missing weight is ``score.weight``."""
    if "ForSequenceClassification LOAD REPORT" not in message:
        return False
    return _MISSING_ROW.findall(message) == ["score.weight"] and "UNEXPECTED" not in message


class _DropBenign(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (any(m in message for m in _BENIGN) or _new_score_head_only(message))


def quiet_known_noise() -> None:
    """Filter the known messages out of the handlers that print them (idempotent).

    A filter on a handler sees every record that reaches it, children's included (a logger's own
    filters see only what is logged on it by name).
    """
    import torch
    from transformers.utils import logging as hf_logging

    if not torch.cuda.is_available():
        # DeepSpeed's accelerator detection warns when it falls back to the CPU; naming the CPU
        # skips the detection (a user's own DS_ACCELERATOR wins).
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    # TRL prints a console table of sampled completions wherever it logs them to a tracker; the
    # tracker has them, the console gets them under --verbose only.
    import trl.trainer.grpo_trainer as trl_grpo

    trl_grpo.print_prompt_completions_sample = lambda *args, **kwargs: None
    hf_logging.get_logger("transformers")  # creates the library's handler if it has none yet
    loggers = [logging.getLogger(), logging.getLogger("transformers"), logging.getLogger("DeepSpeed")]
    for handler in {h for lg in loggers for h in lg.handlers}:
        if not any(isinstance(f, _DropBenign) for f in handler.filters):
            handler.addFilter(_DropBenign())
