-- +goose Up
-- Slot health of each mirror, written by the periodic slot monitor job
-- (jobs/slot_monitor.go) from the source's pg_replication_slots, so that a
-- mirror falling behind is visible before the source's disk fills up.
ALTER TABLE mirrors
    ADD COLUMN slot_lag_bytes  bigint,
    ADD COLUMN slot_wal_status text,
    ADD COLUMN slot_checked_at timestamptz;
COMMENT ON COLUMN mirrors.slot_lag_bytes IS 'WAL bytes the source keeps for this mirror: pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn) at slot_checked_at.';
COMMENT ON COLUMN mirrors.slot_wal_status IS 'pg_replication_slots.wal_status of the slot (reserved, extended, unreserved, lost), or missing when the slot does not exist.';
COMMENT ON COLUMN mirrors.slot_checked_at IS 'When the slot monitor last read the slot on the source.';

-- The monitor writes every few seconds: such a write alone does not touch
-- updated_at, which keeps meaning "configuration, state or progress changed".
DROP TRIGGER mirrors_touch ON mirrors;
CREATE TRIGGER mirrors_touch BEFORE UPDATE ON mirrors FOR EACH ROW
    WHEN (NOT (OLD.slot_checked_at IS DISTINCT FROM NEW.slot_checked_at
               AND (to_jsonb(OLD) - ARRAY['slot_lag_bytes', 'slot_wal_status', 'slot_checked_at'])
                 = (to_jsonb(NEW) - ARRAY['slot_lag_bytes', 'slot_wal_status', 'slot_checked_at'])))
    EXECUTE FUNCTION pgmirror_touch_updated_at();

-- +goose Down
DROP TRIGGER mirrors_touch ON mirrors;
CREATE TRIGGER mirrors_touch BEFORE UPDATE ON mirrors FOR EACH ROW EXECUTE FUNCTION pgmirror_touch_updated_at();
ALTER TABLE mirrors
    DROP COLUMN slot_checked_at,
    DROP COLUMN slot_wal_status,
    DROP COLUMN slot_lag_bytes;
