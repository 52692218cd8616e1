"""How every wire document is written and read: compact JSON, Go's zero values.

Written compact (no spaces), refusing NaN and infinities (Go's ``json``
cannot read them), non-ASCII text kept as UTF-8 (Go writes it so). Read
field by field: a missing or ``null`` field is the default (Go's zero
value), a whole-number float where an int belongs is that int, and anything
else of the wrong type is :class:`~taskrunner.errors.InvalidTaskPayload`
naming the field.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring
from typing import Any

from taskrunner.errors import InvalidTaskPayload

dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode
"""``dumps(doc) -> str``: the compact JSON of a document."""

_raw_decode = json.JSONDecoder().raw_decode

_SIMPLE_VALUES: dict[Any, str] = {None: "null", True: "true", False: "false"}


def dumps_value(value: Any) -> str:
    """``dumps(value)``, the same text and the same refusals, without the encoder's
    set-up for the values payloads and results most often are (``None``, a bool, an
    int, a string): it runs once per dispatched payload and per kept result."""
    kind = type(value)
    if value is None or kind is bool:
        return _SIMPLE_VALUES[value]
    if kind is int:
        return int.__repr__(value)
    if kind is str:
        return encode_basestring(value)  # what the encoder writes with ensure_ascii=False
    return dumps(value)


def field(doc: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    """``doc[name]`` as a ``kind``, ``default`` when missing or ``null``.

    Raises:
        InvalidTaskPayload: the value is of another type.
    """
    value = doc.get(name)
    if value is None:
        return default
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidTaskPayload(f"field {name!r} should be {kind.__name__}, got {value!r}")
    return value


def seconds_field(doc: dict[str, Any], name: str) -> float | None:
    """``doc[name]`` as a number of seconds > 0, ``None`` when missing or ``null``.

    Raises:
        InvalidTaskPayload: the value is not a finite number > 0.
    """
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidTaskPayload(f"field {name!r} should be seconds > 0, got {value!r}")
    return float(value)


def json_object(raw: bytes) -> dict[str, Any]:
    """Parse ``raw`` as a JSON object.

    Raises:
        InvalidTaskPayload: invalid JSON, or JSON that is not an object.
    """
    # The way every message takes: strict UTF-8, one document, nothing around it.
    # ``json.loads`` of bytes also sniffs the encoding and scans for trailing
    # whitespace, which costs half again as much; whatever the short way refuses
    # (leading or trailing whitespace, UTF-16, surrogates, invalid JSON) goes the
    # long way, which decides it as ``json.loads`` always did.
    try:
        text = raw.decode()
        doc, end = _raw_decode(text)
        if end != len(text):
            raise ValueError("more than one document")
    except ValueError:
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise InvalidTaskPayload(f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidTaskPayload(f"expected a JSON object, got {type(doc).__name__}")
    return doc
