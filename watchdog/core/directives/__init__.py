"""What a decision says to an agent: the directive (``model``) and its prompt text (``prompt``).
Delivery (store, hub, outbox, webhooks) is the shell's: ``watchdog.shell.directives``."""
