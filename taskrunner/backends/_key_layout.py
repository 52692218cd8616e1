"""The key layout a backend names its keys by (see :mod:`taskrunner._keys`).

Theory of operation. A backend is built before anyone knows where it runs:
whether its server is a Redis Cluster is found at connect (``cluster``, set by
the backend's client; always false for :class:`MemoryBackend` and a
standalone server). The layout is asked for by the backend's constructor
(``key_layout=``) or by the first runner that meets it
(``TaskRunnerConfig.key_layout``, :meth:`KeyLayoutHolder.use_key_layout`);
when nobody asked, it is the backend's choice, ``"cluster"`` on a cluster and
``"go"`` elsewhere. :attr:`KeyLayoutHolder.key_layout` resolves it each time
it is read (two comparisons), so a backend that learns it is on a cluster
names its keys for one from then on, and ``"go"`` on a cluster is refused
where it would be used.
"""

from __future__ import annotations

from taskrunner import _keys
from taskrunner._keys import KeyLayout

__all__ = ["KeyLayoutHolder", "learn_key_layout"]


async def learn_key_layout(backend: object) -> None:
    """Let ``backend`` find out whether it is on a cluster (``detect_cluster``, which a
    backend of one's own may lack), so the keys it names next are in the right layout."""
    detect = getattr(backend, "detect_cluster", None)
    if detect is not None:
        await detect()


class KeyLayoutHolder:
    """The ``cluster`` flag and the key layout of a backend (a mixin of both backends)."""

    _cluster = False
    _requested_layout: KeyLayout | None = None
    _resolved_layout: KeyLayout | None = None
    """:attr:`key_layout`, once resolved; forgotten when ``cluster`` or the request changes."""

    def _init_key_layout(self, key_layout: KeyLayout | None) -> None:
        if key_layout is not None:
            _keys.resolve_layout(key_layout, cluster=False)  # refuses an unknown name now
        self._requested_layout = key_layout
        self._resolved_layout = None

    def _detected_cluster(self) -> bool | None:
        """Whether the backend's client found a cluster; ``None`` while it has not asked
        the server yet (a backend that detects at its first call overrides this)."""
        return False

    async def detect_cluster(self) -> bool:
        """Ask the server now whether it is a cluster, if the client has not yet (a
        runner does before it serves and before its first dispatch, so no key is
        named in a layout the server then turns out not to take)."""
        return self.cluster

    @property
    def cluster(self) -> bool:
        """Whether the server is a Redis Cluster (set, or found by the client at connect)."""
        return self._cluster or bool(self._detected_cluster())

    @cluster.setter
    def cluster(self, value: bool) -> None:
        self._cluster = bool(value)
        self._resolved_layout = None

    @property
    def key_layout(self) -> KeyLayout:
        """The layout this backend names keys by: the one asked for, else ``"cluster"``
        on a cluster and ``"go"`` elsewhere.

        Raises:
            KeyLayoutError: ``"go"`` was asked for and the server is a cluster.
        """
        layout = self._resolved_layout  # read for every key built: resolved once
        if layout is None:
            detected = self._detected_cluster()
            cluster = self._cluster or bool(detected)
            layout = _keys.resolve_layout(self._requested_layout, cluster=cluster)
            if detected is not None:  # kept once the client knows what it talks to
                self._resolved_layout = layout
        return layout

    def use_key_layout(self, key_layout: KeyLayout | None) -> KeyLayout:
        """Ask for ``key_layout`` (``None``: the backend's choice), and return the one in use.

        Raises:
            KeyLayoutError: an unknown layout, ``"go"`` on a cluster, or another
                layout than the one this backend was given (a backend names its
                keys one way for everyone sharing it).
        """
        if key_layout is not None:
            resolved = _keys.resolve_layout(key_layout, cluster=self.cluster)
            if self._requested_layout is not None and self._requested_layout != resolved:
                raise _keys.KeyLayoutError(
                    f"key_layout {key_layout!r} differs from the backend's "
                    f"key_layout {self._requested_layout!r}; give both the same"
                )
            self._requested_layout = resolved
            self._resolved_layout = None
        return self.key_layout
