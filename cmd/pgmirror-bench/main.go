// Command pgmirror-bench compares pgmirror with a plain binary COPY pipe and
// with PostgreSQL's native logical replication, in one run, on the same
// generated data and the same workloads, on throwaway local clusters.
//
//	go run ./cmd/pgmirror-bench                 # full size: 2,000,000 rows
//	go run ./cmd/pgmirror-bench -rows 200000    # a quick run
//
// It measures two modes, one after the other, each on its own pair of
// clusters: "fast" (fsync, synchronous_commit and full_page_writes off, as
// the test clusters) and "durable" (PostgreSQL's defaults). In each mode it
// starts a logical source cluster and a destination cluster on loopback in
// a temporary directory, generates the data, and measures:
//
//   - the snapshot: a single binary COPY pipe (run twice, first and right
//     after pgmirror's snapshot, and taken as the mean), native CREATE
//     SUBSCRIPTION with copy_data, and a pgmirror mirror created through
//     its REST API;
//   - catch-up after a pause, for four workloads (changes in 100-row
//     transactions, single-row transactions, changes in 10,000-row
//     transactions, one large INSERT transaction), native and pgmirror,
//     with the CPU time of each party per change and the pgmirror
//     process's peak RSS;
//   - steady-state lag percentiles under a paced load of single-row
//     transactions, native and pgmirror.
//
// Then, on a pair of clusters of its own, the scale measurement (scale.go;
// -scale-mirrors, default 100, 0 leaves it out; -scale-only runs only it):
// two pgmirror replicas on one catalog run that many small mirrors; it
// reports the time until all run, the connections per mirror on each
// database, the idle CPU time and transactions per mirror, the takeover
// after a kill -9 of one replica, and checks every table equal.
//
//	go run ./cmd/pgmirror-bench -scale-only -scale-mirrors 10
//
// It prints a section of tables per mode (times, rates, ratios, targets,
// CPU) and a summary of every ratio against its target. Everything it
// started (clusters, the pgmirror process) is stopped at the end, also on
// error or Ctrl-C. See docs/performance.md.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgmirror/pgmirror/db/localpg"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgmirror-bench:", err)
		os.Exit(1)
	}
}

// mode is a cluster configuration the run measures.
type mode struct {
	name    string // "fast", "durable", "fast-separate" or "durable-separate"
	durable bool   // localpg.Config.Durable: PostgreSQL's defaults
	// separate confines the source cluster, the destination cluster and
	// the pgmirror process to hostCPUs each (hosts.go), as three hosts of
	// one size; otherwise they share every core of the machine.
	separate bool
}

// hostCPUs is each party's CPU share in the separate-hosts modes: two
// cores split in three.
const hostCPUs = 0.66

// settingsText describes the mode's durability settings and CPU split.
func (m mode) settingsText() string {
	s := "fsync, synchronous_commit and full_page_writes off, as the test clusters"
	if m.durable {
		s = "fsync, synchronous_commit and full_page_writes on, PostgreSQL's defaults"
	}
	if m.separate {
		s += fmt.Sprintf("; separate hosts: the source cluster, the destination cluster (with pgmirror's catalog) and the pgmirror process confined to %.2f CPU each", hostCPUs)
	}
	return s
}

var knownModes = map[string]mode{
	"fast":             {name: "fast"},
	"durable":          {name: "durable", durable: true},
	"fast-separate":    {name: "fast-separate", separate: true},
	"durable-separate": {name: "durable-separate", durable: true, separate: true},
}

