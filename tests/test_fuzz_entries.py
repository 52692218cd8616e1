"""Issue 10, point 3: arbitrary stream entries never stop a serving runner.

Hypothesis writes batches of entries straight into the stream of a runner
that keeps serving across the whole run (dispatch is bypassed): random bytes,
JSON nested deeper than the decoder allows, multi-megabyte documents,
5000-digit numbers, fields of the wrong type, missing and extra fields, bytes
that are not UTF-8, lone surrogates in every string field, unique flags with
odd keys. The runner has a plain task, a unique task, a typed-payload task and
a task that always raises, so every path of the worker is taken. On Redis the
entries are raw ``XADD``\\ s, so they can also lack the ``payload`` field, carry
other fields, or carry it twice.

After each batch: ``serve`` is still running, every entry either completed or
was dead-lettered with a reason, and nothing is pending.

Hypothesis runs in a worker thread and hands each batch to the trio loop
(``trio.from_thread.run``), so one runner serves every example. It is
derandomized (the same examples on every run) and bounded, for CI. The memory
version runs on trio's MockClock, which only moves while a batch is checked;
the Redis version on a real server.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from _fleet import make_runner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskrunner import TaskRunner
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend

# The runner serving in the trio thread draws from ``random`` (lease and backoff
# jitter) while hypothesis generates a batch in its own thread; hypothesis takes
# that for a strategy using ``random``. Ours do not.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies"
    ":hypothesis.errors.HypothesisDeprecationWarning"
)

TASKS = ["plain", "unique", "typed", "fails"]
MEMORY_EXAMPLES = 200
REDIS_EXAMPLES = 80

# Strategies -------------------------------------------------------------------------

LONE_SURROGATES = st.sampled_from(["\udc80", "a\ud800b", "\udfff", "x\udc80y\ud83d"])
odd_text = st.one_of(
    st.text(st.characters(categories=["Cs", "L", "N", "P", "S", "Zs"]), max_size=12),
    LONE_SURROGATES,
    st.sampled_from(TASKS),
)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        odd_text,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(odd_text, children, max_size=4)
    ),
    max_leaves=10,
)
sizes = st.fixed_dictionaries({"width": json_values, "height": json_values})
documents = st.fixed_dictionaries(
    {},
    optional={
        "task_name": st.one_of(st.sampled_from(TASKS), odd_text, json_values),
        "payload": st.one_of(json_values, sizes, st.just({"width": 3, "height": 4})),
        "unique": st.one_of(st.booleans(), json_values),
        "unique_for": st.one_of(st.integers(-5, 10**20), st.floats(), json_values),
        "unique_key": st.one_of(odd_text, json_values, st.just("unique:\udc80")),
        "unique_lock_value": st.one_of(odd_text, json_values),
        "reservation_timeout": st.one_of(st.integers(), st.floats(), json_values),
    },
).flatmap(
    lambda doc: st.dictionaries(odd_text, json_values, max_size=2).map(
        lambda extra: {**extra, **doc}
    )
)
# Well-formed messages of the registered tasks, odd unique fields included, so that
# the paths past decoding (typed payloads, unique locks, the action) are taken.
messages = st.fixed_dictionaries(
    {
        "task_name": st.sampled_from(TASKS),
        "payload": st.one_of(
            json_values, st.fixed_dictionaries({"width": st.integers(), "height": st.integers()})
        ),
    },
    optional={
        "unique": st.booleans(),
        "unique_for": st.integers(0, 100),
        "unique_key": st.one_of(odd_text.map(lambda key: f"unique:{key}"), odd_text),
        "unique_lock_value": odd_text,
    },
)
DEEP = b"[" * 100_000
SPECIALS = [
    DEEP,
    b'{"task_name":"plain","payload":' + DEEP + b"}",
    b'{"task_name":"typed","payload":{"width":' + b"[" * 900 + b"]" * 900 + b',"height":1}}',
    b'{"task_name":"plain","payload":' + b"9" * 5000 + b"}",
    b'{"task_name":"unique","unique":true,"unique_for":1' + b"0" * 5000 + b"}",
    b'{"task_name":"plain","unique_for":1e308,"reservation_timeout":-1e308}',
    b'{"task_name":"plain","payload":"' + b"x" * 1_000_000 + b'"}',  # big but allowed
    b'{"task_name":"plain","payload":"' + b"x" * 9_000_000 + b'"}',  # over the 8 MiB limit
    b'{"task_name":"plain","task_name":"unique"}',  # duplicate keys: the last one wins
    b'{"task_name":"plain","payload":',  # truncated
    b'{"task_name":"\\udc80","payload":"\\ud800"}',
    b'{"task_name":"unique","unique":true,"unique_lock_value":"t","unique_key":"unique:\\udc80"}',
    b'{"task_name":"pla\xffin"}',  # not UTF-8
    b"",
]


def special(index: int) -> bytes:
    return SPECIALS[index]


raw_payloads = st.one_of(
    messages.map(lambda doc: json.dumps(doc).encode()),
    documents.map(lambda doc: json.dumps(doc).encode()),  # surrogates escaped: valid JSON
    # surrogates written raw: bytes that are not UTF-8
    documents.map(lambda doc: json.dumps(doc, ensure_ascii=False).encode(errors="surrogatepass")),
    st.binary(max_size=64),
    st.integers(0, len(SPECIALS) - 1).map(special),  # by index: the strategy's repr stays small
)
# Field lists of one entry (an XADD needs at least one pair).
well_formed = messages.map(lambda doc: [b"payload", json.dumps(doc).encode()])
entry_fields = st.one_of(
    well_formed,  # twice: about a third of the entries are well-formed messages
    well_formed,
    raw_payloads.map(lambda raw: [b"payload", raw]),
    st.tuples(st.binary(max_size=8), raw_payloads).map(lambda t: [b"x", t[0], b"payload", t[1]]),
    st.tuples(raw_payloads, raw_payloads).map(lambda t: [b"payload", t[0], b"payload", t[1]]),
    raw_payloads.map(lambda raw: [b"other", raw]),
)


@st.composite
def batches(draw: st.DrawFn) -> list[list[bytes]]:
    """One batch of entries' field lists. A composite, for its repr (``batches()``): when
    the serving runner draws from ``random`` while hypothesis generates, hypothesis warns
    (see pytestmark) with the strategy's repr in the message, and the repr of the whole
    strategy tree is 73 kB, which raised a second warning ("Generating overly large
    repr") that pytestmark does not ignore: under load, now and then, the example
    failed and did not fail again when hypothesis replayed it (a FlakyFailure)."""
    return draw(st.lists(entry_fields, min_size=1, max_size=8))


# The runner under test --------------------------------------------------------------


@attrs.frozen
class Size:
    width: int
    height: int


def build(backend: Backend, **config: Any) -> tuple[TaskRunner, list[object]]:
    runner = make_runner(backend, num_workers=4, **config)
    ran: list[object] = []

    @runner.task()
    async def plain(payload: Any) -> None:
        ran.append(payload)

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: str(p))
    async def unique(payload: Any) -> None:
        ran.append(payload)

    @runner.task()
    async def typed(payload: Size) -> None:
        ran.append(payload)

    @runner.task()
    async def fails(payload: Any) -> None:
        raise RuntimeError(f"fails on {payload!r}")

    return runner, ran


AddEntry = Callable[[list[bytes]], Awaitable[str]]
ForgetDeadLetters = Callable[[], Awaitable[None]]


async def check_batch(
    runner: TaskRunner,
    add: AddEntry,
    forget: ForgetDeadLetters,
    batch: Sequence[list[bytes]],
    limit: float,
) -> None:
    """Add ``batch``, wait until each entry has an outcome, check the outcomes."""
    backend = runner.backend
    before = runner.statistics()
    ids = [await add(fields) for fields in batch]
    with trio.fail_after(limit):
        while runner.statistics().acked - before.acked < len(ids):  # noqa: ASYNC110
            await trio.sleep(0.01)
    after = runner.statistics()
    assert after.serving
    completed = after.completed - before.completed
    dead_lettered = after.dead_lettered - before.dead_lettered
    assert completed + dead_lettered == len(ids) == after.acked - before.acked
    letters = {d.message_id: d for d in await backend.dead_letters("g", 1_000_000)}
    for entry_id in ids:
        if entry_id in letters:
            assert letters[entry_id].error, f"dead letter of {entry_id} has no reason"
            assert len(letters[entry_id].error) < 1200, "the reason must be readable"
    assert sum(entry_id in letters for entry_id in ids) == dead_lettered
    assert (await backend.group_info("g")).pending == 0
    assert await backend.length("g") == 0
    await forget()  # so the next batch does not read this one's (multi-megabyte) letters


Check = Callable[[list[list[bytes]]], Awaitable[None]]


async def fuzz(runner: TaskRunner, check: Check, examples: int) -> None:
    """Serve ``runner`` while hypothesis feeds ``check`` ``examples`` batches from a thread."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(batch=batches())
    def one_batch(batch: list[list[bytes]]) -> None:
        trio.from_thread.run(check, batch)

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.to_thread.run_sync(one_batch)
        stats = runner.statistics()
        assert stats.serving
        print(f"\n{stats.acked} entries: {stats.completed} completed, ", end="")
        print(f"{stats.dead_lettered} dead-lettered")
        nursery.cancel_scope.cancel()


async def test_arbitrary_entries_on_memory(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner, _ = build(backend, reclaim_delay=30)

    async def add(fields: list[bytes]) -> str:
        # The in-memory stream keeps only the ``payload`` field (the last one given).
        pairs = dict(zip(fields[::2], fields[1::2], strict=True))
        return backend.add_raw("g", {key.decode(): value for key, value in pairs.items()})

    async def forget() -> None:
        backend._stream("g").dead.clear()
        await trio.lowlevel.checkpoint()

    async def check(batch: list[list[bytes]]) -> None:
        # Trio's clock runs only while a batch is checked: while hypothesis draws the
        # next one in its thread, the loop is idle and must not spin through timers.
        autojump_clock.autojump_threshold = 0
        try:
            await check_batch(runner, add, forget, batch, limit=600)
        finally:
            autojump_clock.autojump_threshold = math.inf

    autojump_clock.autojump_threshold = math.inf  # serve starts without waiting on time
    await fuzz(runner, check, MEMORY_EXAMPLES)


@pytest.fixture
async def redis_backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url, queue=f"q{uuid.uuid4().hex[:8]}") as backend:
        yield backend


async def test_arbitrary_entries_on_redis(redis_backend: RedisBackend) -> None:
    runner, _ = build(redis_backend, reclaim_delay=5.0, block_duration=0.1)

    async def add(fields: list[bytes]) -> str:
        reply = await redis_backend.client.execute(
            "XADD", redis_backend.stream_keys("g").stream, "*", *fields
        )
        return bytes(reply).decode()

    async def forget() -> None:
        await redis_backend.client.execute("DEL", redis_backend.stream_keys("g").dead_letter)

    async def check(batch: list[list[bytes]]) -> None:
        await check_batch(runner, add, forget, batch, limit=30)

    await fuzz(runner, check, REDIS_EXAMPLES)
