package cutover_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/cutover"
)

// asRole returns dbURL with role's login.
func asRole(t *testing.T, dbURL, role, password string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	return u.String()
}

// TestReverseProblems: a plain destination user that may not replicate,
// publish or create, tables it does not own, a table without an identity
// and a source user that may not set session_replication_role are each
// named; once granted and fixed, nothing is.
func TestReverseProblems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srcCluster, dstCluster := pgtest.SourceCluster(t), pgtest.DestCluster(t)
	src, dst := pgtest.NewDatabase(t, srcCluster), pgtest.NewDatabase(t, dstCluster)
	role := fmt.Sprintf("rev_user_%d", time.Now().UnixNano()%1_000_000_000)
	for _, c := range []struct{ url, cluster string }{{src, srcCluster.URL("postgres")}, {dst, dstCluster.URL("postgres")}} {
		pgtest.Exec(t, c.cluster, fmt.Sprintf(`DO $$ BEGIN CREATE ROLE %s LOGIN PASSWORD 'rev-pw'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`, role))
		t.Cleanup(func() {
			pgtest.Exec(t, c.url, `DROP OWNED BY `+role+` CASCADE`)
			pgtest.Exec(t, c.cluster, `DROP ROLE IF EXISTS `+role)
		})
	}
	pgtest.Exec(t, dst, `CREATE TABLE keyed (id int PRIMARY KEY); CREATE TABLE keyless (a int)`)
	tables := []change.TableName{{Schema: "public", Name: "keyed"}, {Schema: "public", Name: "keyless"}}
	srcConn := connect(t, asRole(t, src, role, "rev-pw"))
	dstConn := connect(t, asRole(t, dst, role, "rev-pw"))

	problems, err := cutover.ReverseProblems(ctx, srcConn, dstConn, tables)
	require.NoError(t, err)
	all := strings.Join(problems, "\n")
	for _, want := range []string{
		"lacks the REPLICATION attribute", "may not create the reverse mirror's publication",
		"table public.keyless has neither a primary key nor REPLICA IDENTITY FULL",
		"does not own public.keyed, public.keyless", "may not set session_replication_role",
	} {
		require.Contains(t, all, want)
	}
	require.Len(t, problems, 5, all)
	require.NotContains(t, all, "rev-pw")

	u, err := url.Parse(dst)
	require.NoError(t, err)
	pgtest.Exec(t, dstCluster.URL("postgres"), fmt.Sprintf(`ALTER ROLE %s REPLICATION`, role))
	pgtest.Exec(t, dst, fmt.Sprintf(`GRANT CREATE ON DATABASE %q TO %s; ALTER TABLE keyed OWNER TO %s; ALTER TABLE keyless OWNER TO %s;
		ALTER TABLE keyless REPLICA IDENTITY FULL`, strings.TrimPrefix(u.Path, "/"), role, role, role))
	pgtest.Exec(t, src, fmt.Sprintf(`GRANT SET ON PARAMETER session_replication_role TO %s`, role))
	problems, err = cutover.ReverseProblems(ctx, srcConn, dstConn, tables)
	require.NoError(t, err)
	require.Empty(t, problems)
}
