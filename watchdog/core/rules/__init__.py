"""Rules: YAML rule packs (load, validate), CEL expressions (compile), and the engine that
evaluates them per run (for / repeat / grace) into decisions. Pure: ``now`` is an argument."""
