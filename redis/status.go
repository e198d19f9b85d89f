package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/fencing"
)

var (
	//go:embed scripts/inspect.lua
	inspectSrc string
	//go:embed scripts/revoke.lua
	revokeSrc string

	inspectScript = goredis.NewScript(inspectSrc)
	revokeScript  = goredis.NewScript(revokeSrc)
)

// Inspect implements backend.Inspector with one script call: the holder's
// token and TTL left. Waiters leave nothing in Redis, so none are listed, and
// the holder identity is not stored (the value is "<owner id>:<token>").
// A key written by another library (redsync, bsm/redislock) shows with a
// zero token.
func (d *driver) Inspect(ctx context.Context, name string) (backend.Status, error) {
	res, err := inspectScript.Run(ctx, d.c, []string{keysOf(d.cfg.Prefix, name).lock}).Slice()
	if err != nil {
		return backend.Status{}, fmt.Errorf("redis: status: %w", err)
	}
	value, ok := res[0].(string)
	if !ok {
		return backend.Status{}, nil
	}
	e := backend.Entry{TTLLeft: -1}
	if i := strings.LastIndexByte(value, ':'); i >= 0 {
		if tok, err := fencing.ParseToken(value[i+1:]); err == nil {
			e.Token = tok
		}
	}
	if ms, ok := res[1].(int64); ok && ms >= 0 {
		e.TTLLeft = time.Duration(ms) * time.Millisecond
	}
	return backend.Status{Holder: &e}, nil
}

// Revoke implements backend.Revoker with one script call: it deletes the
// lock key if it holds token and wakes the waiters.
func (d *driver) Revoke(ctx context.Context, name string, token fencing.Token) (bool, error) {
	k := keysOf(d.cfg.Prefix, name)
	n, err := revokeScript.Run(ctx, d.c, []string{k.lock}, ":"+token.String(), k.channel).Int()
	if err != nil {
		return false, fmt.Errorf("redis: revoke: %w", err)
	}
	return n == 1, nil
}
