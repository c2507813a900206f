"""The readiness workload as the fastest hand-written Python would do it: a confluent-kafka
consumer loop with RocksDB state (rocksdict), the second peer sluice-bench measures Sluice
against (beside readiness.py, the same workload in Quix Streams).

Same rules and state as readiness.py: the latest reading per sensor key and execution date,
the pipeline's rules evaluated when its trigger sensor arrives, VALIDATION_PASSED published
once per execution. What Quix does per record, this does per batch of up to 1,000 records:
the events and the batch's state changes (to CHANGELOG_TOPIC, as Quix and Sluice keep their
state recoverable) produced and acknowledged, then one RocksDB write batch, then the offsets
committed (Sluice's order; at least once: a crash before the commit repeats the batch and
may publish its events again, never lose them).

    python consumer_loop.py BROKERS SENSORS_TOPIC EVENTS_TOPIC GROUP CONFIGS_JSON STATE_DIR \
        CHANGELOG_TOPIC
"""

import json
import signal
import sys
import time
from datetime import datetime, timezone

from confluent_kafka import Consumer, Producer
from rocksdict import Options, Rdict, WriteBatch

from rules import execution_date, passes

BATCH = 1000


class Batch:
    """One batch's reads and writes: reads see the batch's own writes first."""

    def __init__(self, db):
        self.db = db
        self.written = {}

    def get(self, key):
        if key in self.written:
            return self.written[key]
        raw = self.db.get(key.encode())
        return None if raw is None else json.loads(raw)

    def set(self, key, value):
        self.written[key] = value

    def encoded(self):
        return [(key.encode(), json.dumps(value).encode()) for key, value in self.written.items()]

    def commit(self, encoded):
        if encoded:
            wb = WriteBatch(raw_mode=True)
            for key, value in encoded:
                wb.put(key, value)
            self.db.write(wb)


def decide(configs, batch, key, value):
    """VALIDATION_PASSED for this reading, or None (the same decision as readiness.py)."""
    config = configs.get(key)
    if config is None:
        return None
    date = execution_date(value)
    readings_key = f"{key}/r/{date}"
    readings = batch.get(readings_key) or {}
    readings[value["key"]] = value.get("data", {})
    batch.set(readings_key, readings)
    now = datetime.now(timezone.utc)
    trigger = config["schedule"]["trigger"]
    if value["key"] != trigger["key"] or not passes(trigger, value.get("data", {}), now):
        return None
    passed_key = f"{key}/passed/{date}"
    if batch.get(passed_key):
        return None
    if not all(passes(r, readings.get(r["key"], {}), now) for r in config["validation"]["rules"]):
        return None
    batch.set(passed_key, True)
    return {"type": "VALIDATION_PASSED", "pipelineId": key, "date": date, "timestamp": now.isoformat()}


def main():
    brokers, sensors_topic, events_topic, group, configs_path, state_dir, changelog_topic = sys.argv[1:8]
    with open(configs_path) as f:
        configs = {c["pipeline"]["id"]: c for c in json.load(f)}
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = Producer({"bootstrap.servers": brokers, "enable.idempotence": True, "linger.ms": 5})
    db = Rdict(state_dir, options=Options(raw_mode=True))
    running = [True]
    signal.signal(signal.SIGTERM, lambda *_: running.__setitem__(0, False))
    consumer.subscribe([sensors_topic])
    first = None
    while running[0]:
        records = consumer.consume(num_messages=BATCH, timeout=0.5)
        if not records:
            continue
        if first is None:
            first = time.time()
            print(f"first {first}", flush=True)
        batch = Batch(db)
        events = []
        for record in records:
            if record.error():
                continue
            key = record.key().decode()
            event = decide(configs, batch, key, json.loads(record.value()))
            if event is not None:
                events.append((key, event))
        changes = batch.encoded()
        for key, value in changes:
            producer.produce(changelog_topic, key=key, value=value)
        for key, event in events:
            producer.produce(events_topic, key=key, value=json.dumps(event))
        producer.flush()
        batch.commit(changes)
        consumer.commit(asynchronous=True)
    consumer.close()
    db.close()


if __name__ == "__main__":
    main()
