"""From OTLP bytes to span records: decoding (``decode``, ``codings``), the conventions as data
(``conventions``, ``frameworks``, ``outcome``) and the pipeline that applies them."""
