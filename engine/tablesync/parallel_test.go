package tablesync

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/schemasync"
)

const mib = 1 << 20

func TestTableWriters(t *testing.T) {
	remote := func(maxWorkers int) limits { return limits{rowsPerPartition: 500000, maxWorkers: maxWorkers} }
	local := func(maxWorkers, cpus int) limits {
		return limits{rowsPerPartition: 500000, maxWorkers: maxWorkers, localCPUs: cpus}
	}
	for _, tc := range []struct {
		name       string
		bytes      int64
		partitions int
		l          limits
		want       int
	}{
		{"empty table", 0, 1, remote(4), 1},
		{"small table, many partitions", 50 * mib, 40, remote(4), 1},
		{"the bench's 2M rows (391 MiB, 4 partitions)", 391 * mib, 4, remote(4), 1},
		{"just below one writer's share", 511 * mib, 8, remote(4), 1},
		{"1 GiB: two writers", 1024 * mib, 8, remote(4), 2},
		{"2 GiB: four writers", 2048 * mib, 8, remote(4), 4},
		{"big table, the setting bounds", 100 * 1024 * mib, 200, remote(4), 4},
		{"big table, one worker asked for", 100 * 1024 * mib, 200, remote(1), 1},
		{"big table, few partitions", 100 * 1024 * mib, 3, remote(8), 3},
		{"big table, one partition", 100 * 1024 * mib, 1, remote(8), 1},
		{"big table, destination on this 2-core host", 100 * 1024 * mib, 200, local(4, 2), 1},
		{"big table, destination on a 1-core host", 100 * 1024 * mib, 200, local(4, 1), 1},
		{"big table, destination on a 4-core host", 100 * 1024 * mib, 200, local(4, 4), 2},
		{"big table, destination on a 64-core host", 100 * 1024 * mib, 200, local(4, 64), 4},
		{"small table, destination on a 64-core host", 100 * mib, 200, local(4, 64), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tableWriters(tc.bytes, tc.partitions, tc.l); got != tc.want {
				t.Errorf("tableWriters(%d MiB, %d partitions, %+v) = %d, want %d", tc.bytes/mib, tc.partitions, tc.l, got, tc.want)
			}
		})
	}
}

func TestPartitionPages(t *testing.T) {
	for _, tc := range []struct {
		name             string
		rowsPerPage      float64
		rowsPerPartition int
		want             int64
	}{
		{"default setting, 40 rows per page", 40, 500000, 12500},
		{"tiny partitions are 2 MiB", 40, 1000, minPartitionPages},
		{"one row per partition", 40, 1, minPartitionPages},
		{"unknown density", 0, 500000, 5000},
		{"NaN density", nan(), 500000, 5000},
		{"huge partitions are capped", 1e-9, 1 << 30, maxPartitionPages},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := partitionPages(tc.rowsPerPage, tc.rowsPerPartition); got != tc.want {
				t.Errorf("partitionPages(%v, %d) = %d, want %d", tc.rowsPerPage, tc.rowsPerPartition, got, tc.want)
			}
		})
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

func TestSplitLeaf(t *testing.T) {
	name := change.TableName{Schema: "public", Name: "t"}
	// 10,000 pages of 40 rows: 400,000 rows in partitions of 100,000.
	parts := splitLeaf(leaf{name: name, pages: 10000, rowsPerPage: 40}, 100000)
	if len(parts) != 4 {
		t.Fatalf("%d partitions, want 4: %+v", len(parts), parts)
	}
	for i, p := range parts {
		if !p.ctid || p.from != uint32(i*2500) || p.to != uint32((i+1)*2500) || p.open != (i == 3) || p.parts != 1 {
			t.Errorf("partition %d = %+v", i, p)
		}
	}
	// Tiny partitions asked for: 2 MiB each.
	if parts := splitLeaf(leaf{name: name, pages: 1000, rowsPerPage: 40}, 10); len(parts) != 4 {
		t.Errorf("%d partitions of 1000 pages at 10 rows each, want 4 (2 MiB each)", len(parts))
	}
	// One partition: the whole relation, no ctid condition.
	if parts := splitLeaf(leaf{name: name, pages: 100, rowsPerPage: 40}, 500000); len(parts) != 1 || parts[0].ctid {
		t.Errorf("small table: %+v", parts)
	}
	if parts := splitLeaf(leaf{name: name}, 500000); len(parts) != 1 || parts[0].ctid {
		t.Errorf("empty table: %+v", parts)
	}
	if parts := splitLeaf(leaf{name: name, foreign: true}, 500000); len(parts) != 1 || !parts[0].foreign {
		t.Errorf("foreign table: %+v", parts)
	}
}

