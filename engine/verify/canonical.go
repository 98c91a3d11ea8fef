package verify

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/session"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Canonical text forms. The hashes compare the text form of every row as
// each database computes it, so both must print equal values alike,
// whatever their major versions and settings (docs/consistency.md):
//
//   - every setting that changes a value's text form is pinned in every
//     comparison transaction (Settings), over the database's, the role's
//     and the connection's defaults;
//   - floating-point columns (real, double precision and arrays of them),
//     whose text form changed in PostgreSQL 12 (shortest exact digits
//     instead of 17 significant ones), are hashed by their IEEE 754 bits
//     (float4send, float8send), with every NaN as the one NaN PostgreSQL
//     reads from text.

// Settings returns the session settings every comparison transaction pins
// (SET LOCAL): pgmirror's session settings (DateStyle, IntervalStyle,
// extra_float_digits, bytea_output), TimeZone UTC (timestamptz) and
// lc_monetary C (money).
func Settings() map[string]string {
	s := session.Settings()
	s["TimeZone"] = "UTC"
	s["lc_monetary"] = "C"
	return s
}

// pinSettings sets settings for the rest of tx's transaction.
func pinSettings(ctx context.Context, tx pgx.Tx, settings map[string]string) error {
	var sql strings.Builder
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		sql.WriteString(session.SetLocal(k, settings[k]) + ";")
	}
	if _, err := tx.Exec(ctx, sql.String()); err != nil {
		return fmt.Errorf("pin the comparison's session settings: %w", err)
	}
	return nil
}

// floatSend maps the floating-point types to their binary send function and
// the bits of the NaN their input function returns.
var floatSend = map[string][2]string{
	"real":             {"float4send", `\x7fc00000`},
	"double precision": {"float8send", `\x7ff8000000000000`},
}

// canonicalColumn returns the expression whose text form stands for
// column col in the row text: the column itself, or for floating-point
// columns (the same type on both sides) their bits.
func canonicalColumn(col, dstCol schemasync.Column) string {
	q := sqlquote.Ident(col.Name)
	if col.Type != dstCol.Type {
		return q // different types: compared by text, as they are
	}
	if f, ok := floatSend[col.Type]; ok {
		return floatBits(q, col.Type, f)
	}
	if f, ok := floatSend[strings.TrimSuffix(col.Type, "[]")]; ok && strings.HasSuffix(col.Type, "[]") {
		// The bounds, then every element's bits (N for NULL) in order.
		elem := floatBits("pgmirror_e", strings.TrimSuffix(col.Type, "[]"), f)
		return fmt.Sprintf(`CASE WHEN %[1]s IS NOT NULL THEN pg_catalog.concat(pg_catalog.array_dims(%[1]s), ':', (SELECT pg_catalog.string_agg(coalesce(pg_catalog.encode(%[2]s, 'hex'::pg_catalog.text), 'N'), ','::pg_catalog.text ORDER BY pgmirror_i) FROM pg_catalog.unnest(%[1]s) WITH ORDINALITY AS pgmirror_u(pgmirror_e, pgmirror_i))) END`,
			q, elem)
	}
	return q
}

func floatBits(expr, typ string, f [2]string) string {
	return fmt.Sprintf(`CASE WHEN %[1]s OPERATOR(pg_catalog.=) 'NaN'::%[2]s THEN '%[4]s'::pg_catalog.bytea ELSE pg_catalog.%[3]s(%[1]s) END`, expr, typ, f[0], f[1])
}
