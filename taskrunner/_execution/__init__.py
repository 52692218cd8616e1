"""The life of one run (docs/life-of-a-run.md): from a delivered message to its outcome.

- :mod:`.action`: how an action is called (async, or plain ``def`` in a thread);
- :mod:`.context`, :mod:`.lifespan`, :mod:`.middleware`: what a run knows, the resources
  opened once per ``serve``, and what wraps every run;
- :mod:`.retry`, :mod:`.backoff`: what a failed attempt leads to, and its delay (pure);
- :mod:`.outcomes`: what a finished run leaves beside its ack;
- :mod:`.poison`: how many deliveries an entry may have before it is decoded;
- :mod:`.inflight`: the runs being worked on, their refresh times and how to stop each;
- :mod:`.hooks`: calling user hooks, never fatal to the runner.

The services that drive a run (fetcher, worker, acker) are under :mod:`taskrunner._serve`.
"""