// parseModes parses a comma-separated list of mode names.
func parseModes(list string) ([]mode, error) {
	var out []mode
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		m, ok := knownModes[name]
		if !ok {
			return nil, fmt.Errorf("-modes: unknown mode %q (use fast, durable, fast-separate or durable-separate, comma-separated)", name)
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// options are the command-line settings of one run.
type options struct {
	rows        int64
	changes     int64
	single      int64
	lagRate     int
	lagDuration time.Duration
	workDir     string
	binary      string
	modes       []mode
	timeout     time.Duration
	keep        bool
	// snapshotWorkers, when set, is the mirror's snapshot_max_parallel_workers.
	snapshotWorkers int
	// uniqueIndex adds a unique index besides the primary key to every
	// destination table (pgmirror then applies changes in the source's
	// order instead of folding them by key).
	uniqueIndex bool
	pprofURL    string
	profileDir  string
	// scaleMirrors is the mirror count of the scale measurement (scale.go),
	// 0 to leave it out; scaleOnly runs only it.
	scaleMirrors int
	scaleOnly    bool
	// largeRows is the size of the live large transactions (largetx.go),
	// 0 to leave them out; largeOnly measures only them (and the initial
	// syncs they need).
	largeRows int64
	largeOnly bool
	// srcMajor and dstMajor are the PostgreSQL majors of the source and
	// destination clusters (0: the default binaries, see localpg); srcBin
	// and dstBin their binaries' directories.
	srcMajor, dstMajor int
	srcBin, dstBin     string
	out                io.Writer
}

func parseOptions(args []string) (options, error) {
	o := options{out: os.Stdout}
	var modes string
	var durable bool
	fs := flag.NewFlagSet("pgmirror-bench", flag.ContinueOnError)
	fs.Int64Var(&o.rows, "rows", 2_000_000, "rows in the generated table (about 200 bytes each)")
	fs.Int64Var(&o.changes, "changes", 0, "changes in each of the two batched catch-up workloads (default rows/4)")
	fs.Int64Var(&o.single, "single", 0, "transactions in the single-row catch-up workload (default rows/20)")
	fs.IntVar(&o.lagRate, "lag-rate", 2000, "single-row transactions per second in the lag measurement")
	fs.DurationVar(&o.lagDuration, "lag-duration", 10*time.Second, "how long the paced lag load runs")
	fs.StringVar(&o.workDir, "workdir", "", "parent directory of the temporary cluster directories (default the system temp dir)")
	fs.StringVar(&o.binary, "pgmirror", "", "a pgmirror binary to run (default: go build ./cmd/pgmirror)")
	fs.StringVar(&modes, "modes", "fast,durable,durable-separate", "cluster modes to measure, one after the other: fast (fsync, synchronous_commit, full_page_writes off), durable (PostgreSQL's defaults); in fast-separate and durable-separate, the source cluster, the destination cluster and pgmirror are confined to 0.66 CPU each (a cgroup quota; root on Linux), as three hosts")
	fs.BoolVar(&durable, "durable", false, "alias for -modes durable")
	fs.DurationVar(&o.timeout, "timeout", 90*time.Minute, "give up after this long (the whole run, all modes)")
	fs.IntVar(&o.snapshotWorkers, "snapshot-workers", 0, "the mirror's snapshot_max_parallel_workers (default: the API's default, 4)")
	fs.BoolVar(&o.uniqueIndex, "unique-index", false, "give every destination table a unique index besides its primary key (on b, id), as a schema restored with pg_dump has: pgmirror then applies in the source's order")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (cluster data, pgmirror log) after the run")
	fs.StringVar(&o.pprofURL, "pgmirror-pprof", "", "base URL of the pgmirror process's net/http/pprof endpoint, if the binary has one: CPU profiles of the pgmirror measurements are saved")
	fs.StringVar(&o.profileDir, "profile-dir", ".", "where -pgmirror-pprof profiles go (file names start with the mode)")
	fs.IntVar(&o.scaleMirrors, "scale-mirrors", 100, "mirrors in the scale measurement (two pgmirror replicas on one catalog, a kill -9 of one); 0 leaves it out")
	fs.BoolVar(&o.scaleOnly, "scale-only", false, "run only the scale measurement")
	fs.Int64Var(&o.largeRows, "large-rows", 1_000_000, "rows of the live large transactions (one INSERT, one UPDATE, each timed from its commit until the destination shows it, native with streaming); 0 leaves them out")
	fs.BoolVar(&o.largeOnly, "large-only", false, "measure only the live large transactions (after each system's initial sync)")
	var pgMajor int
	if v := os.Getenv("PGMIRROR_BENCH_PG_MAJOR"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return o, fmt.Errorf("PGMIRROR_BENCH_PG_MAJOR=%q: want a PostgreSQL major such as 18", v)
		}
		pgMajor = n
	}
	fs.IntVar(&pgMajor, "pg-major", pgMajor, "PostgreSQL major of both clusters (12 to 18, from scripts/install-pg-majors.sh or /usr/lib/postgresql/MAJOR; default PGMIRROR_BENCH_PG_MAJOR, else the default binaries, 15)")
	fs.IntVar(&o.srcMajor, "source-major", 0, "PostgreSQL major of the source cluster (default -pg-major)")
	fs.IntVar(&o.dstMajor, "destination-major", 0, "PostgreSQL major of the destination cluster, which also holds pgmirror's catalog (default -pg-major)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := o.binaries(pgMajor); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if durable {
		modesSet := false
		fs.Visit(func(f *flag.Flag) { modesSet = modesSet || f.Name == "modes" })
		if modesSet && modes != "durable" {
			return o, errors.New("-durable is an alias for -modes durable: use one of them")
		}
		modes = "durable"
	}
	var err error
	if o.modes, err = parseModes(modes); err != nil {
		return o, err
	}
	if o.modes, err = separateModesPossible(o.modes, fs); err != nil {
		return o, err
	}
	if o.changes == 0 {
		o.changes = o.rows / 4
	}
	if o.single == 0 {
		o.single = o.rows / 20
	}
	return o, o.validate()
}

// separateModesPossible checks that the separate-hosts modes among modes
// can confine the clusters (cgroups, root on Linux). When they cannot, they
// are left out of the default modes with a note, and an explicit -modes
// that asks for them is an error.
func separateModesPossible(modes []mode, fs *flag.FlagSet) ([]mode, error) {
	var separate bool
	for _, m := range modes {
		separate = separate || m.separate
	}
	if !separate {
		return modes, nil
	}
	err := cpuJailsWork()
	if err == nil {
		return modes, nil
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "modes" })
	if explicit {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "pgmirror-bench: the separate-hosts mode is left out: %v\n", err)
	var out []mode
	for _, m := range modes {
		if !m.separate {
			out = append(out, m)
		}
	}
	return out, nil
}

