"""What a span reads by its instrumentation scope: the conventions with ``scopes``
(:attr:`~watchdog.core.spans.schema.Convention.scopes`) are read on their scopes' spans alone.

Their tables name their attributes by aliases no span carries (:func:`~watchdog.core.spans.
combined.alias`); a span of one of their scopes is read with its attributes also under those
aliases (:func:`with_aliases`), and with their hidden texts as hidden content
(:attr:`ScopeView.hidden`), and the facts their tables name in span events
(``<event>:<attribute>``: :attr:`ScopeView.events`), and a model call's output messages as a
streamed answer's chunks, joined as they came, where such an entry records its answers so
(:attr:`ScopeView.chunked`). Any other span reads none of it: an
application's own ``name`` or ``input``, or a ``[REDACTED]`` of its own, is not read as Logfire's
agent name or tool input, or as Mastra's placeholder for a value it hid, nor a span event named
``assistant_response`` as Claude Code's answer. A view is made once per scope name (bounded).
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from watchdog.core.spans.attributes import HIDDEN_CONTENT
from watchdog.core.spans.combined import TABLES

MAX_SCOPE_VIEWS = 1024  # scope names whose view is kept; then the views are made again


@dataclass(frozen=True, slots=True)
class ScopeView:
    """How the spans of one scope are read."""

    aliases: tuple[tuple[str, str], ...]  # (attribute, its alias): the scoped entries' reads
    hidden: frozenset[str]  # the texts that are hidden content on these spans
    # span event name -> the attributes read from such events on these spans
    events: Mapping[str, frozenset[str]]
    chunked: bool = False  # a model call's output messages are its answer's chunks


UNSCOPED = ScopeView((), HIDDEN_CONTENT, TABLES.events)  # a span no scoped entry is for
_views: dict[str, ScopeView] = {}


def view_of(scope: str) -> ScopeView:
    """The view of the spans of instrumentation scope ``scope`` (its name)."""
    view = _views.get(scope)
    if view is None:
        view = _view(scope)
        if len(_views) >= MAX_SCOPE_VIEWS:
            _views.clear()
        _views[scope] = view
    return view


def _view(scope: str) -> ScopeView:
    aliases: dict[tuple[str, str], None] = {}
    hidden = set(HIDDEN_CONTENT)
    events: dict[str, frozenset[str]] = dict(TABLES.events)
    chunked = False
    for scoped in TABLES.scopes:
        if scope and scope.startswith(scoped.scopes):
            aliases.update(dict.fromkeys(scoped.aliases))
            hidden |= scoped.hidden_content
            for event, attributes in scoped.events.items():
                events[event] = events.get(event, frozenset()) | attributes
            chunked = chunked or scoped.chunked_answers
    if not aliases and len(hidden) == len(HIDDEN_CONTENT) and events == dict(TABLES.events) \
            and not chunked:
        return UNSCOPED
    return ScopeView(tuple(aliases), frozenset(hidden), MappingProxyType(events), chunked)


def with_aliases(attrs: Mapping[str, object], view: ScopeView) -> Mapping[str, object]:
    """``attrs`` with each attribute a scoped entry of the span's scope reads also under its
    alias (``attrs`` itself when it carries none of them)."""
    found = {alias: attrs[name] for name, alias in view.aliases if name in attrs}
    return {**attrs, **found} if found else attrs
