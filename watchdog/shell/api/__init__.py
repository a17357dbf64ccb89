"""The control API (DESIGN §7): the app and its middlewares (``app``), the routes by resource
(``runs``, ``sessions``, ``directives``, ``rules``), what the routes share (``http``) and what
they ask of the watchdog (``interface``)."""
