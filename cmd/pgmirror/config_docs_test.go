package main

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestConfigDocumented holds docs/configuration.md to the code: every
// SERVICE_* variable this package reads has a row there (the command-line
// client's SERVICE_URL is in docs/cli.md), every row is a variable the code
// reads, and every default written as a value is the real one: setting the
// variable to the documented default gives the same configuration as
// leaving it unset.
func TestConfigDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(SERVICE_[A-Z0-9_]+)` \\| ([^|]*) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		if _, dup := documented[m[1]]; dup {
			t.Errorf("configuration.md documents %s twice", m[1])
		}
		documented[m[1]] = strings.TrimSpace(m[2])
	}

	read := map[string]bool{}
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`"(SERVICE_[A-Z0-9_]+)"`)
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range name.FindAllStringSubmatch(string(src), -1) {
			read[m[1]] = true
		}
	}
	if len(read) < 10 {
		t.Fatalf("found only %d SERVICE_* variables in the sources: %v", len(read), read)
	}
	for v := range read {
		if _, ok := documented[v]; !ok && !(v == "SERVICE_URL" && strings.Contains(string(cli), "`SERVICE_URL`")) {
			t.Errorf("%s is read by the code but has no row in docs/configuration.md", v)
		}
	}

	base, err := loadConfig(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	value := regexp.MustCompile("^`([^`]+)`")
	var checked []string
	for v, def := range documented {
		if !read[v] {
			t.Errorf("docs/configuration.md documents %s, which the code does not read", v)
			continue
		}
		m := value.FindStringSubmatch(def)
		if m == nil {
			// "unset: ...", "generated": no value to set.
			if !strings.HasPrefix(def, "unset") && def != "generated" {
				t.Errorf("%s: default %q is neither a `value` nor unset/generated", v, def)
			}
			continue
		}
		cfg, err := loadConfig(func(k string) string {
			if k == v {
				return m[1]
			}
			return ""
		})
		if err != nil {
			t.Errorf("%s=%s (its documented default) is refused: %v", v, m[1], err)
			continue
		}
		cfg.adminPasswordSet = false
		if !reflect.DeepEqual(cfg, base) {
			t.Errorf("%s: the documented default %s is not the real one (the configuration differs from the one without the variable)", v, m[1])
		}
		checked = append(checked, v)
	}
	slices.Sort(checked)
	t.Logf("defaults checked: %s", strings.Join(checked, ", "))
}
