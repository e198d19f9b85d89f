package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fencing"
)

// DefaultTable is the fence table of a Guard made without WithTable.
const DefaultTable = "fencelock_fences"

// Guard is a fencing.StoreGuard[*sql.Tx] backed by a fence table
// (resource TEXT PRIMARY KEY, token BIGINT): Do records the token and runs
// the caller's statements in one transaction, handed to the write function.
type Guard struct {
	db    *sql.DB
	table string
	opts  *sql.TxOptions
	ins   *fencing.Instruments
}

// Option configures a Guard made by New.
type Option func(*Guard)

// WithTable sets the fence table, a plain SQL identifier, optionally
// schema-qualified (default DefaultTable, "fencelock_fences"). New rejects
// anything else.
func WithTable(name string) Option { return func(g *Guard) { g.table = name } }

// WithTxOptions sets the options of the transactions Do begins (default nil:
// the database's default isolation level, READ COMMITTED on PostgreSQL).
// Under SERIALIZABLE, concurrent writers of one resource get serialization
// failures to retry.
func WithTxOptions(opts *sql.TxOptions) Option { return func(g *Guard) { g.opts = opts } }

// WithTelemetry makes the Guard report its decisions, durations and spans
// (kind "sql"; see fencing.Telemetry) for every Do and DoTx, Admit and Gate
// included (default: the zero Telemetry, off). A DoTx is accepted when the
// token is admitted and write returns nil: the commit is the caller's.
func WithTelemetry(t fencing.Telemetry) Option {
	return func(g *Guard) { g.ins = t.Instruments("sql") }
}

// New returns a Guard over a fence table in db. Call CreateTable once, or
// create the table yourself with the same columns.
func New(db *sql.DB, opts ...Option) (*Guard, error) {
	if db == nil {
		return nil, errors.New("sqlfence: New: nil *sql.DB")
	}
	g := &Guard{db: db, table: DefaultTable}
	for _, o := range opts {
		o(g)
	}
	if err := checkIdent("table", g.table); err != nil {
		return nil, err
	}
	return g, nil
}

// CreateTable creates the fence table if it does not exist.
func (g *Guard) CreateTable(ctx context.Context) error {
	_, err := g.db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (resource TEXT PRIMARY KEY, token BIGINT NOT NULL CHECK (token > 0))`, g.table))
	return err
}

// Do implements fencing.StoreGuard[*sql.Tx]. It begins a transaction,
// raises resource's token to token in it (rejecting a lower one with a
// *fencing.StaleTokenError before write runs), calls write with the
// transaction, and commits. Run the write's statements on tx: they commit
// only together with the token, and the fence row's lock, taken by the
// token's upsert, serializes writers of one resource until then. If write
// returns an error, or the commit fails, everything done on tx is rolled
// back and the token is not raised. Statements run on the *sql.DB instead
// are outside the transaction and escape the fence. A nil write raises the
// token alone (see Admit).
//
// A COMMIT whose answer is lost (the connection drops or times out after
// it was sent) returns an *fencing.OutcomeUnknownError
// (errors.Is(err, fencing.ErrOutcomeUnknown)): the write and its token may
// have been committed. Any earlier failure rolls everything back.
func (g *Guard) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, obs := g.ins.Start(ctx, resource, token)
	err := g.do(ctx, resource, token, write)
	obs.End(err)
	return err
}

func (g *Guard) do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) (err error) {
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
	if err := g.doTx(ctx, tx, resource, token, write); err != nil {
		return err
	}
	return commit(ctx, tx, resource, token)
}

// commit commits tx, the transaction of token's write to resource. A
// failure before the COMMIT is sent (ctx already done) or that the server
// answered with a refusal (a serialization failure, a deferred constraint)
// means the transaction was rolled back, and is returned as it is;
// anything else (the connection lost, a timeout, a context ended while the
// COMMIT was on its way, a server shutting down) leaves the commit's
// outcome unknown: an *fencing.OutcomeUnknownError.
func commit(ctx context.Context, tx *sql.Tx, resource string, token fencing.Token) error {
	if err := ctx.Err(); err != nil {
		return err // database/sql rolls tx back: nothing was sent
	}
	err := tx.Commit()
	if err == nil || refused(err) {
		return err
	}
	return &fencing.OutcomeUnknownError{Resource: resource, Token: token, Err: err}
}

// refused says err carries an SQLSTATE (the driver's error has a
// SQLState method: pgx's *pgconn.PgError, lib/pq's *pq.Error) of a class
// by which PostgreSQL refuses a COMMIT and rolls the transaction back.
// Other classes, connection exceptions (08), operator intervention (57,
// such as a shutdown, which can strike a transaction already committed
// locally while it waits for a synchronous standby), system and internal
// errors (58, XX), and errors without an SQLSTATE leave the outcome open.
func refused(err error) bool {
	var se interface{ SQLState() string }
	if !errors.As(err, &se) {
		return false
	}
	state := se.SQLState()
	if len(state) != 5 {
		return false
	}
	switch state[:2] {
	case "22", // data exception
		"23", // integrity constraint violation (a deferred constraint)
		"25", // invalid transaction state
		"40", // transaction rollback: serialization failure, deadlock
		"42", // syntax error or access rule violation
		"P0": // PL/pgSQL raise (a deferred trigger)
		return true
	}
	return false
}

// DoTx is Do inside the caller's transaction tx: the token is checked and
// recorded in tx, then write runs with tx. The caller commits; the record
// and the write commit or roll back together. After a stale rejection tx is
// still usable (nothing was changed). A COMMIT of the caller's whose answer
// is lost leaves the write's outcome unknown, whatever error the driver
// gives (see Do).
func (g *Guard) DoTx(ctx context.Context, tx *sql.Tx, resource string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) error {
	ctx, obs := g.ins.Start(ctx, resource, token)
	err := g.doTx(ctx, tx, resource, token, write)
	obs.End(err)
	return err
}

func (g *Guard) doTx(ctx context.Context, tx *sql.Tx, resource string, token fencing.Token, write func(ctx context.Context, tx *sql.Tx) error) error {
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
	return write(ctx, tx)
}

// Admit raises resource's token to token without a write of its own
// (rejecting a lower one), in a transaction of its own.
func (g *Guard) Admit(ctx context.Context, resource string, token fencing.Token) error {
	return g.Do(ctx, resource, token, nil)
}

// Gate returns g as a fencing.Guard for store-agnostic code
// (httpfence.Middleware, fencing.Admit). Its write function gets no
// transaction: it runs inside Do's transaction, after the check and under
// the fence row's lock, and the token is committed only if it returns nil,
// but nothing it does is part of that transaction or rolled back with it.
// To change the database atomically with the check, use Do and tx.
func (g *Guard) Gate() fencing.Guard { return fencing.Gate[*sql.Tx](g) }

// Highest returns the highest token recorded for resource (0 if none).
func (g *Guard) Highest(ctx context.Context, resource string) (fencing.Token, error) {
	var v int64
	err := g.db.QueryRowContext(ctx, fmt.Sprintf(`SELECT token FROM %s WHERE resource = $1`, g.table), resource).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return fencing.Token(v), err
}
