// Package docs_test holds the tests that keep the documentation in this
// directory true to the code: the import graph of architecture.md and the
// SQL examples of catalog.md and operations.md. The directory has no Go
// code of its own.
package docs_test

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// module is the module path that go list reports.
const module = "github.com/pgmirror/pgmirror/"

// leftOut is the package architecture.md leaves out of its graph for
// legibility (nearly every package imports it).
const leftOut = "engine/change"

type edge struct{ from, to string }

func (e edge) String() string { return e.from + " --> " + e.to }

// TestImportGraph derives the module-internal import graph of the non-test
// code with go list and compares it with the edges of the mermaid block in
// architecture.md's "Import graph" section: every import must be drawn and
// every drawn edge must be an import.
func TestImportGraph(t *testing.T) {
	derived := derivedImports(t)
	drawn, labels := drawnImports(t, "architecture.md")

	var missing, extra []string
	for e := range derived {
		if !drawn[e] {
			missing = append(missing, e.String())
		}
	}
	for e := range drawn {
		if !derived[e] {
			extra = append(extra, e.String())
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	none := func(l []string) []string {
		if len(l) == 0 {
			return []string{"(none)"}
		}
		return l
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("architecture.md's import graph differs from the code (go list):\nmissing edges (imports not drawn):\n  %s\nextra edges (drawn, not imported):\n  %s\nthe block the code gives:\n%s",
			strings.Join(none(missing), "\n  "), strings.Join(none(extra), "\n  "), mermaid(derived, labels))
	}
}

// derivedImports lists, with go list, every import from one package of the
// module to another in non-test files, without engine/change.
func derivedImports(t *testing.T) map[edge]bool {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	edges := map[edge]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		from, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || from == leftOut {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := strings.CutPrefix(imp, module)
			if !ok || to == leftOut {
				continue
			}
			edges[edge{from, to}] = true
		}
	}
	if len(edges) == 0 {
		t.Fatal("go list found no module-internal imports")
	}
	return edges
}

// edgeLine is one mermaid edge: `a[label] --> b[label]`, labels optional.
var edgeLine = regexp.MustCompile(`^\s*([A-Za-z0-9_]+)(?:\[([^\]]+)\])?\s*-->\s*([A-Za-z0-9_]+)(?:\[([^\]]+)\])?\s*$`)

// drawnImports reads the edges of the mermaid block under the "Import
// graph" heading of the named doc. A node's package is its label, or its id
// when it has none. It returns the edges and each package's node id and
// label as written.
func drawnImports(t *testing.T, doc string) (map[edge]bool, map[string]string) {
	t.Helper()
	f, err := os.Open(doc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	section, inBlock, found := false, false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			section = strings.TrimLeft(line, "# ") == "Import graph"
		case section && !inBlock && strings.TrimSpace(line) == "```mermaid":
			inBlock, found = true, true
		case inBlock && strings.TrimSpace(line) == "```":
			inBlock, section = false, false
		case inBlock:
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatalf("%s has no mermaid block under an \"Import graph\" heading", doc)
	}

	type ref struct{ id, label string }
	var refs []ref
	var pairs [][2]string
	for i, line := range lines {
		if i == 0 && strings.HasPrefix(strings.TrimSpace(line), "flowchart") || strings.TrimSpace(line) == "" {
			continue
		}
		m := edgeLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("%s: import graph line %q is not an edge `a[pkg] --> b[pkg]`", doc, line)
			continue
		}
		refs = append(refs, ref{m[1], m[2]}, ref{m[3], m[4]})
		pairs = append(pairs, [2]string{m[1], m[3]})
	}
	pkg := map[string]string{}
	for _, r := range refs {
		if r.label == "" {
			continue
		}
		if p, ok := pkg[r.id]; ok && p != r.label {
			t.Errorf("%s: node %s is labelled both %s and %s", doc, r.id, p, r.label)
		}
		pkg[r.id] = r.label
	}
	name := func(id string) string {
		if p, ok := pkg[id]; ok {
			return p
		}
		return id
	}
	edges := map[edge]bool{}
	for _, p := range pairs {
		e := edge{name(p[0]), name(p[1])}
		if edges[e] {
			t.Errorf("%s: edge %s is drawn twice", doc, e)
		}
		edges[e] = true
	}
	labels := map[string]string{}
	for id, p := range pkg {
		labels[p] = id
	}
	return edges, labels
}

// mermaid writes edges as the doc's block, grouped by importing package,
// with the node ids the doc uses (new packages get their last path element).
func mermaid(edges map[edge]bool, ids map[string]string) string {
	var sorted []edge
	for e := range edges {
		sorted = append(sorted, e)
	}
	slices.SortFunc(sorted, func(a, b edge) int {
		return cmp.Or(strings.Compare(a.from, b.from), strings.Compare(a.to, b.to))
	})
	seen := map[string]bool{}
	node := func(p string) string {
		id, ok := ids[p]
		if !ok {
			id = p
			if i := strings.LastIndex(p, "/"); i >= 0 {
				id = p[i+1:]
			}
		}
		if id == p || seen[p] {
			seen[p] = true
			return id
		}
		seen[p] = true
		return fmt.Sprintf("%s[%s]", id, p)
	}
	var b strings.Builder
	b.WriteString("```mermaid\nflowchart TD\n")
	for _, e := range sorted {
		fmt.Fprintf(&b, "    %s --> %s\n", node(e.from), node(e.to))
	}
	b.WriteString("```\n")
	return b.String()
}
