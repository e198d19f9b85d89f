package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for GuardSQL
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/etcdfence"
	"github.com/fencelock/fencelock/fencing/filefence"
	"github.com/fencelock/fencelock/fencing/redisfence"
	"github.com/fencelock/fencelock/fencing/sqlfence"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// counter is the guarded register the workers increment: Admit raises the
// resource's highest token (rejecting a lower one with a
// fencing.ErrStaleToken), Read returns the value, Write stores a value if
// the token is not stale. Each is one atomic step of the store.
type counter interface {
	Admit(ctx context.Context, token fencing.Token) error
	Read(ctx context.Context) (int64, error)
	Write(ctx context.Context, token fencing.Token, v int64) error
	Close() error
}

// guardSpec is what a process needs to open the campaign's counter.
type guardSpec struct {
	Kind     Guard  `json:"kind"`
	URL      string `json:"url,omitempty"`
	Dir      string `json:"dir,omitempty"`
	Resource string `json:"resource"`
}

// openCounter opens the campaign's counter in the store g names, through
// that store's fencing guard (GuardNone: an unfenced file).
func openCounter(ctx context.Context, g guardSpec) (counter, error) {
	switch g.Kind {
	case GuardFile:
		return openFileCounter(g)
	case GuardNone:
		if err := os.MkdirAll(g.Dir, 0o755); err != nil {
			return nil, err
		}
		return &plainCounter{path: filepath.Join(g.Dir, g.Resource+".unfenced")}, nil
	case GuardRedis:
		return openRedisCounter(g)
	case GuardEtcd:
		return openEtcdCounter(g)
	case GuardSQL:
		return openSQLCounter(ctx, g)
	}
	return nil, fmt.Errorf("%w: unknown guard %q", errConfig, g.Kind)
}

// openFileCounter opens the counter as a file in g.Dir, behind a
// filefence guard.
func openFileCounter(g guardSpec) (counter, error) {
	fg, err := filefence.New(g.Dir)
	if err != nil {
		return nil, err
	}
	return &fencedCounter[io.Writer]{g: fg, res: g.Resource,
		read: func(context.Context) ([]byte, error) {
			b, _, err := fg.Read(g.Resource)
			return b, err
		},
		stage: func(_ context.Context, w io.Writer, v string) error {
			_, err := io.WriteString(w, v)
			return err
		},
	}, nil
}

// openRedisCounter opens the counter as a Redis key in the resource's
// hash slot, behind a redisfence guard.
func openRedisCounter(g guardSpec) (counter, error) {
	opt, err := redis.ParseURL(g.URL)
	if err != nil {
		return nil, fmt.Errorf("chaos: guard URL: %w", err)
	}
	opt.ContextTimeoutEnabled = true
	// go-redis's retries (MaxRetries 3 unless the URL says otherwise):
	// a fence script retried after its answer was lost reports what
	// its first run did (redisfence's call records).
	c := redis.NewClient(opt)
	rg, err := redisfence.New(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	key := "{" + g.Resource + "}:value"
	return &fencedCounter[*redisfence.Batch]{g: rg, res: g.Resource, close: c.Close,
		read: func(ctx context.Context) ([]byte, error) {
			b, err := c.Get(ctx, key).Bytes()
			if errors.Is(err, redis.Nil) {
				return nil, nil
			}
			return b, err
		},
		stage: func(_ context.Context, b *redisfence.Batch, v string) error {
			b.Set(key, v)
			return nil
		},
	}, nil
}

// openEtcdCounter opens the counter as an etcd key, behind an etcdfence
// guard.
func openEtcdCounter(g guardSpec) (counter, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(g.URL, ","), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("chaos: guard URL: %w", err)
	}
	eg, err := etcdfence.New(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	key := "fencelock-chaos/" + g.Resource
	return &fencedCounter[*etcdfence.Txn]{g: eg, res: g.Resource, close: c.Close,
		read: func(ctx context.Context) ([]byte, error) {
			resp, err := c.Get(ctx, key)
			if err != nil || len(resp.Kvs) == 0 {
				return nil, err
			}
			return resp.Kvs[0].Value, nil
		},
		stage: func(_ context.Context, t *etcdfence.Txn, v string) error {
			t.Put(key, v)
			return nil
		},
	}, nil
}

// openSQLCounter opens the counter as a row of the fencelock_chaos table
// in PostgreSQL (creating the table and the guard's), behind a sqlfence
// guard.
func openSQLCounter(ctx context.Context, g guardSpec) (counter, error) {
	db, err := sql.Open("pgx", g.URL)
	if err != nil {
		return nil, fmt.Errorf("chaos: guard URL: %w", err)
	}
	sg, err := sqlfence.New(db)
	if err == nil {
		err = sg.CreateTable(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS fencelock_chaos (resource TEXT PRIMARY KEY, value BIGINT NOT NULL)`)
	}
	if err != nil {
		db.Close()
		return nil, err
	}
	return &fencedCounter[*sql.Tx]{g: sg, res: g.Resource, close: db.Close,
		read: func(ctx context.Context) ([]byte, error) {
			var b []byte
			err := db.QueryRowContext(ctx, `SELECT value::text FROM fencelock_chaos WHERE resource = $1`, g.Resource).Scan(&b)
			if errors.Is(err, sql.ErrNoRows) {
				return nil, nil
			}
			return b, err
		},
		stage: func(ctx context.Context, tx *sql.Tx, v string) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO fencelock_chaos (resource, value) VALUES ($1, $2)
				ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value`, g.Resource, v)
			return err
		},
	}, nil
}

