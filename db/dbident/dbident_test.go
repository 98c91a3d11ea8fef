package dbident

import (
	"testing"
	"time"
)

func TestSame(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	base := Identity{SystemID: "7", StartedAt: t0, DatabaseOID: 16384, Database: "pgmirror"}
	mod := func(f func(*Identity)) Identity { id := base; f(&id); return id }
	cases := []struct {
		name string
		b    Identity
		want bool
	}{
		{"same", base, true},
		{"restarted server: same system", mod(func(i *Identity) { i.StartedAt = t0.Add(time.Hour) }), true},
		{"other cluster, same database oid and name", mod(func(i *Identity) { i.SystemID = "8"; i.StartedAt = t0.Add(time.Hour) }), false},
		{"other database of the same server", mod(func(i *Identity) { i.DatabaseOID = 5; i.Database = "postgres" }), false},
		{"database dropped and created again", mod(func(i *Identity) { i.DatabaseOID = 16999 }), false},
		{"system id unreadable, same start", mod(func(i *Identity) { i.SystemID = "" }), true},
		{"system id unreadable, other start", mod(func(i *Identity) { i.SystemID = ""; i.StartedAt = t0.Add(time.Microsecond) }), false},
	}
	for _, c := range cases {
		if got := Same(base, c.b); got != c.want {
			t.Errorf("%s: Same = %v, want %v", c.name, got, c.want)
		}
		if got := Same(c.b, base); got != c.want {
			t.Errorf("%s (swapped): Same = %v, want %v", c.name, got, c.want)
		}
	}
}
