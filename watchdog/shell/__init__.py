"""The shell: everything that does IO, around the pure core. Receivers and the model endpoint
feed the service; the service steps the core and hands what it returns to the state lanes,
directive delivery and metrics; the API and the CLI read through narrow interfaces."""

from watchdog.shell.tls import import_aiohttp

import_aiohttp()  # first, so that its own TLS contexts hold no CAs (watchdog/shell/tls.py)
