package pgtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/faultproxy"
)

// standbyName is the standby's application_name, which the primary's
// synchronous_standby_names names for a synchronous standby.
const standbyName = "fencelock_standby"

// Standby is a streaming replica of a Cluster, a throwaway cluster of its
// own (its own directory and port), made with pg_basebackup and started
// in hot standby: it answers reads, refuses writes (SQLSTATE 25006) until
// Promote. Its replication connection to the primary passes through
// Link, so that a test can cut it (Link.Partition: the standby stops
// receiving the primary's WAL, nothing is closed) and heal it.
type Standby struct {
	*Cluster
	// Link carries the standby's replication connection to the primary.
	Link    *faultproxy.Proxy
	primary *Cluster
}

// StartStandby makes a streaming standby of c and starts it; with sync,
// c then waits for it at every commit (synchronous_standby_names names it,
// synchronous_commit on), else it is asynchronous (PostgreSQL's default).
// It returns once the standby streams from c (and, with sync, is c's
// synchronous standby), and stops and removes it when tb ends. It fails
// tb, never skips.
func (c *Cluster) StartStandby(tb testing.TB, sync bool) *Standby {
	tb.Helper()
	s, err := c.startStandby(sync)
	if err != nil {
		tb.Fatalf("pgtest: standby: %v", err)
	}
	tb.Cleanup(func() {
		s.Close()
		s.Link.Close()
	})
	return s
}

func (c *Cluster) startStandby(sync bool) (*Standby, error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	sc := &Cluster{bin: c.bin, dir: dir, cred: c.cred}
	ok := false
	defer func() {
		if !ok {
			sc.Close()
		}
	}()
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	s, err := sc.follow(context.Background(), c, sync)
	ok = err == nil
	return s, err
}

// Follow makes c, which must not run (after Kill or Stop: an old primary
// whose standby was promoted), a streaming standby of primary, as
// StartStandby makes a new one: its data directory is replaced by a fresh
// base backup of primary (so whatever c committed that primary never
// received is gone: c cannot rejoin with its own history), and it starts in
// hot standby on its own port, replicating through a new Link. With sync,
// primary then waits for it at every commit. It returns once c streams
// from primary (with sync, as its synchronous standby), or an error when
// ctx ends first; c then does not run. The caller closes the Standby's
// Link once it no longer needs it (c's own Close still stops and removes
// c).
func (c *Cluster) Follow(ctx context.Context, primary *Cluster, sync bool) (*Standby, error) {
	c.mu.Lock()
	running := c.cmd != nil
	c.mu.Unlock()
	if running {
		return nil, errors.New("pgtest: follow: the server runs: kill or stop it first")
	}
	if err := os.RemoveAll(c.dataDir()); err != nil {
		return nil, fmt.Errorf("pgtest: follow: %w", err)
	}
	s, err := c.follow(ctx, primary, sync)
	if err != nil {
		return nil, fmt.Errorf("pgtest: follow: %w", err)
	}
	return s, nil
}

