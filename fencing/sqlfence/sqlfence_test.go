package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// guardStore is a sqlfence.Guard protecting a docs table written in Do's
// transaction.
type guardStore struct {
	*sqlfence.Guard
	db *sql.DB
}

func (s *guardStore) Put(res, v string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`INSERT INTO docs (id, body) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body`, res, v)
		return err
	}
}

func (s *guardStore) Get(ctx context.Context, res string) (string, error) {
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT body FROM docs WHERE id = $1`, res).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	return v, err
}

func openGuard(t *testing.T, dsn string, opts ...sqlfence.Option) *guardStore {
	db := pgtest.Open(t, dsn)
	g, err := sqlfence.New(db, opts...)
	require.NoError(t, err)
	return &guardStore{Guard: g, db: db}
}

func TestGuardConformance(t *testing.T) {
	t.Parallel()
	c := pgtest.Start(t)
	var mu sync.Mutex
	dsns := map[*testing.T]string{}
	// dsn returns the database of t, made with its tables on first use.
	dsn := func(t *testing.T) string {
		mu.Lock()
		defer mu.Unlock()
		if dsn, ok := dsns[t]; ok {
			return dsn
		}
		dsn := c.NewDatabase(t)
		s := openGuard(t, dsn)
		ctx := context.Background()
		require.NoError(t, s.CreateTable(ctx))
		require.NoError(t, s.CreateTable(ctx), "CreateTable is idempotent")
		_, err := s.db.ExecContext(ctx, `CREATE TABLE docs (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
		require.NoError(t, err)
		dsns[t] = dsn
		return dsn
	}
	fencetest.Run(t, fencetest.Harness[*sql.Tx]{
		Rollback: true,
		Kind:     "sql",
		Open: func(t *testing.T, tel fencing.Telemetry) fencetest.Store[*sql.Tx] {
			return openGuard(t, dsn(t), sqlfence.WithTelemetry(tel))
		},
		Remote: func(t *testing.T) (fencetest.Store[*sql.Tx], fencetest.Link) {
			p, err := faultproxy.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())))
			require.NoError(t, err)
			t.Cleanup(p.Close)
			return openGuard(t, proxiedDSN(t, dsn(t), p)), p
		},
		Restart: func(t *testing.T) { c.Restart(t) },
		Unreachable: func(t *testing.T, tel fencing.Telemetry) fencing.StoreGuard[*sql.Tx] {
			port, err := freeport.Port()
			require.NoError(t, err)
			g, err := sqlfence.New(pgtest.Open(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/nobody?sslmode=disable", port)), sqlfence.WithTelemetry(tel))
			require.NoError(t, err)
			return g
		},
	})
}

// proxiedDSN returns dsn with p's address for the server's.
func proxiedDSN(t *testing.T, dsn string, p *faultproxy.Proxy) string {
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = p.Addr()
	return u.String()
}

func TestGuardTokenRange(t *testing.T) {
	t.Parallel()
	c := pgtest.Shared(t)
	s := openGuard(t, c.NewDatabase(t))
	ctx := context.Background()
	require.NoError(t, s.CreateTable(ctx))
	require.NoError(t, s.Admit(ctx, "r", math.MaxInt64), "the largest BIGINT is a valid token")
	err := s.Admit(ctx, "r", math.MaxInt64+1)
	require.ErrorIs(t, err, sqlfence.ErrTokenRange)
	require.ErrorIs(t, err, fencing.ErrInvalidToken)
	h, err := s.Highest(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(math.MaxInt64), h)
	mustStale := s.Admit(ctx, "r", 5)
	assert.ErrorIs(t, mustStale, fencing.ErrStaleToken)
}

func TestGuardDoTxInCallerTransaction(t *testing.T) {
	t.Parallel()
	c := pgtest.Shared(t)
	s := openGuard(t, c.NewDatabase(t))
	ctx := context.Background()
	require.NoError(t, s.CreateTable(ctx))
	tx, err := s.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, s.DoTx(ctx, tx, "r", 8, func(ctx context.Context, got *sql.Tx) error {
		assert.Same(t, tx, got)
		return nil
	}))
	require.NoError(t, tx.Rollback())
	h, err := s.Highest(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(0), h, "a rolled-back transaction does not record the token")
}

