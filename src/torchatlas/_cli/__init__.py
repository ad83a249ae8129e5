"""The ``torchatlas`` command, built on the public API (``import torchatlas``) and the floor
(``_io``, ``_text``) only: ``_main`` parses and writes, ``_models`` loads a model spec and makes
its inputs, ``_hf`` builds ``hf:`` models, ``_parallel`` shards for ``--tp``/``--fsdp``, and
``_spec`` holds what those share."""

from ._main import EXIT_MODEL_FAILED, EXIT_NONFINITE, EXIT_USAGE, main

__all__ = ["EXIT_MODEL_FAILED", "EXIT_NONFINITE", "EXIT_USAGE", "main"]
