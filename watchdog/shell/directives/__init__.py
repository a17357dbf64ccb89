"""Directives: decisions turned into numbered, persisted messages to an agent, delivered by
long-poll, Server-Sent Events and signed webhooks. Stored before they are sent."""
