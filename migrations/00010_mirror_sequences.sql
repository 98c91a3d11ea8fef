-- +goose Up
-- Sequences named in a mirror's configuration (POST /v1/mirrors, field
-- sequences): kept in step on the destination besides those the mapped
-- tables' columns own. An array of {"schema": ..., "name": ...}.
ALTER TABLE mirrors ADD COLUMN sequences jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(sequences) = 'array');
COMMENT ON COLUMN mirrors.sequences IS 'Source sequences listed in the mirror''s configuration ([{"schema", "name"}]), created on the destination under the same name when missing and kept in step there.';

-- +goose Down
ALTER TABLE mirrors DROP COLUMN sequences;