// follow fills c's empty data directory with a base backup of primary,
// taken through a new link, and starts c (on c.port, or a free one if
// zero) as its standby.
func (c *Cluster) follow(ctx context.Context, primary *Cluster, sync bool) (*Standby, error) {
	link, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", primary.port))
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			c.stop()
			link.Close()
		}
	}()
	host, port, _ := net.SplitHostPort(link.Addr())
	conninfo := fmt.Sprintf("host=%s port=%s user=postgres application_name=%s", host, port, standbyName)
	bb := c.command("pg_basebackup", "-D", c.dataDir(), "-d", conninfo, "-X", "stream",
		"--checkpoint=fast", "--no-sync")
	if out, err := runCtx(ctx, bb); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(c.dataDir(), "standby.signal"), nil, 0o600); err != nil {
		return nil, err
	}
	// The primary's own primary_conninfo, if it was a standby once, came
	// with the backup: replace it.
	autoConf := filepath.Join(c.dataDir(), "postgresql.auto.conf")
	conf, err := os.ReadFile(autoConf)
	if err != nil {
		return nil, err
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(conf), "\n") {
		if !strings.HasPrefix(line, "primary_conninfo") {
			kept = append(kept, line)
		}
	}
	kept = append(kept, fmt.Sprintf("primary_conninfo = '%s'\n", conninfo))
	if err := os.WriteFile(autoConf, []byte(strings.Join(kept, "")), 0o600); err != nil {
		return nil, err
	}
	if c.cred != nil {
		// pg_basebackup wrote the rest as the server's user.
		if err := os.Chown(filepath.Join(c.dataDir(), "standby.signal"), int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	fresh := c.port == 0
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if lastErr = c.run(ctx); lastErr == nil || !fresh || ctx.Err() != nil {
			break
		}
		c.port = 0 // the port may have been taken: pick another
	}
	if lastErr != nil {
		return nil, lastErr
	}
	s := &Standby{Cluster: c, Link: link, primary: primary}
	if sync {
		// Set once the backup is taken, so that the standby does not
		// inherit it: promoted, it runs without a synchronous standby
		// until one follows it.
		if err := primary.exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+standbyName+"'"); err != nil {
			return nil, err
		}
		if err := primary.exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			return nil, err
		}
	}
	want := "async"
	if sync {
		want = "sync"
	}
	if err := primary.waitFor(ctx, readyTimeout, "the standby streaming as "+want,
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2",
		standbyName, want); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.logTail())
	}
	ok = true
	return s, nil
}

// runCtx runs cmd and returns its combined output; when ctx ends first, it
// kills cmd and returns ctx's error.
func runCtx(ctx context.Context, cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return out.Bytes(), ctx.Err()
	}
}

// CaughtUp waits until the standby has replayed everything the primary had
// written when it was called. It fails tb after a minute.
func (s *Standby) CaughtUp(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	var lsn string
	if err := s.primary.queryRow(ctx, "SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		tb.Fatalf("pgtest: standby: %v", err)
	}
	if err := s.waitFor(ctx, readyTimeout, "the standby to replay up to "+lsn,
		"SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn); err != nil {
		tb.Fatalf("pgtest: standby: %v", err)
	}
}

// Promote makes the standby a primary (pg_promote, waiting until it
// accepts writes): it then ends recovery with what it received, on a new
// timeline, whatever the old primary committed after that. It fails tb.
func (s *Standby) Promote(tb testing.TB) {
	tb.Helper()
	if err := s.PromoteContext(context.Background()); err != nil {
		tb.Fatalf("%v", err)
	}
}

// PromoteContext is Promote, returning an error instead, and returning
// when ctx ends (the promotion may then still complete).
func (s *Standby) PromoteContext(ctx context.Context) error {
	var done bool
	if err := s.queryRow(ctx, "SELECT pg_promote(true, 60)", &done); err != nil || !done {
		return fmt.Errorf("pgtest: promote: %v (done %v)\n%s", err, done, s.logTail())
	}
	return nil
}

// WaitSyncRep waits until a backend of the primary at dsn waits for its
// synchronous standby (wait_event SyncRep), and fails tb after 30s.
func WaitSyncRep(tb testing.TB, dsn string) {
	tb.Helper()
	db := Open(tb, dsn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := db.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&n)
		if err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pgtest: no commit waits for the standby after 30s (last error: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exec runs one statement on the cluster's postgres database.
func (c *Cluster) exec(ctx context.Context, stmt string) error {
	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// queryRow runs one query on the cluster's postgres database and scans its
// row into dest.
func (c *Cluster) queryRow(ctx context.Context, query string, dest ...any) error {
	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := db.QueryRowContext(ctx, query).Scan(dest...); err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	return nil
}

// waitFor polls query, which returns one boolean, until it is true or
// within passes or ctx ends.
func (c *Cluster) waitFor(ctx context.Context, within time.Duration, what, query string, args ...any) error {
	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
		var yes bool
		err := db.QueryRowContext(qctx, query, args...).Scan(&yes)
		qcancel()
		if err == nil && yes {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited for %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
