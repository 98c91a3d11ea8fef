package schemasync

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// destIdentitySQL reads the replica identity of destination table $1.$2:
// relreplident, whether it has a primary key, and the name of its replica
// identity index (” when none).
const destIdentitySQL = `
SELECT c.relreplident::text,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
       COALESCE((SELECT ic.relname::text FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
                 WHERE i.indrelid = c.oid AND i.indisreplident), '')
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'`

// identityIndexSQL finds an index of destination table $1.$2 that can be
// its replica identity over exactly the key columns $3 (in order): unique,
// not deferrable, valid, without a predicate or expressions, and not the
// primary key (that one is the DEFAULT identity).
const identityIndexSQL = `
SELECT ic.relname::text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_index i ON i.indrelid = c.oid
JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
WHERE n.nspname = $1 AND c.relname = $2
  AND i.indisunique AND i.indimmediate AND i.indisvalid AND NOT i.indisprimary
  AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = pg_catalog.cardinality($3::text[])
  AND (SELECT pg_catalog.array_agg(a.attname::text ORDER BY k.ord)
       FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
       JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
       WHERE k.ord <= i.indnkeyatts) = $3::text[]
ORDER BY ic.relname
LIMIT 1`

// replicaIdentityDDL returns the statement that gives the destination
// table of m the replica identity its source table src has ("" when it has
// it already), so that the destination can feed a mirror of its own (a
// cut-over's reverse mirror) exactly as the source did:
//
//   - REPLICA IDENTITY FULL on the source: FULL.
//   - USING INDEX on the source: USING INDEX of the destination's index
//     over the same key columns (the UNIQUE constraint EnsureTables creates
//     for a table without a primary key, or the source's unique index once
//     a cut-over created it). Until that index exists a table with a
//     primary key keeps DEFAULT (its primary key identifies rows as well);
//     one without gets FULL. missing says the index was expected to exist
//     by now: its absence is then a warning.
//   - DEFAULT: DEFAULT, except for a source without a primary key (a
//     partitioned table whose partitions have their own identity): its
//     destination, a plain table without a key, gets FULL.
//   - NOTHING: left as it is.
func replicaIdentityDDL(ctx context.Context, q Execer, m change.Mapping, src Table, missing bool) (stmt, warning string, err error) {
	dest := m.Destination
	var have, haveIndex string
	var destPK bool
	err = q.QueryRow(ctx, destIdentitySQL, dest.Schema, dest.Name).Scan(&have, &destPK, &haveIndex)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", nil // not a plain table: nothing to carry
	}
	if err != nil {
		return "", "", fmt.Errorf("read the replica identity of %s: %w", dest, err)
	}
	want, wantIndex := "", ""
	switch src.ReplicaIdentity {
	case ReplicaIdentityFull:
		want = "f"
	case ReplicaIdentityIndex:
		if len(src.IdentityColumns) > 0 {
			err := q.QueryRow(ctx, identityIndexSQL, dest.Schema, dest.Name, src.IdentityColumns).Scan(&wantIndex)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return "", "", fmt.Errorf("look up the replica identity index of %s: %w", dest, err)
			}
		}
		switch {
		case wantIndex != "":
			want = "i"
		case destPK:
			want = "d"
			if missing {
				warning = fmt.Sprintf("%s keeps its primary key as replica identity: source table %s has REPLICA IDENTITY USING INDEX over (%s), and the destination has no such unique index; create one and run ALTER TABLE %s REPLICA IDENTITY USING INDEX ... there if a mirror reading the destination needs that identity",
					dest, m.Source, sqlquote.Idents(src.IdentityColumns), dest.Quoted())
			}
		default:
			want = "f"
		}
	case ReplicaIdentityDefault:
		want = "d"
		if len(src.PrimaryKey) == 0 && !destPK {
			want = "f"
		}
	default:
		return "", "", nil
	}
	if want == have && (want != "i" || wantIndex == haveIndex) {
		return "", warning, nil
	}
	clause := map[string]string{"f": "FULL", "d": "DEFAULT", "i": "USING INDEX " + sqlquote.Ident(wantIndex)}[want]
	return "ALTER TABLE " + dest.Quoted() + " REPLICA IDENTITY " + clause, warning, nil
}
