"""The model endpoint's sans-IO half (DESIGN §12): the sidecar as the agent's model API.

``wire`` and one module per API (``chat``, ``messages``, ``responses``) read and edit the wire
format; ``book`` gives each call its run and turns it into records; ``steer`` decides what a
request gets; ``failure`` shapes the answers the endpoint makes itself. The aiohttp half is
``watchdog.shell.model``.
"""
