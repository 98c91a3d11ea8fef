package apply

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
)

const (
	oidInt4    = 23
	oidText    = 25
	oidVarchar = 1043
	oidNumeric = 1700
)

func rel(cols ...change.Column) *change.Relation {
	return &change.Relation{Table: change.TableName{Schema: "public", Name: "t"}, Columns: cols}
}

func col(name string, oid uint32) change.Column {
	return change.Column{Name: name, TypeOID: oid, TypeMod: -1}
}

func known(cols ...knownColumn) []knownColumn { return cols }

func kc(attnum int, name string, oid uint32) knownColumn {
	return knownColumn{Attnum: attnum, Name: name, TypeOID: oid, TypeMod: -1}
}

func live(attnum int, name string, oid uint32) SourceColumn {
	return SourceColumn{Attnum: attnum, Name: name, TypeOID: oid, TypeMod: -1}
}

func dropped(attnum int) SourceColumn { return SourceColumn{Attnum: attnum, Dropped: true} }

// kinds lists the changes as "kind old->new" strings.
func kinds(changes []colsync.Change) []string {
	var out []string
	for _, c := range changes {
		out = append(out, string(c.Kind)+" "+c.OldName+"->"+c.Name)
	}
	return out
}

// TestAlignColumns covers how a new description of a table is matched with
// the known columns by attnum, with and without the source catalog's help,
// including the cases only the catalog tells apart.
func TestAlignColumns(t *testing.T) {
	t.Parallel()
	k := known(kc(1, "id", oidInt4), kc(2, "a", oidText), kc(3, "b", oidText), kc(4, "c", oidInt4))
	cases := []struct {
		name    string
		rel     *change.Relation
		catalog []SourceColumn
		want    []string
	}{
		{"rename, catalog agrees", rel(col("id", oidInt4), col("a", oidText), col("b2", oidText), col("c", oidInt4)),
			[]SourceColumn{live(1, "id", oidInt4), live(2, "a", oidText), live(3, "b2", oidText), live(4, "c", oidInt4)},
			[]string{"rename b->b2"}},
		{"rename without the catalog (same type, same place)", rel(col("id", oidInt4), col("a", oidText), col("b2", oidText), col("c", oidInt4)),
			nil, []string{"rename b->b2"}},
		{"rename then renamed again before the run saw it: the first name is gone from the catalog",
			rel(col("id", oidInt4), col("a", oidText), col("b2", oidText), col("c", oidInt4)),
			[]SourceColumn{live(1, "id", oidInt4), live(2, "a", oidText), live(3, "b3", oidText), live(4, "c", oidInt4)},
			[]string{"rename b->b2"}},
		{"drop in the middle", rel(col("id", oidInt4), col("a", oidText), col("c", oidInt4)),
			[]SourceColumn{live(1, "id", oidInt4), live(2, "a", oidText), dropped(3), live(4, "c", oidInt4)},
			[]string{"drop b->b"}},
		{"drop the last and add one of the same type: the catalog tells them apart",
			rel(col("id", oidInt4), col("a", oidText), col("b", oidText), col("d", oidInt4)),
			[]SourceColumn{live(1, "id", oidInt4), live(2, "a", oidText), live(3, "b", oidText), dropped(4), live(5, "d", oidInt4)},
			[]string{"drop c->c", "add ->d"}},
		{"drop the last and add one later renamed: the catalog shows the drop and a newer column",
			rel(col("id", oidInt4), col("a", oidText), col("b", oidText), col("d", oidInt4)),
			[]SourceColumn{live(1, "id", oidInt4), live(2, "a", oidText), live(3, "b", oidText), dropped(4), live(5, "e", oidInt4)},
			[]string{"drop c->c", "add ->d"}},
		{"type change", rel(col("id", oidInt4), col("a", oidText), col("b", oidVarchar), col("c", oidInt4)),
			[]SourceColumn{live(1, "id", oidInt4), live(2, "a", oidText), live(3, "b", oidVarchar), live(4, "c", oidInt4)},
			[]string{"type b->b"}},
		{"several at once", rel(col("id", oidInt4), col("a2", oidText), col("c", oidText), col("e", oidNumeric)),
			[]SourceColumn{live(1, "id", oidInt4), live(2, "a2", oidText), dropped(3), live(4, "c", oidText), live(5, "e", oidNumeric)},
			[]string{"drop b->b", "rename a->a2", "type c->c", "add ->e"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			attnums := align(k, c.rel, newCatalogView(c.catalog))
			require.Equal(t, c.want, kinds(diffColumns(k, c.rel, attnums)))
		})
	}
	// A first description takes the catalog's attnums by name.
	first := rel(col("id", oidInt4), col("b", oidText))
	require.Equal(t, []int{1, 3}, align(nil, first, newCatalogView([]SourceColumn{live(1, "id", oidInt4), dropped(2), live(3, "b", oidText)})))
	// Without the catalog, attnums are made up above PostgreSQL's.
	require.Equal(t, []int{syntheticAttnum + 1, syntheticAttnum + 2}, align(nil, first, newCatalogView(nil)))
}

// TestCapturedRelation covers how a captured description of a table
// becomes the stream's: by attnum, without stored generated columns, and
// from a trigger that sends no types, with the known types of known
// attnums only.
func TestCapturedRelation(t *testing.T) {
	t.Parallel()
	table := change.TableName{Schema: "public", Name: "t"}
	k := known(kc(1, "id", oidInt4), kc(2, "a", oidText), kc(3, "b", oidText))
	typed := []CapturedColumn{
		{Attnum: 1, Name: "id", TypeOID: oidInt4, TypeMod: -1},
		{Attnum: 2, Name: "a2", TypeOID: oidText, TypeMod: -1},
		{Attnum: 4, Name: "g", TypeOID: oidInt4, TypeMod: -1, Stored: true},
		{Attnum: 5, Name: "c", TypeOID: oidVarchar, TypeMod: 14},
	}
	rel, attnums := capturedRelation(table, k, typed)
	require.Equal(t, []int{1, 2, 5}, attnums)
	require.Equal(t, []string{"drop b->b", "rename a->a2", "add ->c"}, kinds(diffColumns(k, rel, attnums)))
	require.Equal(t, int32(14), rel.Columns[2].TypeMod)

	untyped := []CapturedColumn{{Attnum: 1, Name: "id"}, {Attnum: 2, Name: "a2"}, {Attnum: 5, Name: "c"}}
	rel, attnums = capturedRelation(table, k, untyped)
	require.Equal(t, []int{1, 2}, attnums)
	require.Equal(t, uint32(oidText), rel.Columns[1].TypeOID)
	require.Equal(t, []string{"drop b->b", "rename a->a2"}, kinds(diffColumns(k, rel, attnums)))
}
