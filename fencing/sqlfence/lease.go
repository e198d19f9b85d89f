package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fencing"
)

// DefaultLockPrefix is the lock table prefix of a LeaseGuard made without
// WithLockPrefix: the postgres adapter's default, whose lock table is
// fencelock_locks.
const DefaultLockPrefix = "fencelock"

// ErrLeaseEnded is returned (wrapped, with the lock's name, the token and
// why) by LeaseGuard.Do when the token's lease is no longer live and no
// newer grant explains it: it expired, was released, or the lock has no
// such grant. errors.Is(err, fencing.ErrStaleToken) is true too.
var ErrLeaseEnded = fmt.Errorf("%w: the lease is not live", fencing.ErrStaleToken)

// LeaseGuard fences writes to a PostgreSQL database that also holds the
// postgres adapter's locks: Do checks, in the transaction of the write,
// that the token is the lock's current grant and that its lease has not
// expired, and keeps it so until the write commits. Unlike Guard it keeps
// no fence table of its own: the lock's row in {prefix}_locks is the fence.
//
// It is a fencing.StoreGuard[*sql.Tx] whose resource is the lock name, and
// stricter than the interface asks: it admits only the live grant's token,
// not any token at least as high as the last one admitted, so it does not
// take tokens of other locks or services (fencing/fencetest, which writes
// with made-up tokens, does not apply to it).
//
// Each Do is one transaction and leaves no session state, so it works
// through a transaction-mode pooler (PgBouncer) when the driver sends no
// named prepared statements (pgx: default_query_exec_mode=exec in the DSN).
type LeaseGuard struct {
	db    *sql.DB
	table string // {prefix}_locks
	check string // the FOR SHARE check
	ins   *fencing.Instruments
}

var _ fencing.StoreGuard[*sql.Tx] = (*LeaseGuard)(nil)

// LeaseOption configures a LeaseGuard made by NewLeaseGuard.
type LeaseOption func(*leaseConfig)

type leaseConfig struct {
	prefix string
	tel    fencing.Telemetry
}

// WithLockPrefix sets the table prefix the postgres adapter was given
// (default DefaultLockPrefix): the guard reads {prefix}_locks. A plain SQL
// identifier, optionally schema-qualified; NewLeaseGuard rejects anything
// else.
func WithLockPrefix(prefix string) LeaseOption {
	return func(c *leaseConfig) { c.prefix = prefix }
}

// WithLeaseTelemetry makes the LeaseGuard report its decisions, durations
// and spans (kind "sql_lease"; see fencing.Telemetry) for every Do and DoTx,
// Gate included (default: the zero Telemetry, off). A token whose lease
// ended (ErrLeaseEnded) counts as stale, like one a newer grant overtook; a
// DoTx is accepted when the check passes and write returns nil (the commit
// is the caller's).
func WithLeaseTelemetry(t fencing.Telemetry) LeaseOption {
	return func(c *leaseConfig) { c.tel = t }
}

// NewLeaseGuard returns a LeaseGuard over the lock table of the postgres
// adapter in db, which must be the database the adapter keeps its locks in.
// It does not create the table: the adapter does (or postgres.Migrate).
func NewLeaseGuard(db *sql.DB, opts ...LeaseOption) (*LeaseGuard, error) {
	if db == nil {
		return nil, errors.New("sqlfence: NewLeaseGuard: nil *sql.DB")
	}
	c := leaseConfig{prefix: DefaultLockPrefix}
	for _, o := range opts {
		o(&c)
	}
	if err := checkIdent("lock prefix", c.prefix); err != nil {
		return nil, err
	}
	table := c.prefix + "_locks"
	return &LeaseGuard{
		db:    db,
		table: table,
		check: fmt.Sprintf(`SELECT 1 FROM %s WHERE name = $1 AND token = $2 AND owner IS NOT NULL AND expires > clock_timestamp() FOR SHARE`, table),
		ins:   c.tel.Instruments("sql_lease"),
	}, nil
}

