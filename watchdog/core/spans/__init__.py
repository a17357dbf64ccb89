"""From OTLP bytes to span records: decoding (``decode``, ``codings``), the conventions as data
(``schema``, ``instrumentations``, ``frameworks``, combined in ``combined``), the normaliser that
reads them (``conventions`` and the modules it dispatches to, ``outcome``) and the pipeline that
applies them."""
