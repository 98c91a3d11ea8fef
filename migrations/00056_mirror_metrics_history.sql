-- +goose Up
-- A sample of each streaming mirror's lag and throughput at a fixed cadence
-- (30 s), written by the replica that streams it from the same flush that
-- writes mirror_lag, so that the console can draw the last hours. Old rows
-- are deleted in bounded batches by the hourly prune job
-- (SERVICE_METRICS_HISTORY_RETENTION, default 24 h).
CREATE TABLE mirror_metrics_history (
    mirror_id            bigint NOT NULL REFERENCES mirrors (id) ON DELETE CASCADE,
    at                   timestamptz NOT NULL,
    lag_seconds          double precision CHECK (lag_seconds >= 0),
    rows_synced          bigint NOT NULL CHECK (rows_synced >= 0),
    rows_per_second      double precision CHECK (rows_per_second >= 0),
    lsn                  pg_lsn,
    wal_bytes_per_second double precision CHECK (wal_bytes_per_second >= 0),
    PRIMARY KEY (mirror_id, at)
);
-- The prune job deletes by age across mirrors.
CREATE INDEX mirror_metrics_history_at ON mirror_metrics_history (at);
COMMENT ON TABLE mirror_metrics_history IS 'Lag and throughput samples of each streaming mirror, every 30 s, kept for SERVICE_METRICS_HISTORY_RETENTION (see docs/catalog.md).';
COMMENT ON COLUMN mirror_metrics_history.lag_seconds IS 'The streaming worker''s newest lag measure at the sample (as mirror_lag.lag_seconds).';
COMMENT ON COLUMN mirror_metrics_history.rows_synced IS 'Sum of the mirror''s tables'' rows_synced (rows copied plus row changes applied) at the sample.';
COMMENT ON COLUMN mirror_metrics_history.rows_per_second IS 'rows_synced gained since the mirror''s previous sample, per second; NULL for a first sample, after a gap or after the counters went back (a resync).';
COMMENT ON COLUMN mirror_metrics_history.lsn IS 'The mirror''s last_lsn at the sample.';
COMMENT ON COLUMN mirror_metrics_history.wal_bytes_per_second IS 'Source WAL the mirror moved through since its previous sample (lsn difference), per second; NULL as rows_per_second.';

-- +goose Down
DROP TABLE mirror_metrics_history;
