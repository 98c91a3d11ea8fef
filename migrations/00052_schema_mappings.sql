-- +goose Up
-- A mirror may map a whole source schema (source_table "*"): the mapping
-- itself is kept here so that tables created in the schema later are
-- recognised; each table it covers is a row of mirror_tables marked
-- from_schema_mapping. A table that disappeared from the source is
-- 'dropped': it no longer replicates and its destination table is kept.
CREATE TABLE mirror_schema_mappings (
    id                 bigserial PRIMARY KEY,
    mirror_id          bigint NOT NULL REFERENCES mirrors (id) ON DELETE CASCADE,
    position           integer NOT NULL DEFAULT 0,
    source_schema      text NOT NULL CHECK (source_schema <> ''),
    destination_schema text NOT NULL CHECK (destination_schema <> ''),
    created_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (mirror_id, source_schema)
);
COMMENT ON TABLE mirror_schema_mappings IS 'Whole source schemas a mirror maps (source_table "*"); their tables are rows of mirror_tables with from_schema_mapping.';

ALTER TABLE mirror_tables ADD COLUMN from_schema_mapping boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN mirror_tables.from_schema_mapping IS 'The table is mapped because its schema is (mirror_schema_mappings), not by name.';

ALTER TABLE mirror_tables DROP CONSTRAINT mirror_tables_status_check,
    ADD CONSTRAINT mirror_tables_status_check
        CHECK (status IN ('pending', 'snapshotting', 'running', 'error', 'dropped'));

-- +goose Down
DELETE FROM mirror_tables WHERE status = 'dropped';
ALTER TABLE mirror_tables DROP CONSTRAINT mirror_tables_status_check,
    ADD CONSTRAINT mirror_tables_status_check
        CHECK (status IN ('pending', 'snapshotting', 'running', 'error'));
ALTER TABLE mirror_tables DROP COLUMN from_schema_mapping;
DROP TABLE mirror_schema_mappings;
