package tablesync

import (
	"strings"
	"testing"

	"github.com/pgmirror/pgmirror/engine/change"
)

func TestWaves(t *testing.T) {
	name := func(n string) change.TableName { return change.TableName{Schema: "public", Name: n} }
	edge := func(child, parent string) fkEdge { return fkEdge{child: name(child), parent: name(parent)} }
	for _, tc := range []struct {
		desc   string
		tables []string
		edges  []fkEdge
		want   string // waves separated by " | ", tables in a wave by ","
	}{
		{"no foreign keys: one wave in the given order", []string{"b", "a", "c"}, nil, "b,a,c"},
		{"child after parent", []string{"items", "orders"}, []fkEdge{edge("items", "orders")}, "orders | items"},
		{"chain of three", []string{"c", "b", "a"}, []fkEdge{edge("c", "b"), edge("b", "a")}, "a | b | c"},
		{"two children of one parent share a wave", []string{"x", "y", "p"},
			[]fkEdge{edge("x", "p"), edge("y", "p")}, "p | x,y"},
		{"a parent outside the copy does not hold a table back", []string{"items"},
			[]fkEdge{edge("items", "orders")}, "items"},
		{"a child outside the copy does not matter", []string{"orders"},
			[]fkEdge{edge("items", "orders")}, "orders"},
		{"a cycle goes last, together", []string{"a", "b", "root"},
			[]fkEdge{edge("a", "b"), edge("b", "a"), edge("a", "root")}, "root | a,b"},
		{"two parents: after both", []string{"c", "p1", "p2"},
			[]fkEdge{edge("c", "p1"), edge("c", "p2"), edge("p2", "p1")}, "p1 | p2 | c"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var jobs []*tableJob
			for _, tb := range tc.tables {
				jobs = append(jobs, &tableJob{m: change.Mapping{Source: name("src_" + tb), Destination: name(tb)}})
			}
			var got []string
			for _, w := range waves(jobs, tc.edges) {
				var names []string
				for _, j := range w {
					names = append(names, j.m.Destination.Name)
				}
				got = append(got, strings.Join(names, ","))
			}
			if s := strings.Join(got, " | "); s != tc.want {
				t.Errorf("waves = %q, want %q", s, tc.want)
			}
		})
	}
}

// A name with a dot must not collide with a schema-qualified name: waves
// key tables by schema and name, not by a joined string.
func TestWavesNamesWithDots(t *testing.T) {
	a := change.TableName{Schema: "a.b", Name: "c"}
	b := change.TableName{Schema: "a", Name: "b.c"}
	jobs := []*tableJob{{m: change.Mapping{Destination: a}}, {m: change.Mapping{Destination: b}}}
	w := waves(jobs, []fkEdge{{child: a, parent: b}})
	if len(w) != 2 || w[0][0] != jobs[1] || w[1][0] != jobs[0] {
		t.Errorf("waves = %v, want b before a", w)
	}
}
