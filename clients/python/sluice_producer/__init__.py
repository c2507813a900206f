"""Publish sensor readings to Sluice the way it reads them.

Sluice reads each reading from its sensors topic keyed by the pipeline's id, in the
partition Java's default partitioner (murmur2) gives that key, as JSON
``{"pipelineId", "key", "data", "date"?, "hour"?, "timestamp", "merge"?}``. librdkafka's
clients (confluent-kafka) hash keys with CRC32 unless told otherwise, which puts most
readings in a partition Sluice must forward them from; this helper sets ``murmur2_random``.

    from sluice_producer import SensorProducer

    with SensorProducer("broker:9092") as sensors:
        sensors.put("gold-revenue", "row-count", {"count": 5000}, date="2026-11-26")

For producers that cannot reach Kafka, ``post_readings`` sends the same readings to a
Sluice instance's ``POST /api/sensors`` with a write token.
"""

from __future__ import annotations

import datetime as _dt
import json
import urllib.error
import urllib.request
from typing import Any, Iterable, Mapping, Optional, Union

__all__ = ["SensorProducer", "reading", "post_readings", "PublishError"]

#: Sluice's default sensors topic (``--topic-prefix`` ``sluice.``).
DEFAULT_TOPIC = "sluice.sensors"

#: Settings Sluice's reading depends on; a caller's config may not change them.
_OWNED = {"partitioner": "murmur2_random"}


class PublishError(Exception):
    """A reading the broker (or Sluice's API) did not take."""


DateLike = Union[str, _dt.date, _dt.datetime]


def _date_text(date: DateLike) -> str:
    if isinstance(date, _dt.datetime):
        return date.date().isoformat()
    if isinstance(date, _dt.date):
        return date.isoformat()
    text = str(date)
    _dt.date.fromisoformat(text[:10])  # raises ValueError on a date Sluice would refuse
    if len(text) != 10:
        raise ValueError(f"date {text!r}: give YYYY-MM-DD (and the hour separately)")
    return text


def reading(
    pipeline_id: str,
    key: str,
    data: Optional[Mapping[str, Any]] = None,
    *,
    date: Optional[DateLike] = None,
    hour: Optional[int] = None,
    merge: Optional[str] = None,
    timestamp: Optional[_dt.datetime] = None,
) -> dict:
    """One reading in the sensors topic's JSON form, checked as far as Sluice checks it
    without the pipeline's config: a non-empty key, a date as ``YYYY-MM-DD``, an hour
    0-23 (only with a date), ``merge`` ``replace`` or ``add``, and the time it was taken
    (UTC now unless given; a naive datetime is taken as UTC)."""
    if not pipeline_id or not str(pipeline_id).strip():
        raise ValueError("pipeline_id must not be empty")
    if not key or not str(key).strip():
        raise ValueError("key must not be empty")
    record: dict = {"pipelineId": pipeline_id, "key": key, "data": dict(data or {})}
    if date is not None:
        record["date"] = _date_text(date)
    if hour is not None:
        if date is None:
            raise ValueError("an hourly reading must also carry its date")
        if not 0 <= int(hour) <= 23:
            raise ValueError(f"hour {hour}: give 0 to 23")
        record["hour"] = f"{int(hour):02d}"
    if merge is not None:
        if merge not in ("replace", "add"):
            raise ValueError(f"merge {merge!r}: give 'replace' or 'add'")
        record["merge"] = merge
    at = timestamp or _dt.datetime.now(_dt.timezone.utc)
    if at.tzinfo is None:
        at = at.replace(tzinfo=_dt.timezone.utc)
    record["timestamp"] = at.isoformat()
    return record


class SensorProducer:
    """A Kafka producer of readings, keyed and partitioned as Sluice reads them.

    ``config`` takes any other librdkafka setting (security, SASL, timeouts); it may not
    set the partitioner. Readings are sent asynchronously; ``flush`` (or leaving a ``with``
    block) waits for every one and raises ``PublishError`` naming those the broker refused.
    """

    def __init__(self, bootstrap_servers: str, topic: str = DEFAULT_TOPIC, **config: Any) -> None:
        from confluent_kafka import Producer

        settings = {k.replace("_", "."): v for k, v in config.items()}
        for name, value in _OWNED.items():
            if name in settings and settings[name] != value:
                raise ValueError(f"{name}: Sluice reads readings partitioned by {value}")
        settings.update(_OWNED)
        settings["bootstrap.servers"] = bootstrap_servers
        settings.setdefault("enable.idempotence", True)
        settings.setdefault("acks", "all")
        self.topic = topic
        self._producer = Producer(settings)
        self._failed: list = []

    def put(self, pipeline_id: str, key: str, data: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> dict:
        """Sends one reading (see ``reading`` for the arguments); returns it."""
        record = reading(pipeline_id, key, data, **kwargs)
        self.send(record)
        return record

    def send(self, record: Mapping[str, Any]) -> None:
        """Sends a reading already in the topic's form, keyed by its pipeline."""
        pipeline_id = record.get("pipelineId")
        if not pipeline_id:
            raise ValueError("a reading needs its pipelineId")

        def delivered(err, msg):
            if err is not None:
                self._failed.append((pipeline_id, record.get("key"), str(err)))

        value = json.dumps(record, separators=(",", ":")).encode()
        while True:
            try:
                self._producer.produce(self.topic, key=pipeline_id.encode(), value=value, on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        left = self._producer.flush(timeout)
        failed, self._failed = self._failed, []
        if left:
            raise PublishError(f"{left} reading(s) not delivered within {timeout} s")
        if failed:
            raise PublishError(f"the broker refused {len(failed)} reading(s): {failed[:5]}")

    def __enter__(self) -> "SensorProducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.flush()


def post_readings(api_url: str, token: str, readings: Iterable[Mapping[str, Any]], timeout: float = 30.0) -> dict:
    """Posts readings (each as ``reading`` makes them) to a Sluice instance's
    ``POST /api/sensors`` with a write token; returns its answer (where each landed).
    Raises ``PublishError`` with Sluice's reasons if it refuses them."""
    body = json.dumps(list(readings)).encode()
    request = urllib.request.Request(
        api_url.rstrip("/") + "/api/sensors",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with _NO_REDIRECTS.open(request, timeout=timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as e:
        if 300 <= e.code < 400:
            where = e.headers.get("Location", "?")
            raise PublishError(f"{e.code}: redirected to {where}, not followed (the token goes only to api_url)") from None
        raise PublishError(f"{e.code}: {e.read().decode(errors='replace')}") from None


class _Refuse(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: urllib's own keeps the ``Authorization`` header on a redirect
    to another host (a POST turned GET on 301/302/303), which would hand the write token
    to whoever the answer names."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        return None


_NO_REDIRECTS = urllib.request.build_opener(_Refuse)
