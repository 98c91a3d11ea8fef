package tablesync

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"github.com/jackc/pgx/v5"
)

// The sizing rules of a snapshot (see the package documentation).
const (
	// minPartitionPages is the least a partition spans: 2 MiB of 8 KiB
	// pages. Each partition costs a destination transaction, the start of a
	// COPY and a catalog log entry (and, in a ctid range, a source
	// transaction and COPY too), a few milliseconds that must stay small
	// next to the copy itself, whatever snapshot_num_rows_per_partition asks
	// for.
	minPartitionPages = 256
	// maxPartitionPages bounds a partition's ctid range (block numbers are
	// 32-bit).
	maxPartitionPages = 1 << 32
)

// bytesPerWriter is how big a table must be per stream copied into it at
// once: a table below twice its size gets one writer, one of 4 times its
// size at most four. Parallel COPYs into one table contend on the destination (the
// relation extension lock, page splits in every index as the writers insert
// into the middle of each other's key ranges): on two cores four of them cost
// the destination twice the CPU of one COPY and were slower than one. They
// pay only where the destination has idle cores, which cannot be seen over
// SQL, and only for tables whose copy takes long enough to be worth it.
// A variable for tests.
var bytesPerWriter int64 = 512 << 20

// numCPU is this host's CPU count; a variable for tests.
var numCPU = runtime.NumCPU

// limits are the settings and facts that bound a snapshot's parallelism.
type limits struct {
	rowsPerPartition int // snapshot_num_rows_per_partition
	maxWorkers       int // snapshot_max_parallel_workers: partitions copied at once over all tables
	// localCPUs is this host's CPU count when the destination server runs
	// on this host, 0 when it runs elsewhere (its cores are unknown).
	localCPUs int
}

// partitionPages returns how many pages of a leaf relation with rowsPerPage
// rows per page make a partition of about rowsPerPartition rows: at least
// minPartitionPages.
func partitionPages(rowsPerPage float64, rowsPerPartition int) int64 {
	if !(rowsPerPage > 0) { // also NaN
		rowsPerPage = defaultRowsPerPage
	}
	pages := float64(max(rowsPerPartition, 1)) / rowsPerPage
	if pages >= maxPartitionPages {
		return maxPartitionPages
	}
	return max(int64(pages), minPartitionPages)
}

// tableWriters returns how many partitions of one destination table are
// copied at once: one per bytesPerWriter of the table (at least one), no more
// than it has partitions, than snapshot_max_parallel_workers allows, and,
// when the destination runs on this host, than half its CPUs (each stream
// keeps about one core busy in the destination backend, and the source
// backend and pgmirror need the rest).
func tableWriters(tableBytes int64, partitions int, l limits) int {
	w := min(tableBytes/bytesPerWriter, int64(partitions), int64(l.maxWorkers))
	if l.localCPUs > 0 {
		w = min(w, int64(l.localCPUs/2))
	}
	return int(max(w, 1))
}

// destinationCPUs returns this host's CPU count when the destination server
// runs on this host (conn came in over a Unix socket, a loopback address or
// an address of one of this host's interfaces), else 0.
func destinationCPUs(ctx context.Context, conn *pgx.Conn) (int, error) {
	var addr *string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.host(pg_catalog.inet_server_addr())`).Scan(&addr); err != nil {
		return 0, fmt.Errorf("read the destination's address: %w", err)
	}
	if addr == nil || isLocalAddr(*addr) { // NULL: a Unix socket
		return numCPU(), nil
	}
	return 0, nil
}

func isLocalAddr(s string) bool {
	ip := net.ParseIP(s)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
