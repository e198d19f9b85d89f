// Package pganchor implements the locks a PostgreSQL user would pick
// instead of fencelock's postgres adapter, as lockbench.Contender values
// for the benchmarks beside it (issue 20):
//
//   - Advisory: pg_advisory_lock and pg_advisory_unlock on one dedicated
//     session. The server queues the waiters and wakes the next at once,
//     but the lock carries no token and belongs to the session, so it
//     cannot go through a pool or a transaction-mode pooler.
//   - Lease: a hand-written lease table polled with
//     UPDATE … WHERE owner IS NULL OR expires < now(), retried every poll
//     interval, released by clearing the owner; it works through any pool
//     and counts an epoch, but waiters learn of a release only at their
//     next poll, in no order.
//
// Both use github.com/jackc/pgx/v5 as a user would: its default query
// mode (statements prepared and cached per connection).
package pganchor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock/internal/lockbench"
)

// Advisory returns a contender that takes the session-level advisory lock
// key on conn (SELECT pg_advisory_lock(key), which waits in the server)
// and releases it (SELECT pg_advisory_unlock(key)). conn must be its own:
// the lock is the session's.
func Advisory(conn *pgx.Conn, key int64) lockbench.Contender {
	return lockbench.Contender{
		Lock: func(ctx context.Context) error {
			_, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key)
			return err
		},
		Unlock: func(ctx context.Context) error {
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&ok); err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("pganchor: advisory lock %d was not held by this session", key)
			}
			return nil
		},
	}
}

// Execer is what Lease needs of a client: *pgx.Conn and *pgxpool.Pool
// have it.
type Execer interface {
	// Exec runs a statement, as pgx's.
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DefaultPoll is the poll interval of a Lease without one: as eager as the
// pollers in the Redis benchmarks (2ms).
const DefaultPoll = 2 * time.Millisecond

// LeaseConfig says which lease a Lease contender takes, and how.
type LeaseConfig struct {
	Table string        // the lease table, made by CreateLeaseTable; "leases" if empty
	Name  string        // the lock's row in it
	TTL   time.Duration // how long a grant lasts unless released; at least 1ms
	Poll  time.Duration // the wait between two tries; DefaultPoll if zero
}

// ErrLeaseLost is returned by a Lease's Unlock when the lease was no longer
// its owner's (it expired and someone else took it).
var ErrLeaseLost = errors.New("pganchor: lease lost before release")

// Lease returns a contender that takes the lease row cfg.Name of
// cfg.Table for owner with
//
//	UPDATE leases SET owner = $1, expires = now() + ttl, epoch = epoch + 1
//	WHERE name = $2 AND (owner IS NULL OR expires < now())
//
// tried again every cfg.Poll until it updates the row, and releases it with
// UPDATE leases SET owner = NULL WHERE name = $2 AND owner = $1. Every
// contender needs an owner of its own.
func Lease(db Execer, owner string, cfg LeaseConfig) (lockbench.Contender, error) {
	if cfg.Table == "" {
		cfg.Table = "leases"
	}
	if cfg.Poll == 0 {
		cfg.Poll = DefaultPoll
	}
	switch {
	case owner == "":
		return lockbench.Contender{}, errors.New("pganchor: empty owner")
	case cfg.Name == "":
		return lockbench.Contender{}, errors.New("pganchor: empty lease name")
	case cfg.TTL < time.Millisecond:
		return lockbench.Contender{}, fmt.Errorf("pganchor: TTL %v under 1ms", cfg.TTL)
	case cfg.Poll < 0:
		return lockbench.Contender{}, fmt.Errorf("pganchor: negative poll interval %v", cfg.Poll)
	}
	t := pgx.Identifier{cfg.Table}.Sanitize()
	acquire := `UPDATE ` + t + ` SET owner = $1, expires = now() + $3 * interval '1 millisecond', epoch = epoch + 1
		WHERE name = $2 AND (owner IS NULL OR expires < now())`
	release := `UPDATE ` + t + ` SET owner = NULL WHERE name = $2 AND owner = $1`
	ttl := cfg.TTL.Milliseconds()
	return lockbench.Contender{
		Lock: func(ctx context.Context) error {
			timer := time.NewTimer(0)
			defer timer.Stop()
			for {
				tag, err := db.Exec(ctx, acquire, owner, cfg.Name, ttl)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 1 {
					return nil
				}
				timer.Reset(cfg.Poll)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-timer.C:
				}
			}
		},
		Unlock: func(ctx context.Context) error {
			tag, err := db.Exec(ctx, release, owner, cfg.Name)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return ErrLeaseLost
			}
			return nil
		},
	}, nil
}

// CreateLeaseTable creates the lease table (if it does not exist) with a
// free row for each name: name text primary key, owner text, expires
// timestamptz, epoch bigint (grants so far).
func CreateLeaseTable(ctx context.Context, db Execer, table string, names ...string) error {
	if table == "" {
		table = "leases"
	}
	t := pgx.Identifier{table}.Sanitize()
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (
		name text PRIMARY KEY, owner text, expires timestamptz, epoch bigint NOT NULL DEFAULT 0)`); err != nil {
		return fmt.Errorf("pganchor: create %s: %w", t, err)
	}
	for _, n := range names {
		if _, err := db.Exec(ctx, `INSERT INTO `+t+` (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, n); err != nil {
			return fmt.Errorf("pganchor: lease row %q: %w", n, err)
		}
	}
	return nil
}
