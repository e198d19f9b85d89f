package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/backend/driver"
)

var (
	//go:embed scripts/proclaim.lua
	proclaimLua string
	//go:embed scripts/values.lua
	valuesLua string

	proclaimScript = goredis.NewScript(proclaimLua)
	valuesScript   = goredis.NewScript(valuesLua)
	proclaimHash   = proclaimScript.Hash()
)

// candidateMark is the segment an election candidate's owner id has
// before its TTL, "<locker id>.<seq>.v.<ttl ms>" (a lock's is "<locker
// id>.<seq>.<ttl ms>"): Inspect reads the value keys of the owners that
// have it, and of no other, so a lock's status costs what it did.
const candidateMark = "v."

// valueKeyInfix joins the lock key and an owner id into the owner's value
// key: "<lock key>:value:<owner>".
const valueKeyInfix = ":value:"

// candidate is what an election candidate's acquisition (driver.Request
// Value) keeps beside a lock's: its value key, under the lock's hash tag,
// and what the scripts take of it, boxed once.
type candidate struct {
	keyName string
	key     any // keyName
	value   any // the value the request gave, stored by the first attempt that queues or takes the lock
	keyTTL  any // the value key's lifetime in ms (int64): see newCandidate
}

// newCandidate returns the candidate data of owner, an acquisition of the
// lock whose key is lock, with value and a TTL of ttlMs. Its value key
// lives two TTLs past its last renewal (every renewal of the lock key or
// queue entry renews it too), so that it outlives them: a release grants
// the next waiter a lock key that lives one TTL from the grant, less than
// one TTL after that waiter's last renewal (else its entry had lapsed). A
// crashed candidate's value key thus expires within two TTLs.
func newCandidate(lock, owner, value string, ttlMs int64) *candidate {
	k := valueKey(lock, owner)
	return &candidate{keyName: k, key: k, value: value, keyTTL: 2 * ttlMs}
}

// valueKey returns the value key of owner, an acquisition of the lock
// whose key is lock.
func valueKey(lock, owner string) string { return lock + valueKeyInfix + owner }

// isCandidate reports whether owner is the owner id of an election
// candidate's acquisition: "<locker id>.<seq>.v.<ttl ms>" (the locker id
// is hex and the sequence number base 36: neither holds a dot).
func isCandidate(owner string) bool {
	i := strings.LastIndexByte(owner, '.')
	return i > 0 && strings.Count(owner, ".") == 3 && strings.HasSuffix(owner[:i+1], "."+candidateMark)
}

// Proclaim implements driver.Lease with one script call: it stores value
// in the acquisition's value key only if the lock key still holds this
// acquisition's "<owner>:<token>" (else it stores nothing and returns an
// error matching backend.ErrLeaseLost). With Config.WaitReplicas, WAIT
// follows in the same pipeline, and a value not acknowledged by enough
// replicas is an error matching backend.ErrUnavailable and
// ErrNotReplicated (stored on the primary, maybe lost by a failover: the
// caller asks again).
func (l *lease) Proclaim(ctx context.Context, value string) error {
	c := l.cand
	if c == nil {
		return errors.New("redis: proclaim on an acquisition made without a value")
	}
	l.mu.Lock()
	st, token := l.st, l.token
	l.mu.Unlock()
	if st != stHeld {
		return fmt.Errorf("%w: redis: proclaim: the acquisition does not hold lock key %q", backend.ErrLeaseLost, l.k.lock)
	}
	cmd := []any{"evalsha", proclaimHash, 2, l.k.lock, c.keyName, l.owner + ":" + token.String(), value, c.keyTTL}
	n, err := bounded(ctx, l.d, func() (int64, error) {
		if l.d.cfg.WaitReplicas == 0 {
			return l.d.eval(ctx, tryAgainWithin(l.ttlMs), cmd, proclaimScript, proclaimLua).Int64()
		}
		budget := l.d.waitBudget(ctx, l.ttlMs)
		script, wait, _, err := l.d.evalWait(ctx, tryAgainWithin(l.ttlMs), l.k.lock, cmd, proclaimLua, budget, nil)
		if err != nil {
			return 0, err
		}
		n, err := script.Int64()
		if err == nil && n == 1 {
			err = l.d.checkAcks(wait, "the proclaim", budget)
		}
		return n, err
	})
	if err != nil {
		return fmt.Errorf("redis: proclaim script: %w", mapErr(err))
	}
	if n != 1 {
		return fmt.Errorf("%w: redis: lock key %q is gone or no longer this acquisition's: the value was not stored",
			backend.ErrDeleted, l.k.lock)
	}
	return nil
}

// inspectTries bounds Inspect's reads: a holder whose value key is gone
// when its value is read ended between the two reads, and the status is
// read again.
const inspectTries = 3

// readValues sets the Value of st's entries that are election candidates
// (see isCandidate) from their value keys under lock, the lock key, with
// one script call if there are any. A waiter whose key is gone ended
// after st was read: it is left out. It reports false if the holder's key
// is gone (it ended: st is out of date).
func (d *redisDriver) readValues(ctx context.Context, lock string, st *driver.Status) (bool, error) {
	var keys []string
	if h := st.Holder; h != nil && h.Token != 0 && isCandidate(h.ID) {
		keys = append(keys, valueKey(lock, h.ID))
	}
	for _, w := range st.Waiters {
		if isCandidate(w.ID) {
			keys = append(keys, valueKey(lock, w.ID))
		}
	}
	if len(keys) == 0 {
		return true, nil
	}
	vs, err := valuesScript.Run(ctx, d.c, keys).Slice()
	if err != nil {
		return false, fmt.Errorf("redis: status: values script: %w", mapErr(err))
	}
	if len(vs) != len(keys) {
		return false, fmt.Errorf("redis: status: values script returned %d values for %d keys", len(vs), len(keys))
	}
	complete := true
	if h := st.Holder; h != nil && h.Token != 0 && isCandidate(h.ID) {
		v, ok := vs[0].(string)
		h.Value, complete = v, ok
		vs = vs[1:]
	}
	waiters := st.Waiters[:0]
	for _, w := range st.Waiters {
		if isCandidate(w.ID) {
			v, ok := vs[0].(string)
			vs = vs[1:]
			if !ok {
				continue
			}
			w.Value = v
		}
		waiters = append(waiters, w)
	}
	st.Waiters = waiters
	return complete, nil
}
