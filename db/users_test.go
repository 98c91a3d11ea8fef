package db_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/pgmirror/pgmirror/db"
)

func TestReconcileAdminPassword(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	require.NoError(t, store.EnsureAdmin(ctx, "admin", db.DefaultAdminPassword))
	passwordIs := func(password string) {
		t.Helper()
		u, err := store.UserGetByUsername(ctx, "admin")
		require.NoError(t, err)
		require.NoError(t, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)))
	}

	// Still the default, with nothing else configured: reported at every start.
	for _, configured := range []string{"", db.DefaultAdminPassword} {
		state, err := store.ReconcileAdminPassword(ctx, "admin", configured)
		require.NoError(t, err)
		require.Equal(t, db.AdminPasswordDefault, state)
	}
	before, err := store.UserGetByUsername(ctx, "admin")
	require.NoError(t, err)

	// A configured password replaces the default once, even when several
	// replicas start at the same moment; older tokens are revoked.
	var wg sync.WaitGroup
	states := make([]db.AdminPassword, 4)
	for i := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			states[i], err = store.ReconcileAdminPassword(ctx, "admin", "s3cret-from-env")
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.ElementsMatch(t, []db.AdminPassword{db.AdminPasswordReplaced, db.AdminPasswordOK, db.AdminPasswordOK, db.AdminPasswordOK}, states)
	passwordIs("s3cret-from-env")
	after, err := store.UserGetByUsername(ctx, "admin")
	require.NoError(t, err)
	require.Equal(t, before.TokenVersion+1, after.TokenVersion)

	// A password that is not the default is never overwritten.
	state, err := store.ReconcileAdminPassword(ctx, "admin", "another-password")
	require.NoError(t, err)
	require.Equal(t, db.AdminPasswordKept, state)
	passwordIs("s3cret-from-env")
	for _, configured := range []string{"", "s3cret-from-env"} {
		state, err = store.ReconcileAdminPassword(ctx, "admin", configured)
		require.NoError(t, err)
		require.Equal(t, db.AdminPasswordOK, state)
	}

	_, err = store.ReconcileAdminPassword(ctx, "nobody", "x")
	require.ErrorIs(t, err, db.ErrNotFound)
}

func TestUserSetPasswordHashTokenVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	hash, err := db.HashPassword("first")
	require.NoError(t, err)
	u, err := store.UserCreate(ctx, "alice", hash, db.RoleViewer)
	require.NoError(t, err)
	version := u.TokenVersion

	// Without revocation the token version stays: earlier tokens stay valid.
	hash, err = db.HashPassword("second")
	require.NoError(t, err)
	u, err = store.UserSetPasswordHash(ctx, u.ID, hash, false)
	require.NoError(t, err)
	require.Equal(t, version, u.TokenVersion)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte("second")))

	// With revocation it is incremented once.
	hash, err = db.HashPassword("third")
	require.NoError(t, err)
	u, err = store.UserSetPasswordHash(ctx, u.ID, hash, true)
	require.NoError(t, err)
	require.Equal(t, version+1, u.TokenVersion)

	// A role change still increments it (the catalog's trigger), a password
	// change with SQL does not.
	_, err = store.Pool().Exec(ctx, `UPDATE users SET role = 'admin' WHERE id = $1`, u.ID)
	require.NoError(t, err)
	_, err = store.Pool().Exec(ctx, `UPDATE users SET password_hash = 'x' WHERE id = $1`, u.ID)
	require.NoError(t, err)
	u, err = store.UserGetByID(ctx, u.ID)
	require.NoError(t, err)
	require.Equal(t, version+2, u.TokenVersion)
}
