package localpg

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// CacheDir is where scripts/install-pg-majors.sh unpacks the server
// binaries of other PostgreSQL majors, one directory per release
// (<CacheDir>/18.4.0-beta.17/bin/initdb): PGMIRROR_PG_CACHE when set, else
// /var/cache/pgmirror/pg for root (whose clusters run as the postgres OS
// user, who cannot enter /root) and ${XDG_CACHE_HOME:-~/.cache}/pgmirror/pg
// for anyone else.
func CacheDir() string {
	if dir := os.Getenv("PGMIRROR_PG_CACHE"); dir != "" {
		return dir
	}
	if os.Geteuid() == 0 {
		return "/var/cache/pgmirror/pg"
	}
	if dir := os.Getenv("XDG_CACHE_HOME"); dir != "" {
		return filepath.Join(dir, "pgmirror", "pg")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "pgmirror-pg")
	}
	return filepath.Join(home, ".cache", "pgmirror", "pg")
}

var releaseDir = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(?:-.*)?$`)

// BinDirForMajor returns a directory holding initdb and pg_ctl of the given
// PostgreSQL major: the distribution's /usr/lib/postgresql/<major>/bin
// when installed, else the newest release of that major in CacheDir. The
// error says how to install it.
func BinDirForMajor(major int) (string, error) {
	if major <= 0 {
		return FindBinDir("")
	}
	dist := filepath.Join("/usr/lib/postgresql", strconv.Itoa(major), "bin")
	if isFile(filepath.Join(dist, "initdb")) {
		return dist, nil
	}
	cache := CacheDir()
	entries, _ := os.ReadDir(cache)
	type release struct {
		minor, patch int
		dir          string
	}
	var found []release
	for _, e := range entries {
		m := releaseDir.FindStringSubmatch(e.Name())
		if m == nil || m[1] != strconv.Itoa(major) {
			continue
		}
		dir := filepath.Join(cache, e.Name())
		// .installed is written last: a directory without it is incomplete.
		if !isFile(filepath.Join(dir, ".installed")) || !isFile(filepath.Join(dir, "bin", "initdb")) {
			continue
		}
		minor, _ := strconv.Atoi(m[2])
		patch, _ := strconv.Atoi(m[3])
		found = append(found, release{minor, patch, filepath.Join(dir, "bin")})
	}
	if len(found) == 0 {
		return "", fmt.Errorf("PostgreSQL %d server binaries not found in %s nor in %s: run `bash scripts/install-pg-majors.sh %d` (make test does) or install the postgresql-%d package", major, dist, cache, major, major)
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].minor != found[j].minor {
			return found[i].minor > found[j].minor
		}
		return found[i].patch > found[j].patch
	})
	return found[0].dir, nil
}

// BinDirMajor returns the PostgreSQL major of the server binaries in dir
// (postgres --version).
func BinDirMajor(dir string) (int, error) {
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s/postgres --version: %w", dir, err)
	}
	// "postgres (PostgreSQL) 18.4" or "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
	fields := strings.Fields(strings.TrimSpace(string(out)))
	if len(fields) < 3 {
		return 0, fmt.Errorf("%s/postgres --version: unexpected output %q", dir, out)
	}
	major, err := strconv.Atoi(strings.SplitN(fields[2], ".", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("%s/postgres --version: unexpected output %q", dir, out)
	}
	return major, nil
}

func isFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
