"""The TLS context of the sidecar's own HTTP clients (the forward, webhooks, the model
endpoint's upstreams), made once, and only when one of them has an ``https`` URL; and the
import of aiohttp that leaves out what they do not use.

aiohttp makes two TLS contexts when it is imported, each holding the system's CA certificates
(some 2 MB of an idle sidecar), for requests that pass no context of their own. The sidecar's
clients always pass their own: :func:`import_aiohttp` imports aiohttp with the CA locations
(``SSL_CERT_FILE``, ``SSL_CERT_DIR``) pointing nowhere, so those two contexts hold none and a
request that used them would fail verification rather than pass unverified; the environment is
as it was once the import is done, so :func:`client_context` reads the CAs, the system's or
those ``SSL_CERT_FILE``/``SSL_CERT_DIR`` name, when it is first made.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
import sys
from collections.abc import Iterable

CA_LOCATIONS = ("SSL_CERT_FILE", "SSL_CERT_DIR")
NOWHERE = os.path.join(os.devnull, "none")  # a path nothing can be at
# frozenlist (aiohttp's signals' lists, read a few times a request) in Python, not its compiled
# module: 1.1 MB less resident
IMPORT_SETTINGS = {"FROZENLIST_NO_EXTENSIONS": "1"}


def import_aiohttp() -> None:
    """Imports aiohttp (once; the first import in the process is the one that counts) with
    no CA certificates in its own contexts, and frozenlist without its compiled module."""
    if "aiohttp" in sys.modules:
        return
    settings = {**dict.fromkeys(CA_LOCATIONS, NOWHERE), **IMPORT_SETTINGS}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        import aiohttp  # noqa: F401
    finally:
        for name, value in saved.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


@functools.cache
def client_context() -> ssl.SSLContext:
    """Verifies servers against the system's CAs (or those ``SSL_CERT_FILE``/``SSL_CERT_DIR``
    name), with their host names; HTTP/1.1 over ALPN, as aiohttp's own."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


async def context_for(urls: Iterable[str]) -> ssl.SSLContext | bool:
    """What a client of ``urls`` passes aiohttp as ``ssl``: :func:`client_context` when any of
    them is ``https`` (made in a thread: it reads the CA files), else True (aiohttp's own
    context, which holds no CAs: a TLS request fails verification)."""
    if any(url.lower().startswith("https:") for url in urls):
        return await asyncio.to_thread(client_context)
    return True
