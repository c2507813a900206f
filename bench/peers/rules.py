"""The readiness rules both Python peers judge readings by, as Sluice's rules read them
(`equals`, `gte`, `age_lt` on a field of the sensor's data)."""

from datetime import datetime


def parse_duration(text):
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return float(text[:-1]) * units[text[-1]]


def passes(rule, data, now):
    seen = data.get(rule["field"])
    check = rule["check"]
    if seen is None:
        return False
    if check == "equals":
        return seen == rule["value"]
    if check == "gte":
        return isinstance(seen, (int, float)) and seen >= rule["value"]
    if check == "age_lt":
        at = datetime.fromisoformat(str(seen).replace("Z", "+00:00"))
        return (now - at).total_seconds() < parse_duration(rule["value"])
    return False


def execution_date(reading):
    """The execution a reading belongs to: its date, and its hour for hourly runs."""
    date = reading.get("date", "")
    if reading.get("hour") is not None:
        date = f"{date}T{int(reading['hour']):02d}"
    return date