func TestWholeLeaf(t *testing.T) {
	name := change.TableName{Schema: "public", Name: "t"}
	for _, tc := range []struct {
		name             string
		l                leaf
		rowsPerPartition int
		parts            int
		chunkRows        int64
	}{
		{"400,000 rows in partitions of 100,000", leaf{name: name, pages: 10000, rowsPerPage: 40}, 100000, 4, 100000},
		{"tiny partitions are 2 MiB", leaf{name: name, pages: 1000, rowsPerPage: 40}, 10, 4, 256 * 40},
		{"small table", leaf{name: name, pages: 100, rowsPerPage: 40}, 500000, 1, 500000},
		{"empty table", leaf{name: name}, 500000, 1, 500000},
		{"foreign table", leaf{name: name, foreign: true}, 500000, 1, 500000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := wholeLeaf(tc.l, tc.rowsPerPartition)
			if s.ctid || s.leaf != name || s.foreign != tc.l.foreign || s.parts != tc.parts || s.chunkRows != tc.chunkRows {
				t.Errorf("wholeLeaf = %+v, want %d partitions of %d rows", s, tc.parts, tc.chunkRows)
			}
		})
	}
}

func TestCopyOutSQL(t *testing.T) {
	j := &tableJob{columns: []string{"id", "Note"}, binary: true}
	name := change.TableName{Schema: "public", Name: "t"}
	for _, tc := range []struct {
		p    stream
		want string
	}{
		{stream{leaf: name}, `COPY "public"."t" ("id", "Note") TO STDOUT (FORMAT binary)`},
		{stream{leaf: name, ctid: true, from: 0, to: 10}, `COPY (SELECT "id", "Note" FROM ONLY "public"."t" WHERE ctid < '(10,0)'::tid) TO STDOUT (FORMAT binary)`},
		{stream{leaf: name, ctid: true, from: 10, to: 20, open: true}, `COPY (SELECT "id", "Note" FROM ONLY "public"."t" WHERE ctid >= '(10,0)'::tid) TO STDOUT (FORMAT binary)`},
	} {
		if got := j.copyOutSQL(tc.p); got != tc.want {
			t.Errorf("copyOutSQL(%+v) =\n%s\nwant\n%s", tc.p, got, tc.want)
		}
	}
}

// TestPipeCopyMessages: rows written one by one (as CopyTo does) reach the
// destination side in reads of copyDataSize (full CopyData messages for
// CopyFrom), not one read per row.
func TestPipeCopyMessages(t *testing.T) {
	row := bytes.Repeat([]byte("r"), 200)
	const rows = 20000
	var reads, short int
	var total int64
	outRows, inRows, outErr, inErr := pipeCopy(false, rows, 1, nil,
		func(w io.Writer) (int64, error) {
			for range rows {
				if _, err := w.Write(row); err != nil {
					return 0, err
				}
			}
			return rows, nil
		},
		func(r io.Reader) (int64, error) {
			buf := make([]byte, copyDataSize) // as pgconn's CopyFrom
			for {
				n, err := r.Read(buf)
				if n > 0 {
					reads++
					total += int64(n)
					if n < copyDataSize {
						short++
					}
				}
				if err == io.EOF {
					return rows, nil
				}
				if err != nil {
					return 0, err
				}
			}
		})
	if outErr != nil || inErr != nil || outRows != rows || inRows != rows {
		t.Fatalf("pipeCopy = %d, %d, %v, %v", outRows, inRows, outErr, inErr)
	}
	if total != rows*int64(len(row)) {
		t.Errorf("%d bytes arrived, want %d", total, rows*len(row))
	}
	if want := int(total/copyDataSize) + 1; reads > want || short > 1 {
		t.Errorf("%d reads (%d short) for %d bytes, want at most %d with only the last one short", reads, short, total, want)
	}
}

