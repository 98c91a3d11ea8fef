package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
)

// Database names. The source cluster holds two identical copies of the
// data (bench_a for the COPY pipe and native replication, bench_b for
// pgmirror), so each system starts from the same rows and runs the same
// workload on them. The destination cluster holds one target database per
// system and pgmirror's catalog.
const (
	srcNative   = "bench_a"
	srcPgmirror = "bench_b"
	dstCopy     = "copy_dst"
	dstNative   = "native_dst"
	dstPgmirror = "pgmirror_dst"
	catalogDB   = "pgmirror_catalog"
	benchTable  = "public.bench"
)

// bench is the state of one mode's run.
type bench struct {
	opts  options
	mode  mode
	start time.Time
	bin   string // the pgmirror binary

	dir      string // this mode's directory, removed at its end
	src, dst *localpg.Cluster
	svc      *service

	jails hostJails // the separate-hosts modes' CPU jails

	tableBytes int64
	results    results
	// srcVersion and dstVersion are the clusters' server_version.
	srcVersion, dstVersion string
}

// sharedSettings are postgresql.conf lines for both clusters, in every
// mode: no checkpoint in the middle of a measurement (the bench checkpoints
// between them). Only the durability settings differ between the modes.
var sharedSettings = map[string]string{
	"max_wal_size":       "'16GB'",
	"checkpoint_timeout": "'1h'",
}

func (b *bench) logf(format string, args ...any) {
	logf(b.start, b.mode.name, format, args...)
}

// logf writes a progress line to stderr: the time since start, the mode
// (if any) and the message.
func logf(start time.Time, mode, format string, args ...any) {
	el := time.Since(start).Truncate(100 * time.Millisecond)
	if mode != "" {
		mode += ": "
	}
	fmt.Fprintf(os.Stderr, "[%8s] %s%s\n", el, mode, fmt.Sprintf(format, args...))
}

// setup starts the clusters and generates the data.
func (b *bench) setup(ctx context.Context) error {
	if err := os.Mkdir(b.dir, 0o755); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	var err error
	b.src, err = localpg.Start(ctx, localpg.Config{
		DataDir: filepath.Join(b.dir, "source"), Logical: true, Durable: b.mode.durable, Settings: sharedSettings, BinDir: b.opts.srcBin,
	})
	if err != nil {
		return fmt.Errorf("start source cluster: %w", err)
	}
	b.dst, err = localpg.Start(ctx, localpg.Config{
		DataDir: filepath.Join(b.dir, "destination"), Durable: b.mode.durable, Settings: sharedSettings, BinDir: b.opts.dstBin,
	})
	if err != nil {
		return fmt.Errorf("start destination cluster: %w", err)
	}
	if err := queryRow(ctx, b.url(b.src, "postgres"), `SHOW server_version`, &b.srcVersion); err != nil {
		return err
	}
	if err := queryRow(ctx, b.url(b.dst, "postgres"), `SHOW server_version`, &b.dstVersion); err != nil {
		return err
	}
	b.logf("source cluster on port %d (PostgreSQL %s, wal_level=logical), destination on port %d (PostgreSQL %s)", b.src.Port(), b.srcVersion, b.dst.Port(), b.dstVersion)

	for _, name := range []string{dstCopy, dstNative, dstPgmirror, catalogDB} {
		if err := execSQL(ctx, b.url(b.dst, "postgres"), "CREATE DATABASE "+name); err != nil {
			return err
		}
	}
	ddl := []string{destinationDDL}
	if b.opts.uniqueIndex {
		ddl = append(ddl, destinationUniqueIndex)
	}
	for _, name := range []string{dstCopy, dstNative, dstPgmirror} {
		if err := execSQL(ctx, b.url(b.dst, name), ddl...); err != nil {
			return fmt.Errorf("create destination table in %s: %w", name, err)
		}
	}
	if err := execSQL(ctx, b.url(b.src, "postgres"), "CREATE DATABASE "+srcNative); err != nil {
		return err
	}
	b.logf("generating %d rows in %s", b.opts.rows, srcNative)
	t0 := time.Now()
	if err := generate(ctx, b.url(b.src, srcNative), b.opts.rows); err != nil {
		return err
	}
	// A file copy of the database: the same rows, pages and hint bits
	// (STRATEGY from PostgreSQL 15; before, a file copy is the only way).
	var version int
	if err := queryRow(ctx, b.url(b.src, "postgres"), `SELECT current_setting('server_version_num')::int`, &version); err != nil {
		return err
	}
	create := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", srcPgmirror, srcNative)
	if version >= 150000 {
		create += " STRATEGY FILE_COPY"
	}
	if err := execSQL(ctx, b.url(b.src, "postgres"), "CHECKPOINT", create); err != nil {
		return err
	}
	if err := queryRow(ctx, b.url(b.src, srcNative), `SELECT pg_table_size('public.bench')`, &b.tableBytes); err != nil {
		return err
	}
	b.logf("generated %d rows, table %s, in %s", b.opts.rows, mib(b.tableBytes), time.Since(t0).Round(time.Second))
	if b.mode.separate {
		// Generating the data is not measured: it runs on every core.
		if err := b.confineClusters(hostCPUs); err != nil {
			return err
		}
		b.logf("source and destination clusters confined to %.2f CPU each", hostCPUs)
	}
	return nil
}

// checkpoint flushes both clusters so that a measurement does not pay for
// an earlier one's dirty buffers.
func (b *bench) checkpoint(ctx context.Context) error {
	for _, c := range []*localpg.Cluster{b.src, b.dst} {
		if err := execSQL(ctx, b.url(c, "postgres"), "CHECKPOINT"); err != nil {
			return err
		}
	}
	return nil
}

// cleanup stops the pgmirror process and the clusters and removes the
// mode's directory (unless -keep). It runs on a fresh context: the run's
// may be done.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if b.svc != nil {
		b.svc.stop(30 * time.Second)
	}
	for _, c := range []*localpg.Cluster{b.src, b.dst} {
		if c == nil {
			continue
		}
		if err := c.Stop(ctx); err != nil {
			b.logf("warning: %v", err)
		}
	}
	b.removeJails()
	if b.dir == "" || b.opts.keep {
		return
	}
	if err := os.RemoveAll(b.dir); err != nil {
		b.logf("warning: remove %s: %v", b.dir, err)
	}
}

// url is a connection URL for database db of cluster c, with the session
// settings every bench connection uses, plus extra "name=value" settings.
func (b *bench) url(c *localpg.Cluster, db string, extra ...string) string {
	u := c.URL(db) + "&timezone=UTC&application_name=pgmirror-bench"
	for _, e := range extra {
		u += "&" + e
	}
	return u
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return conn, nil
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// execSQL runs statements, one by one, on a new connection.
func execSQL(ctx context.Context, url string, stmts ...string) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	return nil
}

// queryRow runs a one-row query on a new connection.
func queryRow(ctx context.Context, url, sql string, dest ...any) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		return fmt.Errorf("%s: %w", firstLine(sql), err)
	}
	return nil
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i] + " ..."
		}
	}
	if len(s) > 120 {
		return s[:120] + " ..."
	}
	return s
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
