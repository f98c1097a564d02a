"""``python -m queuegate``: the operator's console (same as ``queuegate``)."""

from .cli import main

raise SystemExit(main())
