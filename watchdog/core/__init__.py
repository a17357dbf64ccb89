"""The pure core: records in, frozen run views and decisions out. No sockets, no files, no
threads, no wall clock (``now`` is an argument). Nothing here imports ``watchdog.shell``."""
