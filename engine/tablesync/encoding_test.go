package tablesync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// A snapshot from a UTF8 source into a LATIN1 destination converts text
// between the encodings (every session's client_encoding is UTF8): the
// destination holds the same characters, not their UTF8 bytes read as
// LATIN1.
func TestRunIntoOtherEncoding(t *testing.T) {
	for _, borrow := range []bool{false, true} {
		t.Run(fmt.Sprintf("borrowed=%v", borrow), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
			dstURL := pgtest.NewDatabaseWith(t, pgtest.DestCluster(t), "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
			ddl := `CREATE TABLE public.small (id int PRIMARY KEY, v text, a text[])`
			pgtest.Exec(t, srcURL, ddl+`; INSERT INTO public.small SELECT g, 'café Ångström ß ÿ ' || g, ARRAY['naïve', 'Ñ'] FROM generate_series(1, 100) g`)
			pgtest.Exec(t, dstURL, ddl)
			cfg := Config{Source: pgtest.ConnConfig(t, srcURL), Dest: pgtest.ConnConfig(t, dstURL), Tables: testMappings("small")}
			if borrow {
				cfg.SourceConn, cfg.DestConn = connect(t, srcURL), connect(t, dstURL)
			}
			require.NoError(t, Run(ctx, cfg, nil))
			dst := connect(t, dstURL+"&client_encoding=UTF8")
			var v, a string
			var n int
			require.NoError(t, dst.QueryRow(ctx, `SELECT v, a::text, length(v) FROM public.small WHERE id = 7`).Scan(&v, &a, &n))
			require.Equal(t, "café Ångström ß ÿ 7", v)
			require.Equal(t, "{naïve,Ñ}", a)
			require.Equal(t, 19, n)
		})
	}
}
