"""``python -m planner``."""

from .cli import main

raise SystemExit(main())
