"""The readiness workload as a team would write it with Quix Streams: the baseline that
sluice-bench measures Sluice against.

Reads sensor readings (JSON, keyed by pipeline id), keeps the latest reading per sensor key
and execution date in Quix's RocksDB state (with its changelog topic), evaluates the
pipeline's rules when its trigger sensor arrives, and publishes VALIDATION_PASSED once per
execution to the events topic. The pipeline configs come from a JSON file (the same configs
the benchmark publishes to Sluice's config topic).

    python readiness.py BROKERS SENSORS_TOPIC EVENTS_TOPIC GROUP CONFIGS_JSON STATE_DIR
"""

import json
import sys
import time
from datetime import datetime, timezone

from quixstreams import Application

from rules import execution_date, passes


def main():
    brokers, sensors_topic, events_topic, group, configs_path, state_dir = sys.argv[1:7]
    # sys.argv[7], the changelog topic, is the consumer loop's: Quix keeps its own.
    with open(configs_path) as f:
        configs = {c["pipeline"]["id"]: c for c in json.load(f)}

    app = Application(
        broker_address=brokers,
        consumer_group=group,
        auto_offset_reset="earliest",
        commit_interval=1.0,
        state_dir=state_dir,
    )
    sensors = app.topic(sensors_topic, value_deserializer="json", key_deserializer="string")
    events = app.topic(events_topic, value_serializer="json", key_serializer="string")
    first = []

    def decide(value, key, timestamp, headers, state):
        if not first:
            first.append(time.time())
            print(f"first {first[0]}", flush=True)
        config = configs.get(key)
        if config is None:
            return None
        date = execution_date(value)
        readings = state.get(date, {})
        readings[value["key"]] = value.get("data", {})
        state.set(date, readings)
        trigger = config["schedule"]["trigger"]
        if value["key"] != trigger["key"] or not passes(trigger, value.get("data", {}), datetime.now(timezone.utc)):
            return None
        done = state.get("passed", [])
        if date in done:
            return None
        now = datetime.now(timezone.utc)
        rules = config["validation"]["rules"]
        if not all(passes(r, readings.get(r["key"], {}), now) for r in rules):
            return None
        done.append(date)
        state.set("passed", done)
        return {"type": "VALIDATION_PASSED", "pipelineId": key, "date": date, "timestamp": now.isoformat()}

    sdf = app.dataframe(sensors)
    sdf = sdf.apply(decide, stateful=True, metadata=True)
    sdf = sdf.filter(lambda v: v is not None)
    sdf = sdf.to_topic(events)
    app.run()


if __name__ == "__main__":
    main()
