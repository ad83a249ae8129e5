"""``python -m torchatlas``: the same as the ``torchatlas`` command."""

import sys

from ._cli import main

sys.exit(main())
