"""The producer side: from ``dispatch`` to a queued message, and tasks followed by id.

- :mod:`.api`: ``TaskRunner.dispatch`` and its siblings, ``get_task`` and ``cancel``: the
  public methods (a base of :class:`~taskrunner.TaskRunner`), their docstrings the contract;
- :mod:`.dispatcher`: the runner's :class:`~taskrunner._dispatch.dispatcher.Dispatcher`
  (``dispatch``, ``dispatch_many``, ``dispatch_delayed``, ``schedule_for``);
- :mod:`.enqueue`: what a dispatch sends, planned (encoded once) before anything is sent
  (the :class:`~taskrunner._dispatch.enqueue.Planner`, shared with the producers);
- :mod:`.guards`: the first mistakes a new user makes, as one-line errors;
- :mod:`.handle`, :mod:`.tracker`, :mod:`.results`: the handle a dispatch returns, lookup
  and cancellation by id, and what a kept result gives whoever waits for it;
- :mod:`.routing`: which shard of a sharded group a dispatch goes to (pure);
- :mod:`.dead`: dead letters as an operator sees them, and what replaying one dispatches.

docs/dispatching.md and docs/results.md are the pages a user reads.
"""
