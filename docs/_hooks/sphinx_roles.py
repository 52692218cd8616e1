"""A griffe extension for the API reference: render Sphinx roles as code.

The package's docstrings are Google style with Sphinx cross-reference roles
(``:class:`~taskrunner.backends.Backend```, ``:meth:`serve```), which read well
in the source and in ``help()``. mkdocstrings renders docstrings as Markdown and
would show the role names literally; this turns each role into inline code,
keeping only the last component when the target starts with ``~`` (as Sphinx
does). Many targets are private (``taskrunner._fleet.tuning``), so they are not
turned into links.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj|const):`(~?)\.?([^`]+)`")


def _code(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_code, obj.docstring.value)
