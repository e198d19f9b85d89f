package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
	link, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", c.port))
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			link.Close()
		}
	}()
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	sc := &Cluster{bin: c.bin, dir: dir, cred: c.cred}
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
	host, port, _ := net.SplitHostPort(link.Addr())
	conninfo := fmt.Sprintf("host=%s port=%s user=postgres application_name=%s", host, port, standbyName)
	out, err := sc.command("pg_basebackup", "-D", sc.dataDir(), "-d", conninfo, "-X", "stream",
		"--checkpoint=fast", "--no-sync").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(sc.dataDir(), "standby.signal"), nil, 0o600); err != nil {
		return nil, err
	}
	conf, err := os.OpenFile(filepath.Join(sc.dataDir(), "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(conf, "primary_conninfo = '%s'\n", conninfo)
	if cerr := conf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if c.cred != nil {
		// pg_basebackup wrote the rest as the server's user.
		if err := os.Chown(filepath.Join(sc.dataDir(), "standby.signal"), int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if lastErr = sc.run(); lastErr == nil {
			break
		}
		sc.port = 0
	}
	if lastErr != nil {
		return nil, lastErr
	}
	s := &Standby{Cluster: sc, Link: link, primary: c}
	if sync {
		if err := c.exec("ALTER SYSTEM SET synchronous_standby_names = '" + standbyName + "'"); err != nil {
			return nil, err
		}
		if err := c.exec("SELECT pg_reload_conf()"); err != nil {
			return nil, err
		}
	}
	want := "async"
	if sync {
		want = "sync"
	}
	if err := c.waitFor(readyTimeout, "the standby streaming as "+want,
		"SELECT count(*) = 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming' AND sync_state = $2",
		standbyName, want); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, sc.logTail())
	}
	ok = true
	return s, nil
}

// CaughtUp waits until the standby has replayed everything the primary had
// written when it was called. It fails tb after a minute.
func (s *Standby) CaughtUp(tb testing.TB) {
	tb.Helper()
	var lsn string
	if err := s.primary.queryRow("SELECT pg_current_wal_lsn()::text", &lsn); err != nil {
		tb.Fatalf("pgtest: standby: %v", err)
	}
	if err := s.waitFor(readyTimeout, "the standby to replay up to "+lsn,
		"SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn); err != nil {
		tb.Fatalf("pgtest: standby: %v", err)
	}
}

// Promote makes the standby a primary (pg_promote, waiting until it
// accepts writes): it then ends recovery with what it received, on a new
// timeline, whatever the old primary committed after that.
func (s *Standby) Promote(tb testing.TB) {
	tb.Helper()
	var done bool
	if err := s.queryRow("SELECT pg_promote(true, 60)", &done); err != nil || !done {
		tb.Fatalf("pgtest: promote: %v (done %v)\n%s", err, done, s.logTail())
	}
}

// exec runs one statement on the cluster's postgres database.
func (c *Cluster) exec(stmt string) error {
	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// queryRow runs one query on the cluster's postgres database and scans its
// row into dest.
func (c *Cluster) queryRow(query string, dest ...any) error {
	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := db.QueryRowContext(ctx, query).Scan(dest...); err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	return nil
}

// waitFor polls query, which returns one boolean, until it is true or
// within passes.
func (c *Cluster) waitFor(within time.Duration, what, query string, args ...any) error {
	db, err := sql.Open(DriverName, c.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var yes bool
		err := db.QueryRowContext(ctx, query, args...).Scan(&yes)
		cancel()
		if err == nil && yes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %v for %s (last error: %v)", within, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
