package apply

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

func TestCommitPositions(t *testing.T) {
	t.Parallel()
	lsns := &pgconn.Result{CommandTag: pgconn.NewCommandTag("SELECT 1"), Rows: [][][]byte{{[]byte("1/A0"), []byte("1/80")}}}
	commit, flushed, err := commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("COMMIT")}, lsns})
	require.NoError(t, err)
	require.Equal(t, change.LSN(0x1_0000_00A0), commit)
	require.Equal(t, change.LSN(0x1_0000_0080), flushed)

	// COMMIT of a failed transaction answers ROLLBACK.
	_, _, err = commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("ROLLBACK")}, lsns})
	require.ErrorContains(t, err, "rolled the transaction back")
	failed := errors.New("boom")
	_, _, err = commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("COMMIT")}, {Err: failed}})
	require.ErrorIs(t, err, failed)
	_, _, err = commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("COMMIT")}})
	require.Error(t, err)
}
