"""State on disk: the SQLite store, the writer that persists what the core changed, the API's
read queries, and the worker lanes they run on (the event loop never waits for the disk)."""
