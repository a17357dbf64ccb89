"""Framework adapters: put the watchdog's directives into the framework's own mechanisms —
dynamic instructions for the budget countdown and wind-down, the framework's exception path
for an abort. Each adapter imports its framework; the client core imports neither."""