// binaries sets the majors of both clusters (pgMajor where -source-major
// or -destination-major is not given) and finds their server binaries.
func (o *options) binaries(pgMajor int) error {
	o.srcMajor, o.dstMajor = cmp.Or(o.srcMajor, pgMajor), cmp.Or(o.dstMajor, pgMajor)
	for _, m := range []int{o.srcMajor, o.dstMajor} {
		if m != 0 && (m < 12 || m > 18) {
			return fmt.Errorf("PostgreSQL %d: the bench runs on majors 12 to 18", m)
		}
	}
	if o.dstMajor == 12 {
		return errors.New("-destination-major 12: the destination cluster also holds pgmirror's catalog, which needs PostgreSQL 13 or later (gen_random_uuid); use 12 as the source")
	}
	var err error
	if o.srcBin, err = localpg.BinDirForMajor(o.srcMajor); err != nil {
		return err
	}
	o.dstBin, err = localpg.BinDirForMajor(o.dstMajor)
	return err
}

// validate checks the sizes and combinations of the options.
func (o options) validate() error {
	switch {
	case o.rows < 20000:
		return errors.New("-rows: use at least 20000")
	case o.changes < 10000 || o.changes%10000 != 0:
		return errors.New("-changes: use a multiple of 10000 (the largest transactions have 10,000 changes)")
	case o.single < 10:
		return errors.New("-single: use at least 10")
	case o.lagRate < 1 || o.lagRate > 20000:
		return errors.New("-lag-rate: use 1 to 20000")
	case o.lagDuration < time.Second || o.lagDuration > 10*time.Minute:
		return errors.New("-lag-duration: use 1s to 10m")
	case o.scaleMirrors < 0 || o.scaleMirrors > 999:
		return errors.New("-scale-mirrors: use 0 to 999")
	case o.scaleOnly && o.scaleMirrors < 2:
		return errors.New("-scale-only needs -scale-mirrors of at least 2")
	case o.largeRows < 0 || o.largeRows > 100_000_000:
		return errors.New("-large-rows: use 0 to 100000000")
	case o.largeOnly && o.largeRows == 0:
		return errors.New("-large-only needs -large-rows above 0")
	case o.largeOnly && o.scaleOnly:
		return errors.New("-large-only and -scale-only: use one of them")
	}
	// Deletes take ids from the lower half of the original rows, each once;
	// updates cycle through the upper half.
	if deletes := 2*(o.changes/5) + o.single/5 + 1; deletes > o.rows/2 {
		return fmt.Errorf("the workloads delete %d rows but only %d may be deleted: raise -rows or lower -changes/-single", deletes, o.rows/2)
	}
	return nil
}

