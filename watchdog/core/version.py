"""The sidecar's version. It lives here, not only in ``watchdog/__init__.py``: the
filesystem-events library ``watchdog`` (which google-adk and strands install) writes an empty
``watchdog/__init__.py`` of its own into the same directory when both are installed in one venv,
and the sidecar reads its version from a module that only it installs."""

__version__ = "0.2.0"
