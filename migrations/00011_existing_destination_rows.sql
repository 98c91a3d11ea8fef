-- +goose Up
-- What a mirror's first copy of a table does with rows the destination
-- table already holds (POST /v1/mirrors, field existing_destination_rows):
-- refuse (the copy does not start), truncate (emptied first) or keep (rows
-- copied with upserts over them).
ALTER TABLE mirrors ADD COLUMN existing_destination_rows text NOT NULL DEFAULT 'refuse'
    CHECK (existing_destination_rows IN ('refuse', 'truncate', 'keep'));
COMMENT ON COLUMN mirrors.existing_destination_rows IS 'What the first copy of a table does with rows its destination table already holds: refuse, truncate or keep (upsert). Later copies (resync, a restarted copy) truncate.';

-- When the mirror took its destination table over: its first copy found it
-- empty or emptied it (refuse, truncate), or finished copying into it (keep),
-- or a full resync was requested. From then on the rows are the mirror's and
-- a copy truncates the table first.
ALTER TABLE mirror_tables ADD COLUMN destination_taken_at timestamptz;
-- Tables copied (or being copied) before this column existed were truncated
-- by their copy: they are taken over.
UPDATE mirror_tables SET destination_taken_at = coalesce(last_synced_at, now()) WHERE status <> 'pending';
COMMENT ON COLUMN mirror_tables.destination_taken_at IS 'When the mirror took the destination table over (its first copy checked or emptied it, or a full resync was requested); NULL before: the first copy follows mirrors.existing_destination_rows.';

-- TRUNCATEs of the source table applied on the destination by CDC.
ALTER TABLE mirror_tables ADD COLUMN truncates bigint NOT NULL DEFAULT 0 CHECK (truncates >= 0);
COMMENT ON COLUMN mirror_tables.truncates IS 'TRUNCATEs of the source table that CDC applied to the destination table.';

-- +goose Down
ALTER TABLE mirror_tables DROP COLUMN truncates;
ALTER TABLE mirror_tables DROP COLUMN destination_taken_at;
ALTER TABLE mirrors DROP COLUMN existing_destination_rows;
