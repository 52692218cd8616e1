"""The fleet's shared decisions: the leader lease, the worker tuner, autoscaling, timing
statistics.

- :mod:`.lease`: when a leader renews, when a follower knocks, when a term ends (pure);
- :mod:`.tuning`: when tuning is on and which capacity to pick (pure);
- :mod:`.scaling`: how many instances the fleet needs, for an autoscaler (pure);
- :mod:`.stats`: the :class:`~taskrunner.Stats` formulas and the metrics-reset decision (pure);
- :mod:`.timings`: the timing hot path, in memory until the bulk writer takes it.

docs/tuning.md and docs/timing-metrics.md are the pages a user reads.
"""
