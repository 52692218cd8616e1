"""The services of :meth:`TaskRunner.serve <taskrunner.TaskRunner.serve>`, one module each.

Each module is named after the node of ``serve``'s nursery tree it runs (the
tree is drawn in :mod:`taskrunner._serve.tree`, which runs it), and exposes
one ``async def run(..., *, task_status=trio.TASK_STATUS_IGNORED)``, a function or a method
of the service's object, which calls ``task_status.started()`` once the
service is ready; ``serve`` starts them with ``await nursery.start(...)`` in
dependency order:

- ``heartbeat``: the replication key, and one live instance per host;
- ``catalog``: the tasks this instance serves, published for producers;
- ``leadership``: the lease keeper, and :meth:`Leadership.run_as_leader
  <taskrunner._serve.leadership.Leadership.run_as_leader>` for the
  leader-only jobs (the scheduler's passes, the cleanup);
- ``scheduler``: delayed tasks -> stream, the leader's passes
  (``Scheduler.run``) and every instance's own (``Scheduler.run_local``);
- ``cleanup``: forgetting consumers long gone (leader only);
- ``bulk_writer``: recorded timings -> the metrics hash;
- ``aggregator``: metrics resets, the tuner, the long-queue hook;
- ``sharing``: the other groups that read the stream;
- ``acker``: batched acks (``Acker.run``);
- ``refresher``: keeps long runs from being reclaimed;
- ``canceller``: stops the runs ``TaskRunner.cancel`` asked to stop;
- ``worker``: the workers nursery (``Worker.execute`` runs one message), and its
  drain;
- ``crew``: the worker tasks, long-lived, each running messages in a cancel scope
  of its own (what ``TaskRunner.cancel`` cancels). It has no ``run``: it lives in
  the workers nursery;
- ``fetcher``: reserve pool slots, claim or read, start (inside ``worker``);
- ``pool``: the worker pool's capacity. It is state and has no ``run``;
- ``finishing``: how a run's end is acknowledged (with its result, or as
  cancelled), for the worker. It has no ``run`` either.

Their decisions are pure functions in the concept packages, outside this
package (``_fleet`` (lease, tuning, stats), ``_flow`` (slots, limits, priorities),
``_schedules`` (the delayed scheduler's decisions, ticks), ``_execution`` (backoff,
poison, outcomes)); nothing here is public.
"""