// run parses args, runs every mode's measurements, one mode after the
// other, and prints the report. When a mode fails, the report of the modes
// before it is still printed.
func run(ctx context.Context, args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	start := time.Now()

	root, err := localpg.TempDir(o.workDir, "pgmirror-bench-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep {
			logf(start, "", "kept %s", root)
		} else if err := os.RemoveAll(root); err != nil {
			logf(start, "", "warning: remove %s: %v", root, err)
		}
	}()
	logf(start, "", "working in %s", root)

	bin := o.binary
	if bin == "" {
		// One build for every mode, before the first: both measure the same
		// binary even if the working tree changes during the run.
		logf(start, "", "building ./cmd/pgmirror")
		if bin, err = buildPgmirror(ctx, root); err != nil {
			return err
		}
	}

	var done []*bench
	var runErr error
	for _, m := range o.modes {
		if o.scaleOnly {
			break
		}
		b := &bench{opts: o, mode: m, start: start, bin: bin, dir: filepath.Join(root, m.name)}
		if err := b.run(ctx); err != nil {
			runErr = fmt.Errorf("%s mode: %w", m.name, err)
			break
		}
		done = append(done, b)
	}
	if len(done) > 0 {
		report(o.out, o, done)
	}
	if runErr == nil && o.scaleMirrors > 0 && !o.largeOnly {
		sr, err := runScale(ctx, o, start, bin, root)
		if err != nil {
			return fmt.Errorf("scale: %w", err)
		}
		reportScale(o.out, sr)
	}
	return runErr
}

// run measures one mode on its own pair of clusters, which it stops and
// removes before it returns.
func (b *bench) run(ctx context.Context) error {
	defer b.cleanup()
	b.logf("%s", b.mode.settingsText())
	if err := b.setup(ctx); err != nil {
		return err
	}
	if !b.opts.largeOnly {
		if err := b.measureCopyPipe(ctx, srcNative); err != nil {
			return fmt.Errorf("COPY pipe: %w", err)
		}
	}
	if err := b.measureNative(ctx); err != nil {
		return fmt.Errorf("native logical replication: %w", err)
	}
	if err := b.measurePgmirror(ctx); err != nil {
		if b.svc != nil {
			return fmt.Errorf("pgmirror: %w\nlast lines of the pgmirror log:\n%s", err, b.svc.logTail(4000))
		}
		return fmt.Errorf("pgmirror: %w", err)
	}
	return nil
}
