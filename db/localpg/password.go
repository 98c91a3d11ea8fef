package localpg

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// legacyPassword is the superuser password of every cluster that versions
// before random passwords initialised.
const legacyPassword = "postgres"

// newPassword returns 32 random bytes as unpadded URL-safe base64: safe in
// URLs, conninfo strings and SQL literals without escaping.
func newPassword() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate password: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// writeSecretFile replaces path with content and a newline, mode 0600 and
// owned by this process's user, through a temporary file and a rename so
// that a crash never leaves a half-written file.
func writeSecretFile(path, content string) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-") // mode 0600
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.WriteString(content + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// readSecretFile returns the first line of path. It refuses a file that
// others than its owner may read or write: its secret may have leaked.
func readSecretFile(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s has mode %04o: only its owner may read it; run chmod 600 %s (and consider the password known to whoever could read it: see docs/operations.md to reset it)", path, st.Mode().Perm(), path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	line = strings.TrimSpace(line)
	if line == "" {
		return "", fmt.Errorf("%s is empty: it must hold the superuser password of the cluster on its first line", path)
	}
	return line, nil
}

// loadPassword reads the password of an existing cluster. It reports
// legacy when PasswordFile does not exist yet.
func (c *Cluster) loadPassword() (legacy bool, err error) {
	if c.cfg.PasswordFile == "" {
		return false, fmt.Errorf("data directory %s already holds a cluster whose password this process does not know: remove the directory, or give Config.PasswordFile", c.cfg.DataDir)
	}
	pw, err := readSecretFile(c.cfg.PasswordFile)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	c.password = pw
	return false, nil
}

// replaceLegacyPassword gives a running cluster that still has the fixed
// password of earlier versions a random one and writes PasswordFile. The
// new password is kept in PasswordFile+".new" until the cluster has it, so
// a start interrupted half way finishes the job on the next one.
func (c *Cluster) replaceLegacyPassword(ctx context.Context) error {
	pending := c.cfg.PasswordFile + ".new"
	next, err := readSecretFile(pending)
	if errors.Is(err, fs.ErrNotExist) {
		if next, err = newPassword(); err == nil {
			err = writeSecretFile(pending, next)
		}
	}
	if err != nil {
		return err
	}
	// The default password first (or a reused cluster whose pg_hba.conf
	// still trusts the socket): then the pending one, which an interrupted
	// start may have set already.
	for _, current := range []string{legacyPassword, next} {
		conn, err := pgx.Connect(ctx, c.socketURL("postgres", current))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "28P01" { // invalid_password
			continue
		}
		if err != nil {
			return fmt.Errorf("connect to the cluster in %s to replace its default password: %w", c.cfg.DataDir, err)
		}
		if current != next {
			// ALTER ROLE takes no parameters; the password is URL-safe base64.
			_, err = conn.Exec(ctx, "ALTER ROLE postgres PASSWORD "+sqlquote.Literal(next))
		}
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("replace the default password of the cluster in %s: %w", c.cfg.DataDir, err)
		}
		if err := os.Rename(pending, c.cfg.PasswordFile); err != nil {
			return fmt.Errorf("keep the new password of the cluster in %s: %w", c.cfg.DataDir, err)
		}
		c.password = next
		return nil
	}
	return fmt.Errorf("the cluster in %s has no password file %s and refuses the default password of earlier versions: restore the file (the superuser's password on one line, mode 0600) or reset the password as docs/operations.md describes", c.cfg.DataDir, c.cfg.PasswordFile)
}