// Do begins a transaction, checks in it that token is the current grant of
// the lock called name and that its lease has not expired (by the
// database's clock), calls write with the transaction and commits. If the
// check fails, write is not called and the error matches
// fencing.ErrStaleToken: a *fencing.StaleTokenError naming the newer token
// if the lock was granted again, else ErrLeaseEnded. If write returns an
// error, or the commit fails, everything done on tx is rolled back. A nil
// write checks alone. A COMMIT whose answer is lost returns an
// *fencing.OutcomeUnknownError, as Guard.Do does.
//
// The check reads the lock's row FOR SHARE, and every operation of the
// postgres adapter that changes a lock (a grant, the promotion of a
// waiter, a renewal, a release, a revocation) UPDATEs that row: the acquire
// and release of a lock nobody waits for are that one UPDATE, the others
// first lock the row FOR UPDATE. Either waits for the share lock until the
// transaction ends. So from the
// check to the commit the lock cannot be granted again: what write does on
// tx commits only while the row still carries this token. A check that
// meets a grant in progress waits for it and, under READ COMMITTED, reads
// the committed row and rejects the old token. (FOR KEY SHARE would not
// do: an UPDATE that keeps the key does not wait for it.)
//
// The price: while the transaction is open, every operation on that lock
// waits, including the holder's own renewals, the waiters' queueing and
// the waiters' renewals (a renewal locks the lock's row FOR UPDATE, a
// waiter's too). Keep the transaction short against the TTL and give ctx
// a deadline. A transaction that outlives the lease still commits safely
// (nobody could be granted meanwhile), but the renewals that waited for
// it then find their rows expired: the holder's lease is lost, and so is
// every waiter's place in the queue (their acquisitions fail with
// backend.ErrLeaseLost).
//
// What it does not cover: statements run outside tx (on the *sql.DB,
// another connection, another database or service) are not checked and
// land whatever the token; effects of write outside the database happen
// even if the commit then fails.
func (g *LeaseGuard) Do(ctx context.Context, name string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, obs := g.ins.Start(ctx, name, token)
	err := g.do(ctx, name, token, write)
	obs.End(err)
	return err
}

func (g *LeaseGuard) do(ctx context.Context, name string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) (err error) {
	if err := checkToken(token); err != nil {
		return err
	}
	tx, err := g.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := g.doTx(ctx, tx, name, token, write); err != nil {
		return err
	}
	return commit(ctx, tx, name, token)
}

// DoTx is Do inside the caller's transaction tx, which must be on the
// database that holds the lock table: the check runs on tx, then write runs
// with tx, and the caller commits. The lease stays fenced until tx ends, so
// commit (or roll back) soon. On a rejection the caller must not commit
// what tx did before: roll back.
func (g *LeaseGuard) DoTx(ctx context.Context, tx *sql.Tx, name string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, obs := g.ins.Start(ctx, name, token)
	err := g.doTx(ctx, tx, name, token, write)
	obs.End(err)
	return err
}

func (g *LeaseGuard) doTx(ctx context.Context, tx *sql.Tx, name string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) error {
	if err := checkToken(token); err != nil {
		return err
	}
	var one int
	err := tx.QueryRowContext(ctx, g.check, name, int64(token)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return g.rejected(ctx, tx, name, token)
	}
	if err != nil {
		return err
	}
	if write == nil {
		return nil
	}
	return write(ctx, tx)
}

// rejected says why the check found no live grant with token: it reads the
// lock's row as it is now, for the error alone.
func (g *LeaseGuard) rejected(ctx context.Context, tx *sql.Tx, name string, token fencing.Token) error {
	var (
		current     sql.NullInt64
		owned, live bool
	)
	err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT token, owner IS NOT NULL, coalesce(expires > clock_timestamp(), false) FROM %s WHERE name = $1`, g.table), name).Scan(&current, &owned, &live)
	var why string
	switch {
	case errors.Is(err, sql.ErrNoRows):
		why = fmt.Sprintf("the lock was never granted (no row in %s)", g.table)
	case err != nil:
		return err
	case current.Int64 > int64(token):
		return &fencing.StaleTokenError{Resource: name, Token: token, Highest: fencing.Token(current.Int64)}
	case current.Int64 < int64(token):
		why = fmt.Sprintf("the lock's current token is %d", current.Int64)
	case !owned:
		why = "it was released"
	case !live:
		why = "it expired"
	default:
		why = "it was not live at the check"
	}
	return fmt.Errorf("sqlfence: lock %q, token %d: %w: %s", name, token, ErrLeaseEnded, why)
}

// Gate returns g as a fencing.Guard for store-agnostic code
// (httpfence.Middleware, fencing.Admit), with lock names as resources. Its
// write function gets no transaction: it runs inside Do's, after the check
// and while the lock cannot be granted again, but nothing it does is part
// of that transaction. To change the database atomically with the check,
// use Do and tx.
func (g *LeaseGuard) Gate() fencing.Guard { return fencing.Gate[*sql.Tx](g) }
