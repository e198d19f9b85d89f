package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// While a Redis Cluster migrates a slot to another master (CLUSTER SETSLOT
// MIGRATING and IMPORTING, until SETSLOT NODE), a command that names
// several keys of the slot is served only where all of them exist; else
// the source or the target answers TRYAGAIN. Every script of a lock
// names a key that rarely exists (the queue while nobody waits, an
// acquisition's end mark), so each one meets TRYAGAIN for as long as its
// slot migrates. go-redis's ClusterClient follows MOVED and ASK and sends
// a command again after TRYAGAIN, MaxRedirects times (3 by default, some
// 30–150ms in all); a pipeline sent to one node (Config.WaitReplicas)
// follows nothing.
//
// So the adapter sends a script that met TRYAGAIN, ASK or MOVED (see
// migrating) again itself: tryAgainMin after, the pause doubling up to tryAgainMax,
// with jitter, until it gets another answer, its context ends or
// tryAgainFor has passed: a migration that moves a slot's keys in a few
// milliseconds, as redis-cli does, costs a call a few milliseconds, and one
// stopped halfway fails it with backend.ErrUnavailable, the cluster's
// answer in the chain. Renewals are the exception: a failed renewal is
// tried again at TTL/10 by backend.Lease, which holds the lease until its
// deadline meanwhile, and a renewal that failed at once leaves its error
// as the cause of a loss at the deadline (one still in flight then leaves
// only "no answer").
const (
	tryAgainMin = 10 * time.Millisecond
	tryAgainMax = 100 * time.Millisecond
	tryAgainFor = time.Second
)

// tryAgainWithin is how long a call of an acquisition of TTL ttlMs goes on
// sending a script that meets TRYAGAIN: tryAgainFor, or half the TTL if
// that is shorter (a TryAcquire should answer within a small part of the
// TTL).
func tryAgainWithin(ttlMs int64) time.Duration {
	return min(time.Duration(ttlMs)*time.Millisecond/2, tryAgainFor)
}

// migrating reports whether err says that the command's slot is being
// migrated, so that sending it again soon may succeed: TRYAGAIN, ASK (which
// a pipeline to one node returns, or a cluster client that follows no
// redirection), MOVED (which a cluster client returns when it ran out of
// redirections: the source answers ASK, the target TRYAGAIN, the target
// again without ASKING MOVED, and so on; a pipeline to one node after a
// failover), or a script stopped by a key that
// moved away during the migration ("Script attempted to access a non local
// key in a cluster node": its writes before that stay, as those of a
// script whose reply was lost, which the scripts are made to be sent
// again after).
func migrating(err error) bool {
	if err == nil {
		return false
	}
	return goredis.HasErrorPrefix(err, "TRYAGAIN") || goredis.HasErrorPrefix(err, "ASK ") ||
		goredis.HasErrorPrefix(err, "MOVED ") || nonLocalKey(err)
}

// nonLocalKey reports whether err is Redis's refusal of a command in a
// script whose key the node does not serve (now).
func nonLocalKey(err error) bool {
	var re goredis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "Script attempted to access a non local key")
}

// slotRetry runs f, a script call under ctx, and again while it fails with
// an error that says its slot is migrating (see migrating), for up to
// within from the first failure and while ctx lasts; it returns f's last
// result. If the last call got no answer (ctx ended it: go-redis then
// returns ctx's error or its connection's timeout), the migration's error
// is kept in the chain after its own. d counts the calls sent again.
func slotRetry[T any](ctx context.Context, d *redisDriver, within time.Duration, f func() (T, error)) (T, error) {
	v, err := f()
	if !migrating(err) {
		return v, err
	}
	end := time.Now().Add(within)
	for pause := tryAgainMin; ; pause = min(2*pause, tryAgainMax) {
		wait := pause/2 + rand.N(pause/2)
		if time.Now().Add(wait).After(end) {
			return v, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
		d.tryAgains.Add(1)
		last := err
		if v, err = f(); !migrating(err) {
			var re goredis.Error
			if err != nil && !errors.As(err, &re) {
				err = fmt.Errorf("%w (while the slot migrated: %w)", err, last)
			}
			return v, err
		}
	}
}
