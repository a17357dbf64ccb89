"""``python -m watchdog`` is the ``watchdog`` command."""

from watchdog.shell.cli import main

raise SystemExit(main())