// binaryRow is a binary COPY row of one int4 field.
func binaryRow(v int32) []byte {
	return []byte{0, 1, 0, 0, 0, 4, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

// TestPipeCopyChunks: a source stream cut into chunks, each a complete COPY
// input of its own, the last planned chunk taking the rest.
func TestPipeCopyChunks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		binary    bool
		rows      int
		chunkRows int64
		chunks    int
		want      []int // rows per chunk
	}{
		{"binary, as planned", true, 9, 3, 3, []int{3, 3, 3}},
		{"binary, more rows than planned", true, 11, 3, 3, []int{3, 3, 5}},
		{"binary, fewer rows than planned", true, 4, 3, 3, []int{3, 1}},
		{"binary, no rows", true, 0, 3, 3, nil},
		{"binary, one chunk", true, 5, 100, 1, []int{5}},
		{"text", false, 7, 2, 3, []int{2, 2, 3}},
		{"text, no rows", false, 0, 2, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			outRows, inRows, outErr, inErr := pipeCopy(tc.binary, tc.chunkRows, tc.chunks, nil,
				func(w io.Writer) (int64, error) { // as the server sends it
					header := binaryHeader
					for i := range tc.rows {
						var msg []byte
						if tc.binary {
							msg = append(header, binaryRow(int32(i))...)
							header = nil
						} else {
							msg = []byte(fmt.Sprintf("%d\n", i))
						}
						if _, err := w.Write(msg); err != nil {
							return 0, err
						}
					}
					if tc.binary {
						if _, err := w.Write(append(header, binaryTrailer...)); err != nil {
							return 0, err
						}
					}
					return int64(tc.rows), nil
				},
				func(r io.Reader) (int64, error) {
					data, err := io.ReadAll(r)
					if err != nil {
						return 0, err
					}
					var n int
					if tc.binary {
						if !bytes.HasPrefix(data, binaryHeader) || !bytes.HasSuffix(data, binaryTrailer) {
							return 0, fmt.Errorf("chunk %d has no header or trailer: %x", len(got)+1, data)
						}
						body := data[len(binaryHeader) : len(data)-len(binaryTrailer)]
						n = len(body) / len(binaryRow(0))
						if len(body)%len(binaryRow(0)) != 0 {
							return 0, fmt.Errorf("chunk %d: cut rows: %x", len(got)+1, data)
						}
					} else {
						n = bytes.Count(data, []byte("\n"))
					}
					got = append(got, n)
					return int64(n), nil
				})
			if outErr != nil || inErr != nil || outRows != int64(tc.rows) || inRows != int64(tc.rows) {
				t.Fatalf("pipeCopy = %d, %d, %v, %v", outRows, inRows, outErr, inErr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("chunks of %v rows, want %v", got, tc.want)
			}
		})
	}
}

// TestPipeCopyDestinationFails: when the destination side fails, the source
// side's writes fail too, so that it stops.
func TestPipeCopyDestinationFails(t *testing.T) {
	boom := errors.New("boom")
	for _, chunkRows := range []int64{1, 1 << 40} { // failing within a chunk, and between chunks
		_, _, outErr, inErr := pipeCopy(false, chunkRows, 1000, nil,
			func(w io.Writer) (int64, error) {
				for {
					if _, err := w.Write(make([]byte, 1000)); err != nil {
						return 0, err
					}
				}
			},
			func(r io.Reader) (int64, error) {
				if _, err := r.Read(make([]byte, 10)); err != nil {
					return 0, err
				}
				return 0, boom
			})
		if !errors.Is(inErr, boom) || !errors.Is(outErr, errDestinationFailed) {
			t.Errorf("chunks of %d rows: errors %v, %v; want boom and errDestinationFailed", chunkRows, outErr, inErr)
		}
	}
}

