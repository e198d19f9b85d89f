package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
)

// requireWaiter waits until Status of name shows one waiter, the
// Acquire whose result comes on ch, and returns that Status.
func requireWaiter(t *testing.T, l *backend.Locker, name string, ch <-chan acquiredResult) backend.Status {
	t.Helper()
	ctx := tctx(t, 30*time.Second)
	for {
		select {
		case r := <-ch:
			require.FailNowf(t, "not queued", "the waiter's Acquire of %q returned: lease %v, err %v", name, r.Lease != nil, r.Err)
		case <-ctx.Done():
			require.FailNowf(t, "not queued", "no waiter of %q within 30s", name)
		case <-time.After(5 * time.Millisecond):
		}
		st, err := l.Status(ctx, name)
		require.NoError(t, err)
		if len(st.Waiters) == 1 {
			return st
		}
	}
}

// storedValue reads how the lock row of name stores its holder and
// metadata: whether holder is NULL, and the jsonb type of metadata.
func storedValue(t *testing.T, admin *pgxpool.Pool, prefix, name string) (holderNull bool, metaType string) {
	t.Helper()
	err := admin.QueryRow(tctx(t, 10*time.Second),
		"SELECT holder IS NULL, coalesce(jsonb_typeof(metadata), 'null') FROM "+prefix+"_locks WHERE name = $1", name).
		Scan(&holderNull, &metaType)
	require.NoError(t, err)
	return holderNull, metaType
}

// A candidate's value (WithValue) is stored in place of the holder and
// metadata, for the holder and for a waiter, as it is: quotes, markup, a
// line break, non-ASCII, JSON text (a string, never taken for metadata)
// and MaxValueLen bytes. Status shows it as Value with no holder or
// metadata, and a lock beside it keeps its holder and metadata and an
// empty Value.
func TestValueInStatus(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	la := locker(t, dsn, Config{Prefix: prefix})
	lb := locker(t, dsn, Config{Prefix: prefix})
	admin := newPool(t, dsn)
	ctx := tctx(t, 60*time.Second)

	for _, c := range []struct{ v, w string }{ // the holder's, the waiter's
		{`leader "a" <b> & c` + "\n\u2028é✓", "\\x00 \t"},
		{`{"k":"v"}`, `["w"]`},
		{"", "w"},
		{strings.Repeat("ü", backend.MaxValueLen/2), strings.Repeat("w", backend.MaxValueLen)},
	} {
		ls, err := la.Acquire(ctx, "e", backend.WithValue(c.v))
		require.NoError(t, err)
		require.Equal(t, c.v, ls.Value())
		require.Empty(t, ls.Holder())
		ch := goAcquire(ctx, lb, "e", backend.WithValue(c.w))
		st := requireWaiter(t, la, "e", ch)
		require.NotNil(t, st.Holder)
		require.Equal(t, c.v, st.Holder.Value)
		require.Empty(t, st.Holder.Holder)
		require.Nil(t, st.Holder.Metadata)
		require.Equal(t, ls.Token(), st.Holder.Token)
		require.Equal(t, c.w, st.Waiters[0].Value)
		require.Empty(t, st.Waiters[0].Holder)
		require.Nil(t, st.Waiters[0].Metadata)
		holderNull, metaType := storedValue(t, admin, prefix, "e")
		require.True(t, holderNull, "a candidate's holder column")
		require.Equal(t, "string", metaType, "a candidate's metadata column")
		release(t, ls)
		r := waitAcquired(t, ch, 10*time.Second)
		require.NoError(t, r.Err)
		release(t, r.Lease)
	}

	ls, err := la.Acquire(ctx, "l", backend.WithHolder("h1"), backend.WithMetadata(map[string]string{"k": "v"}))
	require.NoError(t, err)
	st, err := lb.Status(ctx, "l")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "h1", st.Holder.Holder)
	require.Equal(t, map[string]string{"k": "v"}, st.Holder.Metadata)
	require.Empty(t, st.Holder.Value)
	_, metaType := storedValue(t, admin, prefix, "l")
	require.Equal(t, "object", metaType)
	release(t, ls)
}

// Proclaim replaces the holder's value and keeps its token and lease; the
// waiter's value is untouched, and the release's promotion puts the
// waiter's own value on the lock row, which the new holder then replaces
// in turn.
func TestProclaim(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	la := locker(t, dsn, Config{Prefix: prefix})
	lb := locker(t, dsn, Config{Prefix: prefix})
	ctx := tctx(t, 60*time.Second)

	ls, err := la.Acquire(ctx, "e", backend.WithValue("a1"))
	require.NoError(t, err)
	ch := goAcquire(ctx, lb, "e", backend.WithValue("b1"))
	requireWaiter(t, la, "e", ch)

	require.NoError(t, ls.Proclaim(ctx, "a2"))
	require.Equal(t, "a2", ls.Value())
	st, err := lb.Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "a2", st.Holder.Value)
	require.Equal(t, ls.Token(), st.Holder.Token)
	require.Len(t, st.Waiters, 1)
	require.Equal(t, "b1", st.Waiters[0].Value)
	require.NoError(t, ls.Refresh(ctx), "the lease after Proclaim")
	require.NoError(t, ls.Err())
	require.NoError(t, ls.Proclaim(ctx, "a3"), "a second Proclaim")

	release(t, ls)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)
	require.Greater(t, r.Lease.Token(), ls.Token())
	st, err = la.Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "b1", st.Holder.Value, "the promoted waiter's own value")
	require.Equal(t, r.Lease.Token(), st.Holder.Token)

	require.NoError(t, r.Lease.Proclaim(ctx, "b2"))
	st, err = la.Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "b2", st.Holder.Value)
	require.Equal(t, r.Lease.Token(), st.Holder.Token)
	release(t, r.Lease)
}

