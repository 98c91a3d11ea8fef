package apply

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

var (
	target = change.TableName{Schema: "app", Name: `Odd"Name`}
	names  = []string{"id", "region", "v", "big"}
	types  = []string{"bigint", "text", "integer", "text"}
	keyPos = []int{0, 1}
)

func TestStageStatements(t *testing.T) {
	t.Parallel()
	require.Equal(t, `CREATE TEMP TABLE "s_1" (op text, mask text, c0 bigint, c1 text COLLATE "pg_catalog"."C") ON COMMIT DELETE ROWS`,
		createStageSQL("s_1", []string{"bigint", `text COLLATE "pg_catalog"."C"`}))
	require.Equal(t, `TRUNCATE pg_temp."s_1"`, truncateStageSQL("s_1"))
	require.Equal(t, `DROP TABLE IF EXISTS pg_temp."s_1"`, dropStageSQL("s_1"))
	require.Equal(t, `COPY pg_temp."s_1" FROM STDIN`, copyStageSQL("s_1", false))
	require.Equal(t, `COPY pg_temp."s_1" FROM STDIN WITH (FORMAT binary)`, copyStageSQL("s_1", true))
	require.Equal(t, `COPY "app"."Odd""Name" ("id", "region", "v", "big") FROM STDIN`, copyTargetSQL(target, names, false))
	require.Equal(t, `COPY "app"."Odd""Name" ("id", "region", "v", "big") FROM STDIN WITH (FORMAT binary)`, copyTargetSQL(target, names, true))
}

func TestKeyedStatements(t *testing.T) {
	t.Parallel()
	require.Equal(t, `DELETE FROM "app"."Odd""Name" AS t USING pg_temp."s" AS s WHERE s.op = 'd' AND t."id" = s.c0 AND t."region" = s.c1`,
		deleteSQL(target, "s", names, keyPos))
	require.Equal(t, `INSERT INTO "app"."Odd""Name" AS t ("id", "region", "v", "big") OVERRIDING SYSTEM VALUE SELECT s.c0, s.c1, s.c2, s.c3`+
		` FROM pg_temp."s" AS s WHERE s.op = 'i' ON CONFLICT ("id", "region") DO UPDATE SET "v" = EXCLUDED."v", "big" = EXCLUDED."big"`,
		insertSQL(target, "s", names, keyPos, opInsert))
	require.Equal(t, `INSERT INTO "app"."Odd""Name" AS t ("id", "region") OVERRIDING SYSTEM VALUE SELECT s.c0, s.c1`+
		` FROM pg_temp."s" AS s WHERE s.op = 'i' ON CONFLICT ("id", "region") DO NOTHING`,
		insertSQL(target, "s", names[:2], keyPos, opInsert))
	require.Equal(t, `INSERT INTO "app"."Odd""Name" AS t ("id", "region", "v", "big") OVERRIDING SYSTEM VALUE SELECT s.c0, s.c1, s.c2, s.c3`+
		` FROM pg_temp."s" AS s WHERE s.op = 'u' AND s.mask = '' ON CONFLICT ("id", "region") DO NOTHING`,
		insertSQL(target, "s", names, keyPos, opUpdate))
	require.Equal(t, `UPDATE "app"."Odd""Name" AS t SET "v" = s.c2, "big" = s.c3 FROM pg_temp."s" AS s WHERE s.op = 'u' AND s.mask = '' AND t."id" = s.c0 AND t."region" = s.c1`,
		updateSQL(target, "s", names, keyPos, nil))
	require.Equal(t, `UPDATE "app"."Odd""Name" AS t SET "v" = s.c2 FROM pg_temp."s" AS s WHERE s.op = 'u' AND s.mask = $1 AND t."id" = s.c0 AND t."region" = s.c1`,
		updateSQL(target, "s", names, keyPos, []int{3}))
	require.Equal(t, "", updateSQL(target, "s", names, keyPos, []int{2, 3}))
	require.Equal(t, "", updateSQL(target, "s", names[:2], keyPos, nil))
}

func TestRowStatements(t *testing.T) {
	t.Parallel()
	require.Equal(t, `UPDATE "app"."Odd""Name" SET "id" = $1::bigint, "v" = $2::integer WHERE "id" = $3::bigint AND "region" = $4::text`,
		moveSQL(target, names, types, []int{0, 2}, keyPos))
	require.Equal(t, `DELETE FROM "app"."Odd""Name" WHERE ctid = (SELECT ctid FROM "app"."Odd""Name" WHERE "id"::text IS NOT DISTINCT FROM $1::bigint::text AND "v"::text IS NOT DISTINCT FROM $2::integer::text LIMIT 1)`,
		rowSQL(target, false, true, names, types, nil, []int{0, 2}))
	require.Equal(t, `UPDATE "app"."Odd""Name" SET "big" = $1::text WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM "app"."Odd""Name" WHERE false LIMIT 1)`,
		rowSQL(target, true, false, names, types, []int{3}, nil))
	require.Equal(t, "SELECT 1", rowSQL(target, false, false, names, types, nil, []int{0}))
}

func TestKeyedRowStatements(t *testing.T) {
	t.Parallel()
	require.Equal(t, `DELETE FROM "app"."Odd""Name" WHERE "id" = $1::bigint AND "region" = $2::text`,
		deleteRowSQL(target, names, types, keyPos))
	require.Equal(t, `INSERT INTO "app"."Odd""Name" ("id", "region", "v", "big") OVERRIDING SYSTEM VALUE VALUES ($1::bigint, $2::text, $3::integer, $4::text)`+
		` ON CONFLICT ("id", "region") DO UPDATE SET "v" = EXCLUDED."v", "big" = EXCLUDED."big"`,
		insertRowSQL(target, names, types, keyPos, true))
	require.Equal(t, `INSERT INTO "app"."Odd""Name" ("id", "region", "v", "big") OVERRIDING SYSTEM VALUE VALUES ($1::bigint, $2::text, $3::integer, $4::text)`+
		` ON CONFLICT ("id", "region") DO NOTHING`,
		insertRowSQL(target, names, types, keyPos, false))
	require.Equal(t, `INSERT INTO "app"."Odd""Name" ("id", "region") OVERRIDING SYSTEM VALUE VALUES ($1::bigint, $2::text) ON CONFLICT ("id", "region") DO NOTHING`,
		insertRowSQL(target, names[:2], types[:2], keyPos, true))
}

func TestOtherStatements(t *testing.T) {
	t.Parallel()
	other := change.TableName{Schema: "public", Name: "b"}
	require.Equal(t, `TRUNCATE "app"."Odd""Name", "public"."b" RESTART IDENTITY CASCADE`, truncateSQL([]change.TableName{target, other}, true, true))
	require.Equal(t, `TRUNCATE "public"."b"`, truncateSQL([]change.TableName{other}, false, false))
	require.Equal(t, `ALTER TABLE "public"."b" ALTER COLUMN "x y" DROP NOT NULL`, dropNotNullSQL(other, "x y"))
}
