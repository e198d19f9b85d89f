package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend/driver"
	"github.com/fencelock/fencelock/fencing"
)

var (
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/revoke.lua
	revokeLua string

	inspectScript = goredis.NewScript(withQueue(inspectLua))
	revokeScript  = goredis.NewScript(withQueue(revokeLua))
)

// Inspect implements driver.Driver with one script call: the holder's
// token and TTL left, and the queue in the order of grants, each waiter
// with the time left before its entry lapses unless renewed. An entry's ID
// is its owner id, the same while it waits and once it holds. Holder
// identities and metadata are not stored (the lock value is "<owner
// id>:<token>"), and a waiter has no token before its grant. A key written
// by another library (redsync, bsm/redislock) shows with a zero token and
// its value as its ID. If the holder or a waiter is an election
// candidate's, a second script call reads the candidates' values (see
// readValues); if the holder's is gone by then (it ended in between), the
// status is read again, up to inspectTries times, after which its Value is
// shown empty.
func (d *redisDriver) Inspect(ctx context.Context, name string) (driver.Status, error) {
	k := keysOf(d.cfg.Prefix, name)
	for try := 1; ; try++ {
		st, err := d.inspect(ctx, k)
		if err != nil {
			return st, err
		}
		complete, err := d.readValues(ctx, k.lock, &st)
		if err != nil || complete || try == inspectTries {
			return st, err
		}
	}
}

// inspect runs the inspect script once for the lock whose keys are k.
func (d *redisDriver) inspect(ctx context.Context, k keys) (driver.Status, error) {
	res, err := slotRetry(ctx, d, tryAgainFor, func() ([]any, error) {
		return inspectScript.Run(ctx, d.c, []string{k.lock, k.queue, k.expiry}).Slice()
	})
	if err != nil {
		return driver.Status{}, fmt.Errorf("redis: status: %w", mapErr(err))
	}
	if len(res) != 3 {
		return driver.Status{}, fmt.Errorf("redis: status script returned %v", res)
	}
	var st driver.Status
	if value, ok := res[0].(string); ok {
		e := driver.Entry{ID: value, TTLLeft: -1}
		if i := strings.LastIndexByte(value, ':'); i >= 0 {
			if tok, err := fencing.ParseToken(value[i+1:]); err == nil {
				e.ID, e.Token = value[:i], tok
			}
		}
		if ms, ok := res[1].(int64); ok && ms >= 0 {
			e.TTLLeft = time.Duration(ms) * time.Millisecond
		}
		st.Holder = &e
	}
	waiters, _ := res[2].([]any)
	for i := 1; i < len(waiters); i += 2 {
		owner, _ := waiters[i-1].(string)
		ms, _ := waiters[i].(int64)
		st.Waiters = append(st.Waiters, driver.Entry{ID: owner, TTLLeft: time.Duration(ms) * time.Millisecond})
	}
	return st, nil
}

// Revoke implements driver.Driver with one script call: it deletes the
// lock key if it holds token and hands the lock over to the next waiter.
func (d *redisDriver) Revoke(ctx context.Context, name string, token fencing.Token) (bool, error) {
	return d.revoke(ctx, name, "token", ":"+token.String())
}

// RevokeID implements driver.Driver with one script call: if the owner
// id holds the lock, as Revoke; if it waits, its queue entry is removed and
// a message on its Locker's wake channel makes it try again at once, find
// the entry gone and fail with ErrLeaseLost (or, if the message is lost,
// its next renewal finds out).
func (d *redisDriver) RevokeID(ctx context.Context, name, id string) (bool, error) {
	return d.revoke(ctx, name, "owner", id)
}

// revoke runs the revoke script for the acquisition named by who.
func (d *redisDriver) revoke(ctx context.Context, name, by, who string) (bool, error) {
	k := keysOf(d.cfg.Prefix, name)
	n, err := slotRetry(ctx, d, tryAgainFor, func() (int, error) {
		return revokeScript.Run(ctx, d.c, []string{k.lock, k.counter, k.queue, k.expiry}, by, who,
			wakeChannel(d.cfg.Prefix, ""), flag(!d.cfg.NoClockFloor), flag(d.direct())).Int()
	})
	if err != nil {
		return false, fmt.Errorf("redis: revoke: %w", mapErr(err))
	}
	return n == 1, nil
}