// TestPipeCopySourceFails: a source failure fails the chunk being copied.
func TestPipeCopySourceFails(t *testing.T) {
	boom := errors.New("boom")
	var chunks int
	_, inRows, outErr, inErr := pipeCopy(false, 2, 10, nil,
		func(w io.Writer) (int64, error) {
			for range 3 {
				if _, err := w.Write([]byte("row\n")); err != nil {
					return 0, err
				}
			}
			return 0, boom
		},
		func(r io.Reader) (int64, error) {
			chunks++
			data, err := io.ReadAll(r)
			return int64(bytes.Count(data, []byte("\n"))), err
		})
	if !errors.Is(outErr, boom) || !errors.Is(inErr, boom) || chunks != 2 || inRows != 2 {
		t.Errorf("pipeCopy = %d rows in %d chunks, errors %v, %v; want the second chunk to fail with boom", inRows, chunks, outErr, inErr)
	}
}

func TestMakeJobs(t *testing.T) {
	name := func(n string) change.TableName { return change.TableName{Schema: "public", Name: n} }
	cols := []schemasync.Column{{Name: "id", Type: "bigint", BinarySafe: true}, {Name: "v", Type: "text", BinarySafe: true}}
	big := leaf{name: name("big"), pages: 262144, bytes: 2048 * mib, rowsPerPage: 40} // 10,485,760 rows
	srcs := []sourceTable{
		{desc: schemasync.Table{Name: name("big"), Columns: cols}, leaves: []leaf{big}},
		{desc: schemasync.Table{Name: name("parted"), Columns: cols, Partitioned: true}, leaves: []leaf{
			{name: name("parted_a"), pages: 1000, bytes: 8 * mib, rowsPerPage: 40},
			{name: name("parted_b"), pages: 0, bytes: 8192},
		}},
	}
	dsts := []schemasync.Table{{Name: name("big"), Columns: cols}, {Name: name("parted"), Columns: cols}}
	mappings := []change.Mapping{{Source: name("big"), Destination: name("big")}, {Source: name("parted"), Destination: name("parted")}}

	for _, tc := range []struct {
		name         string
		l            limits
		writers      int
		ctidStreams  bool
		bigPartition int64 // rows per partition of big's one stream
	}{
		{"remote destination: four writers on ctid ranges", limits{rowsPerPartition: 500000, maxWorkers: 4}, 4, true, 0},
		{"destination on this 2-core host: one stream", limits{rowsPerPartition: 500000, maxWorkers: 4, localCPUs: 2}, 1, false, 500000},
		{"one worker asked for: one stream", limits{rowsPerPartition: 500000, maxWorkers: 1}, 1, false, 500000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs, err := makeJobs(mappings, srcs, dsts, tc.l)
			if err != nil {
				t.Fatal(err)
			}
			b, p := jobs[0], jobs[1]
			if b.partitions != 21 || b.writers != tc.writers || b.bytes != 2048*mib || !b.binary {
				t.Errorf("big: %d partitions, %d writers, %d bytes, binary %v; want 21, %d, %d, true", b.partitions, b.writers, b.bytes, b.binary, tc.writers, 2048*mib)
			}
			if tc.ctidStreams {
				if len(b.streams) != 21 || !b.streams[0].ctid || !b.streams[20].open {
					t.Errorf("big: %d streams, want 21 ctid ranges: %+v", len(b.streams), b.streams)
				}
			} else if len(b.streams) != 1 || b.streams[0].ctid || b.streams[0].parts != 21 || b.streams[0].chunkRows != tc.bigPartition {
				t.Errorf("big: streams %+v, want one whole stream of 21 partitions of %d rows", b.streams, tc.bigPartition)
			}
			// parted: 8 MiB, one writer, one stream per leaf.
			if p.writers != 1 || p.partitions != 2 || len(p.streams) != 2 || p.streams[0].leaf != name("parted_a") || p.streams[0].parts != 1 {
				t.Errorf("parted: %d writers, %d partitions, streams %+v", p.writers, p.partitions, p.streams)
			}
		})
	}

	// A destination column missing: an error, before anything is copied.
	_, err := makeJobs(mappings[:1], srcs[:1], []schemasync.Table{{Name: name("big"), Columns: cols[:1]}}, limits{rowsPerPartition: 1, maxWorkers: 1})
	if err == nil || !strings.Contains(err.Error(), "has no column") {
		t.Errorf("missing destination column: %v", err)
	}
}
