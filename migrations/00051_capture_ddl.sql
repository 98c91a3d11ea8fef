-- +goose Up
-- Whether the mirror captures schema changes of its source tables with
-- pgmirror's event trigger on the source (POST /v1/mirrors, field
-- capture_ddl): indexes, check/unique/exclusion constraints, column defaults
-- and NOT NULL are then applied on the destination in order with the rows.
ALTER TABLE mirrors ADD COLUMN capture_ddl boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN mirrors.capture_ddl IS 'Capture schema changes of the source tables with pgmirror''s event trigger on the source database and apply them on the destination in order with the rows.';

-- +goose Down
ALTER TABLE mirrors DROP COLUMN capture_ddl;
