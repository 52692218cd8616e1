"""A web dashboard for a taskrunner fleet: ``taskrunner dashboard``, or
:func:`create_app` mounted in your own ASGI app (needs the ``dashboard`` extra).

See the "Dashboard" page of the docs for the pages, the routes and their
``/api/`` twins, and what keeps it safe to leave open.
"""

from taskrunner.dashboard._app import create_app
from taskrunner.dashboard._safety import TOKEN_ENV, redact_url
from taskrunner.dashboard._sampler import Sampler

__all__ = ["TOKEN_ENV", "Sampler", "create_app", "redact_url"]
