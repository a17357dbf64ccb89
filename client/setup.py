"""The one part of the build pyproject.toml does not say in a stable form: the client's span
path in C (``agent_watchdog_client/_spanpath.c``, see ``agent_watchdog_client/processor.py``),
optional — without a compiler the package installs without it and the same path runs in Python.
The rest of the distribution's metadata is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("agent_watchdog_client._spanpath",
                             ["agent_watchdog_client/_spanpath.c"], optional=True)])
