package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/defaults"
)

// The defaults of a mirror's settings are the same in the package that
// owns them, in the API's document (what a client that leaves a field out
// gets) and in the catalog's column DEFAULTs (what a row written without
// the column gets).
func TestDefaultsAgree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := map[string]string{
		"snapshot_num_rows_per_partition": fmt.Sprint(defaults.SnapshotRowsPerPartition),
		"snapshot_max_parallel_workers":   fmt.Sprint(defaults.SnapshotMaxParallelWorkers),
		"snapshot_num_tables_in_parallel": fmt.Sprint(defaults.SnapshotTablesInParallel),
		"cdc_sync_interval_seconds":       fmt.Sprint(defaults.CDCSyncIntervalSeconds),
		"cdc_batch_size":                  fmt.Sprint(defaults.CDCBatchSize),
		"do_initial_snapshot":             fmt.Sprint(defaults.DoInitialSnapshot),
		"existing_destination_rows":       defaults.ExistingDestinationRows,
		"schema_changes":                  defaults.SchemaChanges,
		"capture_ddl":                     fmt.Sprint(defaults.CaptureDDL),
	}

	raw := b.mustDo(http.MethodGet, "/openapi.json", "", nil, http.StatusOK)
	var doc struct {
		Paths map[string]map[string]struct {
			RequestBody struct {
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Default any `json:"default"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	ref := doc.Paths["/v1/mirrors"]["post"].RequestBody.Content["application/json"].Schema.Ref
	body := doc.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
	require.NotEmpty(t, body.Properties, "no schema for the body of POST /v1/mirrors (%q)", ref)
	for field, value := range want {
		p, ok := body.Properties[field]
		require.True(t, ok, "POST /v1/mirrors has no field %s", field)
		require.Equal(t, value, fmt.Sprint(p.Default), "the API's default of %s", field)
	}

	for field, value := range want {
		var def string
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT coalesce(column_default, '')
			FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'mirrors' AND column_name = $1`, field).Scan(&def), field)
		// PostgreSQL shows 'refuse'::text for a text DEFAULT.
		def = strings.TrimSuffix(strings.Trim(strings.TrimSuffix(def, "::text"), "'"), "'")
		require.Equal(t, value, def, "the catalog's DEFAULT of mirrors.%s", field)
	}
}
