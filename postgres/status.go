package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

// Inspect implements driver.Driver with one statement, read from one
// snapshot: the live holder with its token, holder identity, metadata and
// TTL left, then the live waiters in the order of grants, each with the
// time left before its queue row lapses unless renewed. An entry's ID is
// its owner id, the same while it waits and once it holds. A candidate's
// entry (WithValue) has its value in the metadata column as a jsonb string
// and no holder: it is reported as the entry's Value.
func (d *pgDriver) Inspect(ctx context.Context, name string) (driver.Status, error) {
	if err := d.ready(ctx); err != nil {
		return driver.Status{}, err
	}
	rows, err := d.c.Query(ctx, d.sql.inspect, pgx.QueryExecModeExec, name)
	if err != nil {
		return driver.Status{}, fmt.Errorf("postgres: status: %w", mapErr(err))
	}
	defer rows.Close()
	var st driver.Status
	for rows.Next() {
		var (
			held         bool
			owner        string
			token, ttlMs int64
			holder, meta *string
		)
		if err := rows.Scan(&held, &owner, &token, &ttlMs, &holder, &meta); err != nil {
			return driver.Status{}, fmt.Errorf("postgres: status: %w", mapErr(err))
		}
		e := driver.Entry{ID: owner, TTLLeft: time.Duration(ttlMs) * time.Millisecond}
		if holder != nil {
			e.Holder = *holder
		}
		if meta != nil {
			if err := decodeMetadata(*meta, &e); err != nil {
				return driver.Status{}, fmt.Errorf("postgres: status: metadata of %s: %w", owner, err)
			}
		}
		if held {
			e.Token = fencing.Token(token)
			st.Holder = &e
		} else {
			st.Waiters = append(st.Waiters, e)
		}
	}
	if err := rows.Err(); err != nil {
		return driver.Status{}, fmt.Errorf("postgres: status: %w", mapErr(err))
	}
	return st, nil
}

// decodeMetadata sets e's Value from meta, the metadata column's jsonb as
// text, if it is a string (a candidate's value), else e's Metadata (a
// lock's object). PostgreSQL prints jsonb without leading space.
func decodeMetadata(meta string, e *driver.Entry) error {
	if strings.HasPrefix(meta, `"`) {
		return json.Unmarshal([]byte(meta), &e.Value)
	}
	return json.Unmarshal([]byte(meta), &e.Metadata)
}

// Revoke implements driver.Driver with one statement: it ends the
// holder's lease if it carries token, grants the lock to the next waiter,
// and notifies the holder's Locker, whose loss signal fires at once if its
// listener is up (else at its next renewal).
func (d *pgDriver) Revoke(ctx context.Context, name string, token fencing.Token) (bool, error) {
	if token == 0 || token > math.MaxInt64 {
		return false, nil // no grant has such a token
	}
	return d.revoke(ctx, name, int64(token), nil)
}

// RevokeID implements driver.Driver with one statement: if the owner id
// holds the lock, as Revoke; if it waits, its queue row is removed and a
// notification makes it try again at once, find the row gone and fail with
// ErrLeaseLost (or, if the notification is lost, its next renewal finds
// out).
func (d *pgDriver) RevokeID(ctx context.Context, name, id string) (bool, error) {
	return d.revoke(ctx, name, 0, id)
}

func (d *pgDriver) revoke(ctx context.Context, name string, token int64, owner any) (bool, error) {
	if err := d.ready(ctx); err != nil {
		return false, err
	}
	var found bool
	if err := d.c.QueryRow(ctx, d.sql.revoke, pgx.QueryExecModeExec, name, token, owner).Scan(&found); err != nil {
		return false, fmt.Errorf("postgres: revoke: %w", mapErr(err))
	}
	return found, nil
}
