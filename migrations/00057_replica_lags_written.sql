-- +goose Up
-- When each replica last wrote the lag measures of the mirrors it streams.
-- A mirror whose own measure is old while its replica wrote measures
-- lately has stopped measuring (a long batch): its lag is bounded by the
-- slot. When the replica itself has written nothing lately (the catalog
-- was unreachable from it, as in the moments after a catalog outage), the
-- catalog does not know the stream's lag, and the API says so (null)
-- instead of reporting the age of the last measure written before.
ALTER TABLE replicas ADD COLUMN lags_written_at timestamptz;
COMMENT ON COLUMN replicas.lags_written_at IS 'When the replica last wrote its lag measures (every 2 s while it streams a mirror, every 5 s otherwise).';

-- +goose Down
ALTER TABLE replicas DROP COLUMN lags_written_at;
