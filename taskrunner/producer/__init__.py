"""Dispatch from anywhere: sync and asyncio producers that send tasks by name.

A producer needs neither trio nor the workers' code: it writes the same
messages, to the same stream and keys, as ``TaskRunner.dispatch`` of the same
consumer group, through redis-py (:class:`Producer`, for sync code: Django,
Flask, scripts, threads) or redis.asyncio (:class:`AsyncProducer`, for
FastAPI, Starlette, aiohttp)::

    from taskrunner.producer import Producer

    producer = Producer.from_url("redis://localhost:6379/0", consumer_group="shop")
    handle = producer.dispatch("resize", {"w": 100})
    handle.result(timeout=10)   # when the task keeps results (keep_result)
    producer.cancel(handle.id)

See docs/dispatching.md ("Dispatching from your application").
"""

from taskrunner.errors import ResultTimeout as ResultTimeout
from taskrunner.producer._async import AsyncProducer as AsyncProducer
from taskrunner.producer._handles import AsyncProducerHandle as AsyncProducerHandle
from taskrunner.producer._handles import ProducerHandle as ProducerHandle
from taskrunner.producer._sync import Producer as Producer

__all__ = ["AsyncProducer", "AsyncProducerHandle", "Producer", "ProducerHandle", "ResultTimeout"]
