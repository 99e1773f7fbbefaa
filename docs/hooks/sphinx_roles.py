"""MkDocs hook: show the docstrings' Sphinx roles as plain code on the API pages.

The docstrings are numpy style and name other objects with Sphinx roles (``:func:`place```); the
renderer (mkdocstrings) reads them as Markdown, where a role is no markup, so each would show as
``:func:`` before the name. This drops the role and keeps the name as code (``~a.b`` as ``b``, as
Sphinx shows it). Registered under ``hooks`` in mkdocs.yml.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    """The page's HTML with every ``:role:`target``` shown as the code ``target``."""
    return _ROLE.sub(_code, html)
