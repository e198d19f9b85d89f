// Package sqlfence keeps fencing tokens in a SQL database, in the same
// transaction or statement as the data they protect. It uses database/sql
// and the PostgreSQL dialect ($n placeholders, ON CONFLICT, RETURNING); it is
// tested on PostgreSQL and imports no driver (register one yourself, e.g.
// github.com/jackc/pgx/v5/stdlib).
//
// Three ways to fence:
//
//   - Per row: the protected table has a fence column, and every write is ONE
//     statement that carries the check (Table.Update, Table.Upsert):
//
//     UPDATE docs SET body = $1, fence_token = $2 WHERE id = $3 AND fence_token <= $2
//
//     Zero rows means stale; the error names the token that won. Nothing can
//     come between the check and the write: it is the row lock of the UPDATE.
//
//   - Per resource, as a fencing.StoreGuard[*sql.Tx]: a fence table
//     (resource TEXT PRIMARY KEY, token BIGINT) and Guard.Do, which records
//     the token with an upsert that only raises it and hands the caller's
//     write function the same transaction.
//
//   - Per lock, when the data lives in the database that holds the postgres
//     adapter's locks: LeaseGuard.Do checks the token against the lock's own
//     row in the write's transaction, with no fence table or column:
//
//     SELECT 1 FROM fencelock_locks WHERE name = $1 AND token = $2
//     AND owner IS NOT NULL AND expires > clock_timestamp() FOR SHARE
//
//     A write commits only while its lease is the lock's live grant: FOR
//     SHARE makes a new grant of the lock, an UPDATE of that row, wait for
//     the commit. An expired lease is rejected even before anyone else takes
//     the lock.
//
// A Guard's write gets its transaction as an argument:
//
//	g, err := sqlfence.New(db) // options: WithTable, WithTxOptions
//	err = g.Do(ctx, "report:2024-06-01", token, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `UPDATE reports SET body = $1 WHERE day = $2`, body, day)
//		return err
//	})
//
// What runs on tx commits only together with the token; the upsert's row
// lock serializes writers of one resource until commit. What runs on db
// instead escapes the fence: it lands even when the token is stale.
// LeaseGuard.Do has the same shape, with a lock name for the resource.
// Guard.Gate and LeaseGuard.Gate are the same guards as plain fencing.Guards
// for store-agnostic code (httpfence.Middleware); their write functions get
// no transaction.
//
// Lost answers: Guard.Do and LeaseGuard.Do return an
// *fencing.OutcomeUnknownError (errors.Is(err, fencing.ErrOutcomeUnknown))
// when the COMMIT was sent and its answer is lost (the connection dropped
// or timed out, a context ended meanwhile, the server shut down): the write
// may have been committed; read it back. Every earlier failure, and a
// COMMIT the server refused (an SQLSTATE such as 40001 or 23505), rolled
// the transaction back. database/sql resends nothing once sent, so a stale
// rejection is never the answer to a write that landed. Table.Update and
// Table.Upsert run one statement on the caller's Querier: in a
// transaction, its commit is the caller's; on a *sql.DB, a statement
// whose answer is lost returns the driver's error, which may follow a
// statement that committed (never a stale rejection: that needs the
// statement's answer).
//
// Token range: fencing tokens are uint64; BIGINT is signed, so tokens above
// math.MaxInt64 are rejected with ErrTokenRange (which also matches
// fencing.ErrInvalidToken) before anything is sent. No backend grants such
// tokens (etcd revisions and ZooKeeper zxids are int64, Redis INCR is int64).
package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"

	"github.com/fencelock/fencelock/fencing"
)

// ErrTokenRange is returned for a token above math.MaxInt64, which a BIGINT
// cannot hold. errors.Is(err, fencing.ErrInvalidToken) is true too.
var ErrTokenRange = fmt.Errorf("%w: above the BIGINT range (math.MaxInt64)", fencing.ErrInvalidToken)

// ErrNoRow is returned by Table.Update when no row has the key: there was
// nothing to fence.
var ErrNoRow = errors.New("sqlfence: no row with that key")

