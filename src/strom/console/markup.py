"""HTML that cannot forget to escape: ``Markup`` is text already safe to put in a page; everything
else is escaped when it is put in one.

Topic names, keys, values, headers, group and member ids, client ids and hosts come from the
cluster and are attacker-controlled. Pages are built only with ``html()`` (a template whose
``{}`` fields are escaped unless they are ``Markup``) and ``join()``, never by adding strings, so
a value is escaped exactly once wherever it lands (element text or a quoted attribute).
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable
from urllib.parse import urlencode

__all__ = ["Markup", "escape", "html", "join", "url"]


class Markup(str):
    """Text that is HTML already (built by ``html``/``join``, or a constant of the console)."""

    __slots__ = ()


def escape(value: object) -> Markup:
    """``value`` as HTML text, safe in element content and in a double- or single-quoted
    attribute (``&``, ``<``, ``>``, ``"`` and ``'`` are escaped); ``Markup`` passes unchanged."""
    if isinstance(value, Markup):
        return value
    return Markup(_html.escape(str(value), quote=True))


def html(template: str, *values: object) -> Markup:
    """``template`` (a constant of the console, with ``{}`` fields) with each value escaped."""
    return Markup(template.format(*(escape(value) for value in values)))


def join(parts: Iterable[object], separator: str = "") -> Markup:
    return Markup(separator.join(escape(part) for part in parts))


def url(path: str, **query: object) -> str:
    """A link to one of the console's pages: ``path`` is the console's own; the query values
    (names from the cluster) are percent-encoded. The result still goes through ``html``."""
    pairs = [(key, str(value)) for key, value in query.items() if value is not None and value != ""]
    return path + ("?" + urlencode(pairs) if pairs else "")
