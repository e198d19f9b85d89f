package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/pgtest"
)

// guardStore is a sqlfence.Guard protecting a docs table written in Do's
// transaction.
type guardStore struct {
	*sqlfence.Guard
	db *sql.DB
}

func (s *guardStore) Put(res, v string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := sqlfence.Tx(ctx).ExecContext(ctx,
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

func openGuard(t *testing.T, dsn string) *guardStore {
	db := pgtest.Open(t, dsn)
	g, err := sqlfence.NewGuard(db, "", nil)
	require.NoError(t, err)
	return &guardStore{Guard: g, db: db}
}

func TestGuardConformance(t *testing.T) {
	c := pgtest.Start(t)
	var mu sync.Mutex
	dsns := map[*testing.T]string{}
	fencetest.Run(t, fencetest.Harness{
		Rollback: true,
		Open: func(t *testing.T) fencetest.Store {
			mu.Lock()
			dsn, ok := dsns[t]
			if !ok {
				dsn = c.NewDatabase(t)
				dsns[t] = dsn
			}
			mu.Unlock()
			s := openGuard(t, dsn)
			if !ok {
				ctx := context.Background()
				require.NoError(t, s.CreateTable(ctx))
				require.NoError(t, s.CreateTable(ctx), "CreateTable is idempotent")
				_, err := s.db.ExecContext(ctx, `CREATE TABLE docs (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
				require.NoError(t, err)
			}
			return s
		},
		Restart: func(t *testing.T) { c.Restart(t) },
	})
}

func TestGuardTokenRange(t *testing.T) {
	c := pgtest.Start(t)
	s := openGuard(t, c.NewDatabase(t))
	ctx := context.Background()
	require.NoError(t, s.CreateTable(ctx))
	require.NoError(t, fencing.Admit(ctx, s, "r", math.MaxInt64), "the largest BIGINT is a valid token")
	err := fencing.Admit(ctx, s, "r", math.MaxInt64+1)
	require.ErrorIs(t, err, sqlfence.ErrTokenRange)
	require.ErrorIs(t, err, fencing.ErrInvalidToken)
	h, err := s.Highest(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(math.MaxInt64), h)
	mustStale := fencing.Admit(ctx, s, "r", 5)
	assert.ErrorIs(t, mustStale, fencing.ErrStaleToken)
}

func TestGuardDoTxInCallerTransaction(t *testing.T) {
	c := pgtest.Start(t)
	s := openGuard(t, c.NewDatabase(t))
	ctx := context.Background()
	require.NoError(t, s.CreateTable(ctx))
	tx, err := s.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, s.DoTx(ctx, tx, "r", 8, func(ctx context.Context) error {
		assert.Same(t, tx, sqlfence.Tx(ctx))
		return nil
	}))
	require.NoError(t, tx.Rollback())
	h, err := s.Highest(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(0), h, "a rolled-back transaction does not record the token")
}

func TestTableUpdateAndUpsert(t *testing.T) {
	c := pgtest.Start(t)
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
	c := pgtest.Start(t)
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

// A Guard over a fence table: the caller's statements run in Do's
// transaction and commit only with the token. (Not run: it needs a database.)
func ExampleGuard_Do() {
	ctx := context.Background()
	db, _ := sql.Open("pgx", "postgres://localhost/shop")
	g, _ := sqlfence.NewGuard(db, "", nil)
	_ = g.CreateTable(ctx)
	err := g.Do(ctx, "report:2024-06-01", 34, func(ctx context.Context) error {
		_, err := sqlfence.Tx(ctx).ExecContext(ctx, `UPDATE reports SET body = $1 WHERE day = $2`, "...", "2024-06-01")
		return err
	})
	fmt.Println(err)
}