func TestTableUpdateAndUpsert(t *testing.T) {
	t.Parallel()
	c := pgtest.Shared(t)
	db := pgtest.Open(t, c.NewDatabase(t))
	ctx := context.Background()
	_, err := db.Exec(`CREATE TABLE accounts (id INT PRIMARY KEY, balance INT NOT NULL)`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO accounts VALUES (1, 100)`)
	require.NoError(t, err)
	tb := sqlfence.Table{Name: "accounts", Key: "id"}
	require.NoError(t, tb.AddFenceColumn(ctx, db))
	require.NoError(t, tb.AddFenceColumn(ctx, db), "idempotent")

	require.NoError(t, tb.Update(ctx, db, 1, 34, "balance = $1", 150))
	require.NoError(t, tb.Update(ctx, db, 1, 34, "balance = balance + $1", 10), "equal token passes")
	err = tb.Update(ctx, db, 1, 33, "balance = $1", 0)
	var st *fencing.StaleTokenError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, fencing.StaleTokenError{Resource: "1", Token: 33, Highest: 34}, *st)
	assert.ErrorIs(t, err, fencing.ErrStaleToken)
	var bal int
	require.NoError(t, db.QueryRow(`SELECT balance FROM accounts WHERE id = 1`).Scan(&bal))
	assert.Equal(t, 160, bal)

	assert.ErrorIs(t, tb.Update(ctx, db, 2, 40, "balance = $1", 1), sqlfence.ErrNoRow)
	assert.ErrorIs(t, tb.Update(ctx, db, 1, math.MaxInt64+1, "balance = $1", 1), sqlfence.ErrTokenRange)
	assert.ErrorIs(t, tb.Update(ctx, db, 1, 0, "balance = $1", 1), fencing.ErrInvalidToken)

	require.NoError(t, tb.Upsert(ctx, db, 2, 5, []string{"balance"}, []any{7}), "insert")
	require.NoError(t, tb.Upsert(ctx, db, 2, 6, []string{"balance"}, []any{8}), "update")
	require.ErrorIs(t, tb.Upsert(ctx, db, 2, 5, []string{"balance"}, []any{9}), fencing.ErrStaleToken)
	require.NoError(t, db.QueryRow(`SELECT balance FROM accounts WHERE id = 2`).Scan(&bal))
	assert.Equal(t, 8, bal)
	h, err := tb.Highest(ctx, db, 2)
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(6), h)

	_, err = sqlfence.Table{Name: "accounts; DROP TABLE x", Key: "id"}.Highest(ctx, db, 1)
	assert.ErrorContains(t, err, "not a plain SQL identifier")
	assert.Error(t, tb.Upsert(ctx, db, 3, 1, []string{"balance = 0 --"}, []any{1}))
}

// Concurrent fenced UPDATEs with interleaved tokens: the row only ever moves
// to higher tokens, and ends at the highest admitted one.
func TestTableConcurrentUpdates(t *testing.T) {
	t.Parallel()
	c := pgtest.Shared(t)
	db := pgtest.Open(t, c.NewDatabase(t))
	ctx := context.Background()
	_, err := db.Exec(`CREATE TABLE docs (id TEXT PRIMARY KEY, body BIGINT NOT NULL, fence_token BIGINT NOT NULL DEFAULT 0,
		history BIGINT[] NOT NULL DEFAULT '{}'); INSERT INTO docs (id, body) VALUES ('d', 0)`)
	require.NoError(t, err)
	tb := sqlfence.Table{Name: "docs", Key: "id"}
	const writers, rounds = 8, 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	var maxOK fencing.Token
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				tok := fencing.Token(i*writers + (writers - 1 - w) + 1)
				err := tb.Update(ctx, db, "d", tok, "body = $1, history = history || $1::BIGINT", int64(tok))
				if err == nil {
					mu.Lock()
					maxOK = max(maxOK, tok)
					mu.Unlock()
				} else if !errors.Is(err, fencing.ErrStaleToken) {
					t.Error(err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	var body int64
	var history []byte
	require.NoError(t, db.QueryRow(`SELECT body, array_to_string(history, ',') FROM docs WHERE id = 'd'`).Scan(&body, &history))
	assert.Equal(t, int64(maxOK), body)
	var prev int64
	for _, f := range splitInts(string(history)) {
		require.GreaterOrEqualf(t, f, prev, "history %s goes backwards", history)
		prev = f
	}
}

func splitInts(s string) []int64 {
	var out []int64
	var v int64
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, v)
			v = 0
			continue
		}
		v = v*10 + int64(s[i]-'0')
	}
	return out
}

// A fenced write to a row: one statement carries the check. (Not run: it
// needs a PostgreSQL database.)
func ExampleTable_Update() {
	ctx := context.Background()
	db, _ := sql.Open("pgx", "postgres://localhost/shop")
	tb := sqlfence.Table{Name: "accounts", Key: "id"} // fence column fence_token
	_ = tb.AddFenceColumn(ctx, db)
	// UPDATE accounts SET balance = $1, fence_token = $2 WHERE id = $3 AND fence_token <= $2
	err := tb.Update(ctx, db, 1, 34, "balance = $1", 150)
	var stale *fencing.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("token %d lost to %d\n", stale.Token, stale.Highest)
	}
}

// A Guard over a fence table: the write function gets Do's transaction,
// and what it runs there commits only with the token. (Not run: it needs a
// database.)
func ExampleGuard_Do() {
	ctx := context.Background()
	db, _ := sql.Open("pgx", "postgres://localhost/shop")
	g, err := sqlfence.New(db, sqlfence.WithTable("fences"))
	if err != nil {
		panic(err)
	}
	_ = g.CreateTable(ctx)
	err = g.Do(ctx, "report:2024-06-01", 34, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE reports SET body = $1 WHERE day = $2`, "...", "2024-06-01")
		return err
	})
	fmt.Println(err)
}