// A revoked candidate's Proclaim (its Locker has no listener, so it has
// not heard of the revocation) fails with ErrLeaseLost and never writes
// the value onto the row of the waiter the revocation promoted.
func TestProclaimAfterRevoke(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	la := locker(t, dsn, Config{Prefix: prefix, NoListen: true}, backend.WithTTL(30*time.Second))
	lb := locker(t, dsn, Config{Prefix: prefix})
	admin := locker(t, dsn, Config{Prefix: prefix})
	ctx := tctx(t, 60*time.Second)

	ls, err := la.Acquire(ctx, "e", backend.WithValue("a1"))
	require.NoError(t, err)
	ch := goAcquire(ctx, lb, "e", backend.WithValue("b1"))
	requireWaiter(t, admin, "e", ch)
	found, err := admin.Revoke(ctx, "e", ls.Token())
	require.NoError(t, err)
	require.True(t, found)
	r := waitAcquired(t, ch, 10*time.Second)
	require.NoError(t, r.Err)

	err = ls.Proclaim(ctx, "a2")
	require.ErrorIs(t, err, backend.ErrLeaseLost)
	require.ErrorIs(t, ls.Err(), backend.ErrLeaseLost, "the loss signal")
	require.Equal(t, "a1", ls.Value())
	st, err := admin.Status(ctx, "e")
	require.NoError(t, err)
	require.NotNil(t, st.Holder)
	require.Equal(t, "b1", st.Holder.Value)
	require.Equal(t, r.Lease.Token(), st.Holder.Token)
	release(t, r.Lease)
}

// The driver's Proclaim stores nothing where the acquisition no longer
// holds: after its lease expired on the server (nobody renewed it), after
// a revocation, and after another acquisition took the lock; a Proclaim
// whose context ends while a fenced write holds the lock row returns
// soon, ErrUnavailable, its value not stored.
func TestDriverProclaimNotHeld(t *testing.T) {
	dsn, prefix := srv.NewDatabase(t), testPrefix(t)
	admin := newPool(t, dsn)
	d, err := newDriver(newPool(t, dsn), Config{Prefix: prefix, NoListen: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Shutdown(context.Background()) })
	ctx := tctx(t, 60*time.Second)
	lock := func(name, value string, ttl time.Duration) (driver.Lease, driver.Grant) {
		t.Helper()
		dl, _, err := d.NewLease(ctx, driver.Request{Name: name, TTL: ttl, Value: &value, Lost: func(error) {}})
		require.NoError(t, err)
		g, err := dl.Lock(ctx, false)
		require.NoError(t, err)
		return dl, g
	}
	holderValue := func(name string) string {
		t.Helper()
		st, err := d.Inspect(ctx, name)
		require.NoError(t, err)
		if st.Holder == nil {
			return "<free>"
		}
		return st.Holder.Value
	}

	// Expired: the row is still ours, its lease over.
	dl, _ := lock("expired", "a1", MinTTL)
	require.Eventually(t, func() bool { return holderValue("expired") == "<free>" }, 30*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, dl.Proclaim(ctx, "a2"), driver.ErrLeaseLost)
	var meta string
	require.NoError(t, admin.QueryRow(ctx, "SELECT metadata #>> '{}' FROM "+prefix+"_locks WHERE name = 'expired'").Scan(&meta))
	require.Equal(t, "a1", meta)

	// Revoked, then taken by another acquisition.
	dl, g := lock("revoked", "a1", 30*time.Second)
	found, err := d.Revoke(ctx, "revoked", g.Token)
	require.NoError(t, err)
	require.True(t, found)
	require.ErrorIs(t, dl.Proclaim(ctx, "a2"), driver.ErrLeaseLost)
	other, _ := lock("revoked", "b1", 30*time.Second)
	require.ErrorIs(t, dl.Proclaim(ctx, "a3"), driver.ErrLeaseLost)
	require.Equal(t, "b1", holderValue("revoked"))
	require.NoError(t, other.Release(ctx, false))

	// A fenced write holds the row FOR SHARE: the Proclaim waits, and
	// gives up when its context ends.
	dl, g = lock("fenced", "a1", 30*time.Second)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+prefix+"_locks WHERE name = 'fenced' AND token = $1 FOR SHARE", int64(g.Token))
	require.NoError(t, err)
	pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = dl.Proclaim(pctx, "a2")
	require.ErrorIs(t, err, driver.ErrUnavailable)
	require.Less(t, time.Since(start), 15*time.Second, "Proclaim returns soon after its context ends")
	// Stored or not is unknown to the caller (ErrUnavailable); here it is
	// not, once the cancel request ended the statement on the server.
	require.Eventually(t, func() bool {
		var waiting int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%SET metadata = to_jsonb%'`).Scan(&waiting)
		return err == nil && waiting == 0
	}, 10*time.Second, 10*time.Millisecond, "the cancelled Proclaim still waits on the server")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, "a1", holderValue("fenced"))
	require.NoError(t, dl.Proclaim(ctx, "a3"))
	require.Equal(t, "a3", holderValue("fenced"))
	require.NoError(t, dl.Release(ctx, false))
}
