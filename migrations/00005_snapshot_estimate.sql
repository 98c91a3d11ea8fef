-- +goose Up
-- The source's row estimate of a table at the start of its snapshot, so
-- that the status record can say how far along the copy is.
ALTER TABLE mirror_tables ADD COLUMN rows_estimated bigint;
COMMENT ON COLUMN mirror_tables.rows_estimated IS 'Rows the source estimated (pg_class.reltuples, or a sample) when the table''s last snapshot started; NULL before any.';

-- +goose Down
ALTER TABLE mirror_tables DROP COLUMN rows_estimated;
