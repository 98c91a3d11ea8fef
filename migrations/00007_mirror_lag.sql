-- +goose Up
-- How far each mirror is behind its source, written by the worker that
-- streams it about once a second. A table of its own: these frequent writes
-- stay out of the mirrors row (its triggers, its updated_at).
CREATE TABLE mirror_lag (
    mirror_id         bigint PRIMARY KEY REFERENCES mirrors (id) ON DELETE CASCADE,
    lag_seconds       double precision NOT NULL CHECK (lag_seconds >= 0),
    measured_at       timestamptz NOT NULL,
    applied_commit_at timestamptz
);
COMMENT ON TABLE mirror_lag IS 'The streaming worker''s last measure of each mirror''s lag (see docs/observability.md).';
COMMENT ON COLUMN mirror_lag.lag_seconds IS 'Seconds between measured_at and the source commit of the oldest change not yet applied; 0 when caught up.';
COMMENT ON COLUMN mirror_lag.applied_commit_at IS 'Source commit time of the last transaction applied (or skipped as empty); NULL before the first.';

-- +goose Down
DROP TABLE mirror_lag;
