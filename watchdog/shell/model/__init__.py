"""The model endpoint's aiohttp half: the proxy to the configured upstreams and the headers it
keeps or drops. What a request gets is decided by ``watchdog.core.model``."""
