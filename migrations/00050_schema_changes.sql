-- +goose Up
-- What a mirror does when a mapped source table's columns change during CDC
-- (renamed, dropped, added, retyped): apply the change to the destination at
-- its position in the stream, warn and leave the destination's schema alone,
-- or stop (pause the mirror) before the first change that would alter it.
ALTER TABLE mirrors ADD COLUMN schema_changes text NOT NULL DEFAULT 'apply'
    CHECK (schema_changes IN ('apply', 'warn', 'stop'));
COMMENT ON COLUMN mirrors.schema_changes IS 'apply, warn or stop: what CDC does with column changes of mapped source tables (docs/consistency.md, Schema changes).';

-- +goose Down
ALTER TABLE mirrors DROP COLUMN schema_changes;
