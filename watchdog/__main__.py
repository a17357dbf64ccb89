"""``python -m watchdog`` is the ``watchdog`` command."""

from watchdog.cli import main

raise SystemExit(main())
