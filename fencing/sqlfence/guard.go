package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fencing"
)

// DefaultTable is the fence table NewGuard uses when given "".
const DefaultTable = "fencelock_fences"

// Guard is a fencing.Guard backed by a fence table
// (resource TEXT PRIMARY KEY, token BIGINT). Do runs the check, the record
// of the token and the caller's write in one transaction.
type Guard struct {
	db    *sql.DB
	table string
	opts  *sql.TxOptions
}

// NewGuard returns a Guard over table (DefaultTable if "") in db. Call
// CreateTable once, or create the table yourself with the same columns.
// opts are the transaction options of Do (nil: the database default, READ
// COMMITTED on PostgreSQL; under SERIALIZABLE, concurrent writers of one
// resource get serialization failures to retry).
func NewGuard(db *sql.DB, table string, opts *sql.TxOptions) (*Guard, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := checkIdent("table", table); err != nil {
		return nil, err
	}
	return &Guard{db: db, table: table, opts: opts}, nil
}

// CreateTable creates the fence table if it does not exist.
func (g *Guard) CreateTable(ctx context.Context) error {
	_, err := g.db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (resource TEXT PRIMARY KEY, token BIGINT NOT NULL CHECK (token > 0))`, g.table))
	return err
}

type txKey struct{}

// Tx returns the transaction of the Do (or the DoTx) whose write function
// received ctx, or nil outside one. Run the write's statements on it: they
// commit only with the token.
func Tx(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(txKey{}).(*sql.Tx)
	return tx
}

// Do implements fencing.Guard: in one transaction it raises resource's
// token to token (rejecting a lower one with a *fencing.StaleTokenError),
// runs write with a ctx carrying the transaction (see Tx), and commits. If
// write fails, the transaction is rolled back and the token is not raised.
func (g *Guard) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context) error) (err error) {
	if err := checkToken(token); err != nil {
		return err
	}
	tx, err := g.db.BeginTx(ctx, g.opts)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := g.DoTx(ctx, tx, resource, token, write); err != nil {
		return err
	}
	return tx.Commit()
}

// DoTx is Do inside the caller's transaction tx: the token is checked and
// recorded in tx, then write runs (with Tx(ctx) == tx). The caller commits;
// the record and the write commit or roll back together. After a stale
// rejection tx is still usable (nothing was changed).
func (g *Guard) DoTx(ctx context.Context, tx *sql.Tx, resource string, token fencing.Token, write func(ctx context.Context) error) error {
	if err := checkToken(token); err != nil {
		return err
	}
	// The upsert takes the row lock and holds it to the end of tx: writers of
	// one resource are serialized, and a lower token waiting behind a higher
	// one re-checks the WHERE against the committed row.
	var got int64
	err := tx.QueryRowContext(ctx, fmt.Sprintf(`INSERT INTO %s AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE f.token <= EXCLUDED.token
RETURNING token`, g.table), resource, int64(token)).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		var highest int64
		if err := tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT token FROM %s WHERE resource = $1`, g.table), resource).Scan(&highest); err != nil {
			return err
		}
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: fencing.Token(highest)}
	}
	if err != nil {
		return err
	}
	if write == nil {
		return nil
	}
	return write(context.WithValue(ctx, txKey{}, tx))
}

// Highest returns the highest token recorded for resource (0 if none).
func (g *Guard) Highest(ctx context.Context, resource string) (fencing.Token, error) {
	var v int64
	err := g.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT token FROM %s WHERE resource = $1`, g.table), resource).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return fencing.Token(v), err
}
