"""The pure core: records in, frozen run views and decisions out. No sockets, no threads, no
database, no clock (``now`` is an argument); the only files it reads are the rule packs and rule
tests it is handed. Nothing here imports ``watchdog.shell``."""
