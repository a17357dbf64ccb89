"""Run state: span records in, per-run signals and lifecycle out. Pure: no IO, no clock."""
