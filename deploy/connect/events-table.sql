-- The table the JDBC sink (jdbc-postgres-sink.json) upserts sluice.events into: one row per
-- event, keyed by eventId, so a re-sent event (same eventId) overwrites itself instead of
-- duplicating. It replaces the earlier design's events table; column names are the event's
-- field names (quoted: they are camelCase).
CREATE TABLE IF NOT EXISTS sluice_events (
    "eventId"    TEXT PRIMARY KEY,
    "type"       TEXT NOT NULL,
    "category"   TEXT NOT NULL,
    "pipelineId" TEXT NOT NULL,
    "scheduleId" TEXT,
    "date"       TEXT,
    "runId"      TEXT,
    "attempt"    INTEGER,
    "timestamp"  TIMESTAMPTZ NOT NULL,
    "message"    TEXT NOT NULL,
    "detail"     TEXT
);

COMMENT ON TABLE sluice_events IS 'Sluice lifecycle events from sluice.events (Kafka Connect JDBC sink, upsert on eventId)';
COMMENT ON COLUMN sluice_events."eventId" IS 'Deterministic event id: the same decision always has the same id';
COMMENT ON COLUMN sluice_events."type" IS 'Event type, e.g. JOB_FAILED, SLA_BREACH';
COMMENT ON COLUMN sluice_events."category" IS 'validation, job, sla, schedule, post-run, rerun, dry-run, config, input';
COMMENT ON COLUMN sluice_events."date" IS 'Execution date, YYYY-MM-DD or YYYY-MM-DDTHH';
COMMENT ON COLUMN sluice_events."timestamp" IS 'When Sluice decided';
COMMENT ON COLUMN sluice_events."detail" IS 'Type-specific detail, JSON text (cast with detail::jsonb)';

CREATE INDEX IF NOT EXISTS sluice_events_pipeline_time ON sluice_events ("pipelineId", "timestamp");
CREATE INDEX IF NOT EXISTS sluice_events_type_time ON sluice_events ("type", "timestamp");
