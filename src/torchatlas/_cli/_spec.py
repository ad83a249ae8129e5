"""What the command line's model loading shares: the ``hf:`` names and tasks, the loaded
model, the two errors a spec can raise and the status line. ``_models`` and ``_hf`` both
import it, so neither imports the other at import time."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

HF_PREFIX = "hf:"

# The transformers Auto class for each task name accepted after ``hf:<type>/`` or by ``--task``.
HF_TASKS: dict[str, str] = {
    "base": "AutoModel",
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
    "question-answering": "AutoModelForQuestionAnswering",
    "image-classification": "AutoModelForImageClassification",
    "speech-seq2seq": "AutoModelForSpeechSeq2Seq",
}


class SpecError(Exception):
    """The command line names a model, file, field or shape that is not there or malformed."""


class ModelError(Exception):
    """The model was found but fails to import, build, or accept its inputs."""


@dataclass
class LoadedModel:
    """A built model and what the spec offers for calling it."""

    model: Any
    spec: str
    example_input: Callable[[], Any] | None = None
    """The spec's own ``example_input()``, used when the command line gives no inputs."""


Status = Callable[[str], AbstractContextManager[Any]]
"""Shows what is being done (``building hf:llama (536M params)…``) while the block runs."""


def no_status(text: str) -> AbstractContextManager[Any]:
    return nullcontext()
