"""``python -m dispatcher``: the same entry point as the ``multikueue-dispatcher`` script."""

from __future__ import annotations

from dispatcher.cli import main

raise SystemExit(main())
