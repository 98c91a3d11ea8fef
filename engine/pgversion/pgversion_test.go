package pgversion_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgmirror/pgmirror/engine/pgversion"
)

// TestServer pins what each major may use: a change here changes what
// pgmirror sends to real servers (the version matrix tests them).
func TestServer(t *testing.T) {
	type caps struct {
		binary, messages, empty, markers, multiranges, walStatus, partitionRoot, virtual, pubGenCols, origin bool
	}
	for _, c := range []struct {
		num  int
		want caps
	}{
		{120022, caps{empty: true, markers: true}},
		{130023, caps{empty: true, markers: true, walStatus: true, partitionRoot: true}},
		{140023, caps{binary: true, messages: true, empty: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true}},
		{150014, caps{binary: true, messages: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true}},
		{160014, caps{binary: true, messages: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true, origin: true}},
		{180004, caps{binary: true, messages: true, markers: true, multiranges: true, walStatus: true, partitionRoot: true, virtual: true, pubGenCols: true, origin: true}},
	} {
		s := pgversion.Of(c.num)
		got := caps{s.BinaryOutput(), s.Messages(), s.SendsEmptyTransactions(), s.Markers(), s.Multiranges(), s.WALStatus(),
			s.PartitionRoot(), s.VirtualGenerated(), s.PublishGeneratedColumns(), s.OriginOption()}
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", s, got, c.want)
		}
		if err := s.Check("source"); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	err := pgversion.Of(110022).Check("source database")
	if !errors.Is(err, pgversion.ErrUnsupported) || !strings.Contains(err.Error(), "the source database runs PostgreSQL 11.22") ||
		!strings.Contains(err.Error(), "PostgreSQL 12 or later") {
		t.Errorf("11.22: %v", err)
	}
	if got := pgversion.Of(90624).String(); got != "PostgreSQL 9.6.24" {
		t.Errorf("9.6.24 prints as %q", got)
	}
}
