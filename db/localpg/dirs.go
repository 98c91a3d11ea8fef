package localpg

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// TempDir creates a new directory for clusters like os.MkdirTemp (dir ""
// means the system temp directory). When clusters run as the postgres OS
// user (this process is root), the new directory gets mode 0711 so that
// user can traverse it; Start never changes the mode of an existing one.
func TempDir(dir, pattern string) (string, error) {
	path, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", fmt.Errorf("create temporary directory: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(path, 0o711); err != nil {
			os.RemoveAll(path)
			return "", fmt.Errorf("chmod temporary directory %s: %w", path, err)
		}
	}
	return path, nil
}

// prepareDirs creates the missing directories above the data directory and,
// when the cluster runs as another OS user, checks that this user can reach
// the data directory. It never changes the mode of an existing directory:
// directories it creates get 0711 when the cluster runs as another user
// (traversable, not listable), 0700 otherwise.
func (c *Cluster) prepareDirs(ctx context.Context) error {
	parent := filepath.Dir(c.cfg.DataDir)
	mode := os.FileMode(0o700)
	if c.asUser != "" {
		mode = 0o711
	}
	if err := mkdirAllMode(parent, mode); err != nil {
		return err
	}
	if c.asUser == "" || c.canTraverse(ctx, parent) {
		return nil
	}
	blocked := parent
	for _, p := range ancestors(parent) {
		if !c.canTraverse(ctx, p) {
			blocked = p
			break
		}
	}
	return fmt.Errorf("the %s OS user, which PostgreSQL runs as when pgmirror runs as root, cannot reach the data directory %s: it may not enter %s (%s). "+
		"pgmirror does not change the permissions of existing directories: let that user through (chmod o+x %s), or choose a data directory below a path it can traverse, such as /var/lib/pgmirror",
		c.asUser, c.cfg.DataDir, blocked, describeDir(blocked), blocked)
}

// MkdirAll creates dir and its missing parents with the mode that
// directories above a cluster's data directory get: 0711 when this process
// runs as root (the cluster then runs as the postgres OS user, which must
// traverse them to reach a data directory below), 0700 otherwise. Existing
// directories keep their mode. For callers that put files of their own
// next to the data directory (for example the service's key file) before
// the cluster starts.
func MkdirAll(dir string) error {
	mode := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		mode = 0o711
	}
	return mkdirAllMode(dir, mode)
}

// mkdirAllMode is os.MkdirAll that gives exactly mode to the directories it
// creates (whatever the umask) and leaves existing ones alone.
func mkdirAllMode(path string, mode os.FileMode) error {
	if st, err := os.Stat(path); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", path)
		}
		return nil
	}
	if parent := filepath.Dir(path); parent != path {
		if err := mkdirAllMode(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, mode); err != nil && !os.IsExist(err) {
		return fmt.Errorf("create directory %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("chmod new directory %s: %w", path, err)
	}
	return nil
}

// ancestors returns path's directories from the root down to path itself.
func ancestors(path string) []string {
	var out []string
	for p := path; ; p = filepath.Dir(p) {
		out = append([]string{p}, out...)
		if filepath.Dir(p) == p {
			return out
		}
	}
}

// canTraverse reports whether the cluster's OS user may enter dir (and
// every directory above it), asking the kernel rather than guessing from
// modes, groups and ACLs.
func (c *Cluster) canTraverse(ctx context.Context, dir string) bool {
	return c.asUserCommand(ctx, "test", "-x", dir).Run() == nil
}

// describeDir gives a directory's mode and owner for an error message.
func describeDir(dir string) string {
	st, err := os.Stat(dir)
	if err != nil {
		return err.Error()
	}
	owner := "?"
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		owner = strconv.FormatUint(uint64(sys.Uid), 10)
		if u, err := user.LookupId(owner); err == nil {
			owner = u.Username
		}
	}
	return fmt.Sprintf("mode %04o, owner %s", st.Mode().Perm(), owner)
}
