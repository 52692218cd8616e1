"""Delayed tasks and periodic schedules (docs/periodic-tasks.md).

- :mod:`.api`: ``TaskRunner.add_schedule``, ``TaskRunner.periodic`` and ``schedules`` (a base
  of :class:`~taskrunner.TaskRunner`), their docstrings the contract;
- :mod:`.delayed`: the delayed-task scheduler's decisions: what a due member becomes and
  how long to sleep (pure);
- :mod:`.periodic`: what a periodic schedule is, its published document, the tick a run
  serves;
- :mod:`.ticks`: tick arithmetic (cron and intervals, across DST changes; pure);
- :mod:`.view`: the rows ``taskrunner.admin.schedules`` and ``taskrunner schedules`` show.

The leader's services that act on these are :mod:`taskrunner._serve.scheduler` and
:mod:`taskrunner._serve.periodic`.
"""
