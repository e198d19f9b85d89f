// Command staleholder plays the stale-holder timeline end to end: A takes
// the lock and writes, A pauses past its lease (a GC pause), B takes the
// lock and writes, A wakes and writes with its old token — and both fenced
// resources, a PostgreSQL row and a file, reject A's write.
//
//	go run ./examples/staleholder -dsn "$DATABASE_URL" -dir /tmp/fenced
//	go run ./examples/staleholder -url etcd://127.0.0.1:2379/locks -ttl 2s -dsn ...
//
// The backend is a URL, so every adapter (mem, etcd, zookeeper, redis, postgres) plugs
// in by its import.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"database/sql"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/fencelock/fencelock/backend"
	_ "github.com/fencelock/fencelock/backend/mem"
	_ "github.com/fencelock/fencelock/etcd"
	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/filefence"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	_ "github.com/fencelock/fencelock/postgres"
	_ "github.com/fencelock/fencelock/redis"
	_ "github.com/fencelock/fencelock/zookeeper"
)

func main() {
	url := flag.String("url", "mem://staleholder", "lock backend URL")
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL DSN (default $DATABASE_URL)")
	dir := flag.String("dir", os.TempDir()+"/fencelock-staleholder", "directory of the fenced file")
	ttl := flag.Duration("ttl", 500*time.Millisecond, "lease TTL")
	flag.Parse()
	res, err := run(context.Background(), *url, *dsn, *dir, *ttl, os.Stdout)
	if err == nil && (!res.RowRejected || !res.FileRejected) {
		err = errors.New("a stale write was accepted")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "staleholder:", err)
		os.Exit(1)
	}
}

// Result is what the timeline produced.
type Result struct {
	TokenA, TokenB            fencing.Token // the tokens A and B were granted
	RowRejected, FileRejected bool          // A's late write was rejected as stale by each resource
	Row, File                 string        // final contents
}

func run(ctx context.Context, url, dsn, dir string, ttl time.Duration, out io.Writer) (Result, error) {
	var res Result
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := time.Now()
	say := func(who, format string, args ...any) {
		fmt.Fprintf(out, "%+7.3fs  %-8s %s\n", time.Since(start).Seconds(), who, fmt.Sprintf(format, args...))
	}

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return res, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS reports (id TEXT PRIMARY KEY, body TEXT NOT NULL)`); err != nil {
		return res, err
	}
	row := sqlfence.Table{Name: "reports", Key: "id"}
	if err := row.AddFenceColumn(ctx, db); err != nil {
		return res, err
	}
	files, err := filefence.New(dir)
	if err != nil {
		return res, err
	}
	// write sends one token to both resources; each checks it atomically.
	write := func(tok fencing.Token, text string) (rowErr, fileErr error) {
		rowErr = row.Upsert(ctx, db, "daily", tok, []string{"body"}, []any{text})
		fileErr = files.WriteFile(ctx, "daily.txt", tok, []byte(text))
		return rowErr, fileErr
	}

	lockerA, err := backend.Open(ctx, url)
	if err != nil {
		return res, err
	}
	defer lockerA.Close()
	lockerB, err := backend.Open(ctx, url)
	if err != nil {
		return res, err
	}
	defer lockerB.Close()

	leaseA, err := lockerA.Acquire(ctx, "daily-report", backend.WithTTL(ttl), backend.WithAutoRenew(false))
	if err != nil {
		return res, fmt.Errorf("acquire by A: %w", err)
	}
	defer leaseA.Release(context.WithoutCancel(ctx))
	res.TokenA = leaseA.Token()
	say("A", "acquires the lock: token %s", leaseA.Token())
	if re, fe := write(leaseA.Token(), "draft by A"); re != nil || fe != nil {
		return res, fmt.Errorf("first write by A: %v, %v", re, fe)
	}
	say("stores", "accept A's write to the row and the file")
	say("A", "pauses (GC, SIGSTOP): no renewals; its lease runs out")

	leaseB, err := lockerB.Acquire(ctx, "daily-report", backend.WithTTL(ttl))
	if err != nil {
		return res, fmt.Errorf("acquire by B: %w", err)
	}
	defer leaseB.Release(context.WithoutCancel(ctx))
	res.TokenB = leaseB.Token()
	say("B", "acquires the lock after A's lease expired: token %s", leaseB.Token())
	if re, fe := write(leaseB.Token(), "report by B"); re != nil || fe != nil {
		return res, fmt.Errorf("write by B: %v, %v", re, fe)
	}
	say("stores", "accept B's write")

	say("A", "wakes up, still believes it holds the lock, writes with token %s", leaseA.Token())
	re, fe := write(leaseA.Token(), "overwrite by A")
	res.RowRejected, res.FileRejected = errors.Is(re, fencing.ErrStaleToken), errors.Is(fe, fencing.ErrStaleToken)
	say("row", "%v", verdict(re))
	say("file", "%v", verdict(fe))

	if err := db.QueryRowContext(ctx, `SELECT body FROM reports WHERE id = 'daily'`).Scan(&res.Row); err != nil {
		return res, err
	}
	b, _, err := files.Read("daily.txt")
	if err != nil {
		return res, err
	}
	res.File = string(b)
	say("stores", "hold %q and %q", res.Row, res.File)
	return res, nil
}

func verdict(err error) string {
	if err == nil {
		return "ACCEPTS the stale write: fencing failed"
	}
	return "rejects it: " + err.Error()
}
