"""The model endpoint (DESIGN §12): the sidecar as the agent's model API.

``wire`` and one module per API (``chat``, ``messages``, ``responses``) read and edit the wire
format; ``book`` gives each call its run and turns it into records; ``steer`` decides what a
request gets; ``proxy`` is the aiohttp shell.
"""
