-- +goose Up
-- A table whose changes a mirror may have missed (its replication slot was
-- missing, recreated, invalidated or moved past what the mirror had
-- applied) keeps that mark until a copy or a verification proves it equal
-- again. While any table of a mirror is marked, the mirror is not proven
-- equal: GET /v1/mirrors/{name} shows lost_changes and a cut-over refuses.
ALTER TABLE mirror_tables
    ADD COLUMN lost_changes_since_lsn pg_lsn,
    ADD COLUMN lost_changes_until_lsn pg_lsn,
    ADD COLUMN lost_changes_at        timestamptz,
    ADD COLUMN lost_changes_reason    text,
    ADD CONSTRAINT mirror_tables_lost_changes_check CHECK (
        (lost_changes_at IS NULL AND lost_changes_since_lsn IS NULL AND lost_changes_until_lsn IS NULL AND lost_changes_reason IS NULL)
        OR (lost_changes_at IS NOT NULL AND lost_changes_reason IN ('slot_missing', 'slot_recreated', 'slot_invalidated', 'slot_behind')));
COMMENT ON COLUMN mirror_tables.lost_changes_since_lsn IS 'Source position after which changes of the table may be missing on the destination (the mirror''s applied position when the loss was found); NULL when unknown or nothing is lost.';
COMMENT ON COLUMN mirror_tables.lost_changes_until_lsn IS 'Source position from which the (new) slot delivers changes again; NULL while the slot is still missing or invalidated.';
COMMENT ON COLUMN mirror_tables.lost_changes_at IS 'When pgmirror found that changes of the table may be lost; NULL when the table is not marked. Cleared by a copy of the table (resync) or a verification that finds it equal, either at or after lost_changes_until_lsn.';
COMMENT ON COLUMN mirror_tables.lost_changes_reason IS 'slot_missing, slot_recreated, slot_invalidated (wal_status lost) or slot_behind (the slot''s confirmed position is past what pgmirror confirmed).';

-- The highest source position a mirror's run may report as confirmed to
-- its slot beyond the changes applied on the destination (transactions
-- with nothing to replicate). Written before the run confirms up to it, so
-- a slot whose confirmed position lies past both this and the applied
-- position was moved by someone else (recreated or advanced).
CREATE TABLE mirror_confirm_ceilings (
    mirror_id  bigint PRIMARY KEY REFERENCES mirrors (id) ON DELETE CASCADE,
    lsn        pg_lsn NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mirror_confirm_ceilings IS 'Per mirror: the highest source position its runs may confirm to the slot beyond the applied position (see docs/status.md, lost_changes).';

-- +goose Down
DROP TABLE mirror_confirm_ceilings;
ALTER TABLE mirror_tables
    DROP CONSTRAINT mirror_tables_lost_changes_check,
    DROP COLUMN lost_changes_reason,
    DROP COLUMN lost_changes_at,
    DROP COLUMN lost_changes_until_lsn,
    DROP COLUMN lost_changes_since_lsn;
