"""A griffe extension (mkdocs.yml names it) that reads pagesim's reST docstrings as Markdown.

pagesim's docstrings are reST as Sphinx reads it, most of which is Markdown already
(``code`` in double backticks, ``*emphasis*``, lists, indented literal blocks). What is
not is rewritten here, before mkdocstrings renders a docstring:

- a role, ``:func:`pagesim.api.simulate``` or ``:class:`~pagesim.x.RunSpec```, becomes
  inline code of its target (``~`` keeps the last name, as Sphinx shows it);
- a paragraph ending in ``::`` (reST's "a literal block follows") ends in ``:``, and a
  ``::`` after a space, or alone on its line, is dropped.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`]+)`")
LITERAL_MARKER = re.compile(r"(\S)::$", re.M)  # "text::" -> "text:"
LONE_MARKER = re.compile(r"[ \t]*::$", re.M)  # "text ::" -> "text", "::" -> ""


def markdown_of(text: str) -> str:
    """The docstring ``text`` with its Sphinx roles and ``::`` markers rewritten."""

    def role(match: re.Match[str]) -> str:
        tilde, target = match.groups()
        return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"

    text = ROLE.sub(role, text)
    return LONE_MARKER.sub("", LITERAL_MARKER.sub(r"\1:", text))


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_of(obj.docstring.value)
