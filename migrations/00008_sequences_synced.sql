-- +goose Up
-- When the mirror's sequences were last set in step on the destination
-- (engine/seqsync): after the snapshot and every 30 s while CDC runs.
ALTER TABLE mirrors ADD COLUMN sequences_synced_at timestamptz;
COMMENT ON COLUMN mirrors.sequences_synced_at IS 'When the destination sequences of the mirrored tables were last compared with the source''s and set forward; NULL before the first time.';
-- Like the slot monitor's writes, this periodic write alone does not touch
-- updated_at.
DROP TRIGGER mirrors_touch ON mirrors;
CREATE TRIGGER mirrors_touch BEFORE UPDATE ON mirrors FOR EACH ROW
    WHEN (NOT ((OLD.slot_checked_at IS DISTINCT FROM NEW.slot_checked_at
                OR OLD.sequences_synced_at IS DISTINCT FROM NEW.sequences_synced_at)
               AND (to_jsonb(OLD) - ARRAY['slot_lag_bytes', 'slot_wal_status', 'slot_checked_at', 'sequences_synced_at'])
                 = (to_jsonb(NEW) - ARRAY['slot_lag_bytes', 'slot_wal_status', 'slot_checked_at', 'sequences_synced_at'])))
    EXECUTE FUNCTION pgmirror_touch_updated_at();

-- +goose Down
DROP TRIGGER mirrors_touch ON mirrors;
CREATE TRIGGER mirrors_touch BEFORE UPDATE ON mirrors FOR EACH ROW
    WHEN (NOT (OLD.slot_checked_at IS DISTINCT FROM NEW.slot_checked_at
               AND (to_jsonb(OLD) - ARRAY['slot_lag_bytes', 'slot_wal_status', 'slot_checked_at'])
                 = (to_jsonb(NEW) - ARRAY['slot_lag_bytes', 'slot_wal_status', 'slot_checked_at'])))
    EXECUTE FUNCTION pgmirror_touch_updated_at();
ALTER TABLE mirrors DROP COLUMN sequences_synced_at;