// Only the transaction handed to the write function is atomic with the
// token: when the write fails after writing through tx, or the commit
// fails, the write is rolled back and the token is not recorded, while a
// statement run on the *sql.DB in the same write function (the escape the
// typed argument is there to make unnecessary) has already landed.
func TestGuardTxIsTheAtomicHandle(t *testing.T) {
	t.Parallel()
	c := pgtest.Shared(t)
	s := openGuard(t, c.NewDatabase(t))
	ctx := context.Background()
	require.NoError(t, s.CreateTable(ctx))
	_, err := s.db.ExecContext(ctx, `CREATE TABLE docs (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE audit (id TEXT PRIMARY KEY REFERENCES docs DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	require.NoError(t, s.Do(ctx, "d", 5, s.Put("d", "by 5")))

	// The commit fails (a deferred foreign key): the write through tx and
	// the token roll back together; the write through db stays.
	err = s.Do(ctx, "d", 9, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.Put("d", "by 9 through tx")(ctx, tx); err != nil {
			return err
		}
		if _, err := s.db.ExecContext(ctx, `INSERT INTO docs VALUES ('escaped', 'by 9 through db')`); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO audit VALUES ('missing')`)
		return err
	})
	require.ErrorContains(t, err, "audit", "the commit fails on the deferred constraint")
	got, err := s.Get(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, "by 5", got, "the write through tx was rolled back")
	h, err := s.Highest(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(5), h, "and the token with it")
	got, err = s.Get(ctx, "escaped")
	require.NoError(t, err)
	assert.Equal(t, "by 9 through db", got, "a write through db is not part of the transaction")

	// A stale token never reaches the write function.
	require.NoError(t, s.Admit(ctx, "d", 7))
	ran := false
	err = s.Do(ctx, "d", 6, func(ctx context.Context, tx *sql.Tx) error { ran = true; return s.Put("d", "by 6")(ctx, tx) })
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	assert.False(t, ran)
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	c := pgtest.Shared(t)
	db := pgtest.Open(t, c.NewDatabase(t))
	ctx := context.Background()
	_, err := sqlfence.New(db, sqlfence.WithTable("f; DROP TABLE x"))
	assert.ErrorContains(t, err, "not a plain SQL identifier")
	_, err = sqlfence.New(nil)
	assert.Error(t, err)
	g, err := sqlfence.New(db, sqlfence.WithTable("public.my_fences"), sqlfence.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelSerializable}))
	require.NoError(t, err)
	require.NoError(t, g.CreateTable(ctx))
	require.NoError(t, g.Do(ctx, "r", 3, func(ctx context.Context, tx *sql.Tx) error {
		var iso string
		require.NoError(t, tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&iso))
		assert.Equal(t, "serializable", iso)
		return nil
	}))
	var tok int64
	require.NoError(t, db.QueryRowContext(ctx, `SELECT token FROM public.my_fences WHERE resource = 'r'`).Scan(&tok))
	assert.Equal(t, int64(3), tok)
}
