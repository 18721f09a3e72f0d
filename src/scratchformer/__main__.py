"""``python -m scratchformer`` (what ``torchrun -m scratchformer`` runs)."""

import sys

from .cli import main

sys.exit(main())