// checkGuardURL checks the URL of a guard's store, without dialling.
func checkGuardURL(g Guard, raw string) error {
	var err error
	switch g {
	case GuardRedis:
		_, err = redis.ParseURL(raw)
	case GuardEtcd:
		for _, e := range strings.Split(raw, ",") {
			u, perr := url.Parse(e)
			if perr != nil {
				return errors.New("an endpoint does not parse as a URL")
			}
			if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("endpoint %q is not http://host:port", urlkit.Redact(u))
			}
		}
	case GuardSQL:
		_, err = pgx.ParseConfig(raw)
	}
	if err != nil {
		return errors.New(strings.ReplaceAll(err.Error(), raw, "(the URL)")) // no password in the message
	}
	return nil
}

// parseValue reads a stored counter; nothing stored is 0.
func parseValue(b []byte) (int64, error) {
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// storeGuard is what every store guard of the fencing package has.
type storeGuard[S any] interface {
	fencing.StoreGuard[S]
	Admit(ctx context.Context, resource string, token fencing.Token) error
}

// fencedCounter is the counter kept by a store guard: read returns the
// stored value (nil if none), stage stages the new one through the
// guard's handle, close closes the store's client (nil: nothing to close).
type fencedCounter[S any] struct {
	g     storeGuard[S]
	res   string
	read  func(ctx context.Context) ([]byte, error)
	stage func(ctx context.Context, s S, v string) error
	close func() error
}

func (f *fencedCounter[S]) Admit(ctx context.Context, t fencing.Token) error {
	return f.g.Admit(ctx, f.res, t)
}

func (f *fencedCounter[S]) Read(ctx context.Context) (int64, error) {
	b, err := f.read(ctx)
	if err != nil {
		return 0, err
	}
	return parseValue(b)
}

func (f *fencedCounter[S]) Write(ctx context.Context, t fencing.Token, v int64) error {
	return f.g.Do(ctx, f.res, t, func(ctx context.Context, s S) error { return f.stage(ctx, s, strconv.FormatInt(v, 10)) })
}

func (f *fencedCounter[S]) Close() error {
	if f.close == nil {
		return nil
	}
	return f.close()
}

// plainCounter is GuardNone: a file replaced by rename, no token kept.
type plainCounter struct{ path string }

func (p *plainCounter) Admit(context.Context, fencing.Token) error { return nil }

func (p *plainCounter) Read(context.Context) (int64, error) {
	b, err := os.ReadFile(p.path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parseValue(b)
}

func (p *plainCounter) Write(_ context.Context, _ fencing.Token, v int64) error {
	tmp, err := os.CreateTemp(filepath.Dir(p.path), ".unfenced-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := fmt.Fprint(tmp, v); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p.path)
}

func (p *plainCounter) Close() error { return nil }
