#!/usr/bin/env bash
# Publishes sensor readings for the example pipelines, one execution date per round, so
# the demo shows every path: rules failing then passing, a retry, a window that closes.
set -euo pipefail
sluice="${SLUICE_BIN:-sluice}"
rounds="${SLUICE_DEMO_ROUNDS:-20}"

for round in $(seq 0 $((rounds - 1))); do
  # Dates from today on: a date older than the execution retention (7 days) is refused.
  date="$(date -u -d "today + $round days" +%F)"
  now="$(date -u +%FT%TZ)"
  echo "round $round: execution date $date"
  # Too few orders at first: the rules fail and the executions wait...
  "$sluice" sensor put orders-daily orders-count count=12 --date "$date"
  "$sluice" sensor put flaky-report orders-count count=12 --date "$date"
  for p in orders-daily flaky-report; do
    "$sluice" sensor put "$p" orders-landed status=ready updatedAt="$now" --date "$date"
  done
  "$sluice" sensor put late-partner-feed partner-feed files=3 --date "$date"
  sleep 3
  # ...until the full count lands.
  "$sluice" sensor put orders-daily orders-count count=48210 --date "$date"
  sleep 12
done
