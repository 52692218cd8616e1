"""Flow control (docs/flow-control.md): queues, priorities and fleet-wide limits.

- :mod:`.limits`: rate limits, pauses, and how long a run held back waits (pure);
- :mod:`.priorities`: how a fetcher of several queues shares one read among them;
- :mod:`.slots`: how many pool slots a fetcher reserves before it reads.

The gate every run passes is :mod:`taskrunner._serve.gate`; the store's side is the
:class:`~taskrunner.backends.FlowControl` protocol.
"""
