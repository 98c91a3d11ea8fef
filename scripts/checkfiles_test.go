// Package scripts_test runs the repository's shell scripts on scratch git
// repositories.
package scripts_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// checkRepo makes a git repository holding files (path to content), tracks
// them all, runs check-tracked-files.sh in it with env and returns its
// output and whether it passed.
func checkRepo(t *testing.T, files map[string][]byte, env ...string) (string, bool) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	script, err := filepath.Abs("check-tracked-files.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	run := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("git", "init", "-q"); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	for path, content := range files {
		full := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run("git", "add", "-A"); err != nil {
		t.Fatalf("git add: %v: %s", err, out)
	}
	out, err := run("bash", script)
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("run the script: %v", err)
		}
	}
	return out, err == nil
}

func TestCheckTrackedFiles(t *testing.T) {
	t.Parallel()
	elf := append([]byte("\x7fELF\x02\x01\x01"), bytes.Repeat([]byte{0}, 100)...)
	big := bytes.Repeat([]byte("0123456789abcdef\n"), 1024*1024/17+100) // a little over 1 MB of text
	source := map[string][]byte{"main.go": []byte("package main\n"), "scripts/run.sh": []byte("#!/bin/sh\necho hi\n"), "README.md": []byte("# hi\n")}
	with := func(extra map[string][]byte) map[string][]byte {
		files := map[string][]byte{}
		for k, v := range source {
			files[k] = v
		}
		for k, v := range extra {
			files[k] = v
		}
		return files
	}

	for _, fallback := range []bool{false, true} {
		var env []string
		name := "file"
		if fallback {
			// As on a machine without the file command: the first bytes decide.
			env, name = []string{"CHECK_TRACKED_FILES_NO_FILE=1"}, "first bytes"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, c := range []struct {
				name  string
				files map[string][]byte
				pass  bool
				want  []string
			}{
				{"source only", source, true, []string{"every tracked file is source"}},
				{"executable", with(map[string][]byte{"pgmirror": elf}), false, []string{"pgmirror is an ELF executable", "git rm --cached pgmirror"}},
				{"executable in a vendored folder", with(map[string][]byte{"web/vendor-web/LICENSE": []byte("MIT\n"), "web/vendor-web/tool": elf}), false, []string{"web/vendor-web/tool is an ELF"}},
				{"large file", with(map[string][]byte{"data/dump.sql": big}), false, []string{"data/dump.sql is", "larger than 1 MB"}},
				{"vendored web asset with its licence", with(map[string][]byte{"httpapi/vendor-web/LICENSE.txt": []byte("MIT\n"), "httpapi/vendor-web/js/ui.min.js": big}), true, nil},
				{"vendored web asset without a licence", with(map[string][]byte{"httpapi/vendor-web/ui.min.js": big}), false, []string{"httpapi/vendor-web/ui.min.js is", "larger than 1 MB"}},
				{"vendored web asset over 5 MB", with(map[string][]byte{"ui/vendor/COPYING": []byte("MIT\n"), "ui/vendor/huge.js": bytes.Repeat(big, 6)}), false, []string{"ui/vendor/huge.js is", "larger than 5 MB"}},
			} {
				out, passed := checkRepo(t, c.files, env...)
				if passed != c.pass {
					t.Fatalf("%s: passed %v, want %v:\n%s", c.name, passed, c.pass, out)
				}
				for _, w := range c.want {
					if !strings.Contains(out, w) {
						t.Fatalf("%s: output does not contain %q:\n%s", c.name, w, out)
					}
				}
			}
		})
	}
}