// Querier is what the helpers run statements on: *sql.DB, *sql.Tx or *sql.Conn.
type Querier interface {
	// ExecContext runs a statement that returns no rows, as database/sql's.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryRowContext runs a query that returns at most one row, as
	// database/sql's.
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func checkToken(t fencing.Token) error {
	if t == 0 {
		return fmt.Errorf("%w: zero token", fencing.ErrInvalidToken)
	}
	if t > math.MaxInt64 {
		return fmt.Errorf("%w: %d", ErrTokenRange, uint64(t))
	}
	return nil
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

func checkIdent(kind, s string) error {
	if !identRE.MatchString(s) {
		return fmt.Errorf("sqlfence: %s %q is not a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, optionally schema-qualified)", kind, s)
	}
	return nil
}

// Table describes a table whose rows carry their own fence column.
type Table struct {
	Name  string // table name, optionally schema-qualified
	Key   string // primary-key (or unique) column identifying a row
	Fence string // fence column (BIGINT); "" means "fence_token"
}

func (t Table) fence() string {
	if t.Fence == "" {
		return "fence_token"
	}
	return t.Fence
}

func (t Table) check() error {
	if err := checkIdent("table", t.Name); err != nil {
		return err
	}
	if err := checkIdent("key column", t.Key); err != nil {
		return err
	}
	return checkIdent("fence column", t.fence())
}

// AddFenceColumn adds the fence column (BIGINT NOT NULL DEFAULT 0) to the
// table if it is not there yet. Existing rows start at 0, below every token.
func (t Table) AddFenceColumn(ctx context.Context, q Querier) error {
	if err := t.check(); err != nil {
		return err
	}
	_, err := q.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s BIGINT NOT NULL DEFAULT 0`, t.Name, t.fence()))
	return err
}

// Update runs one fenced UPDATE of the row whose key is key:
//
//	UPDATE <Name> SET <set>, <Fence> = $n+1 WHERE <Key> = $n+2 AND <Fence> <= $n+1
//
// set is the SET list for the caller's columns, using $1..$n for args (for
// example "body = $1, updated_at = now()"). If the row's fence column is
// higher than token, nothing changes and the error is a
// *fencing.StaleTokenError naming the stored token (its Resource is the key
// in fmt.Sprint form); if there is no such row,
// the error wraps ErrNoRow.
func (t Table) Update(ctx context.Context, q Querier, key any, token fencing.Token, set string, args ...any) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return err
	}
	n := len(args)
	stmt := fmt.Sprintf(`UPDATE %s SET %s, %s = $%d WHERE %s = $%d AND %s <= $%d`,
		t.Name, set, t.fence(), n+1, t.Key, n+2, t.fence(), n+1)
	res, err := q.ExecContext(ctx, stmt, append(args, int64(token), key)...)
	if err != nil {
		return err
	}
	if rows, err := res.RowsAffected(); err != nil || rows > 0 {
		return err
	}
	return t.stale(ctx, q, key, token)
}

// Upsert inserts the row or, if its key exists, updates it, in one statement
// that carries the check:
//
//	INSERT INTO <Name> (<Key>, cols..., <Fence>) VALUES (...)
//	ON CONFLICT (<Key>) DO UPDATE SET col = EXCLUDED.col, ..., <Fence> = EXCLUDED.<Fence>
//	WHERE <Name>.<Fence> <= EXCLUDED.<Fence>
//
// A stored fence higher than token leaves the row unchanged and returns a
// *fencing.StaleTokenError.
func (t Table) Upsert(ctx context.Context, q Querier, key any, token fencing.Token, cols []string, vals []any) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return err
	}
	if len(cols) != len(vals) {
		return fmt.Errorf("sqlfence: %d columns but %d values", len(cols), len(vals))
	}
	names, params, sets := t.Key, "$1", ""
	for i, c := range cols {
		if err := checkIdent("column", c); err != nil {
			return err
		}
		names += ", " + c
		params += fmt.Sprintf(", $%d", i+2)
		sets += fmt.Sprintf("%s = EXCLUDED.%s, ", c, c)
	}
	f := t.fence()
	stmt := fmt.Sprintf(`INSERT INTO %s AS t (%s, %s) VALUES (%s, $%d) ON CONFLICT (%s) DO UPDATE SET %s%s = EXCLUDED.%s WHERE t.%s <= EXCLUDED.%s`,
		t.Name, names, f, params, len(cols)+2, t.Key, sets, f, f, f, f)
	args := append(append([]any{key}, vals...), int64(token))
	res, err := q.ExecContext(ctx, stmt, args...)
	if err != nil {
		return err
	}
	if rows, err := res.RowsAffected(); err != nil || rows > 0 {
		return err
	}
	return t.stale(ctx, q, key, token)
}

// stale reads the fence that beat token. Fences only rise, so the value read
// (in a later statement, which under READ COMMITTED sees the winner's commit)
// is at least the one that rejected the write.
func (t Table) stale(ctx context.Context, q Querier, key any, token fencing.Token) error {
	var highest int64
	err := q.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1`, t.fence(), t.Name, t.Key), key).Scan(&highest)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %s.%s = %v", ErrNoRow, t.Name, t.Key, key)
	}
	if err != nil {
		return err
	}
	return &fencing.StaleTokenError{Resource: fmt.Sprint(key), Token: token, Highest: fencing.Token(highest)}
}

// Highest returns the fence column of the row with key (0 if never fenced).
func (t Table) Highest(ctx context.Context, q Querier, key any) (fencing.Token, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	var v int64
	err := q.QueryRowContext(ctx, fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1`, t.fence(), t.Name, t.Key), key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s.%s = %v", ErrNoRow, t.Name, t.Key, key)
	}
	return fencing.Token(v), err
}
