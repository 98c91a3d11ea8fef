package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	fence   = regexp.MustCompile("(?ms)^[ \t]*```.*?^[ \t]*```[ \t]*$")
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	link    = regexp.MustCompile(`\]\(([^)\s]*)\)`)
)

// anchor is GitHub's anchor of a heading: lower case, punctuation other
// than - and _ dropped, spaces made hyphens.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown file's headings (a repeated
// heading gets -1, -2, ... as on GitHub).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		a := anchor(m[1])
		for i := 1; out[a]; i++ {
			a = anchor(m[1]) + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	return out
}

// TestLinks checks every relative link of the docs: the file exists, and a
// #fragment into a markdown file names one of its headings.
func TestLinks(t *testing.T) {
	docs, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string]map[string]bool{}
	headings := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(text))
		return cache[path], nil
	}
	checked := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(text), ""), -1) {
			target := m[1]
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			if path == "" {
				path = doc
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s: link %s: %v", doc, target, err)
				continue
			}
			checked++
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			a, err := headings(path)
			if err != nil {
				t.Fatal(err)
			}
			if !a[frag] {
				t.Errorf("%s: link %s: %s has no heading with the anchor #%s", doc, target, path, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d links", checked)
	}
}
