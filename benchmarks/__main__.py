"""``python -m benchmarks``: the speed benchmark (see benchmarks/speed.py)."""

from .speed import main

raise SystemExit(main())
