package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/backend/driver"
)

// Errors returned by Locker and Lease. Every error about the lock wraps one
// of them, so callers test with errors.Is; an error from the backend's client
// is kept in the chain too, so errors.As still finds it. Those that adapters
// return too are package driver's, under the same names.
var (
	// ErrNotAcquired: the lock is held by someone else (TryAcquire), or a
	// wait was given up (Acquire); a given-up wait also matches ctx.Err().
	ErrNotAcquired = driver.ErrNotAcquired
	// ErrLeaseLost: the lease expired, was revoked, could not be renewed
	// before its local deadline, or its lock key was removed. The holder must
	// stop writing. A lost lease's error matches one of the causes below
	// too, each of which matches ErrLeaseLost; the metric
	// fencelock.losses and the "lease lost" log line name the same cause
	// (in parentheses below). What each backend can tell apart is in its
	// package documentation.
	ErrLeaseLost = driver.ErrLeaseLost
	// ErrExpired (expired): the lease's TTL ran out with no renewal asked
	// for (auto-renew off and no Refresh in time), or the backend said it
	// had expired.
	ErrExpired = driver.ErrExpired
	// ErrRevoked (revoked): someone ended the lease (Locker.Revoke,
	// fencelock revoke, an operator revoking the backend's lease).
	ErrRevoked = driver.ErrRevoked
	// ErrDeleted (deleted): the lock key, row or znode was removed or
	// overwritten by someone else while the lease lived on.
	ErrDeleted = driver.ErrDeleted
	// ErrSessionLost (session_lost): the backend's session the lease lived
	// in ended: ZooKeeper's session expired, was closed or replaced, which
	// takes every lease of the session with it. etcd has no session beyond
	// the lease: a lease not found there is ErrRevoked (it cannot have
	// expired before its local deadline, which would have ended it first,
	// with ErrDeadline, also when the client only learns of it after
	// reconnecting).
	ErrSessionLost = driver.ErrSessionLost
	// ErrDeadline (deadline): the local deadline passed before a renewal
	// answered: the backend was unreachable or too slow (a partition, a
	// paused server); whether the server still kept the lease is unknown.
	ErrDeadline error = &driver.LossCause{Msg: "fencelock: lease lost: no renewal answered before the local deadline"}
	// ErrMaxHold (max_hold): the lease ran out because its max hold
	// (WithMaxHold) stopped the renewals.
	ErrMaxHold error = &driver.LossCause{Msg: "fencelock: lease lost: max hold reached"}
	// ErrReleased: the lease was released by its holder.
	ErrReleased = driver.ErrReleased
	// ErrClosed: the Locker was closed.
	ErrClosed = driver.ErrClosed
	// ErrInvalidName: a lock name is empty, too long, not UTF-8 or holds a
	// control character.
	ErrInvalidName = errors.New("fencelock: invalid lock name")
	// ErrInvalidOption: an option value is out of range or not supported by
	// the backend, or another argument is unusable (a nil client, an empty
	// or malformed acquisition id).
	ErrInvalidOption = driver.ErrInvalidOption
	// ErrUnavailable: the backend could not be reached or did not answer in
	// time, so whether the lock is free is unknown. It is never reported as
	// ErrNotAcquired, which means someone else holds the lock: a job that
	// skips its work when the lock is held must not skip it silently when
	// the backend is down. The client's own error stays in the chain.
	ErrUnavailable = driver.ErrUnavailable
	// ErrClientClosed: the client the Locker was built over (etcd.New's
	// clientv3.Client, zookeeper.New's zk.Conn, redis.New's client,
	// postgres.New's pool) was closed by its owner under the Locker.
	// Acquire, TryAcquire, Release, Refresh and Status then fail with it at
	// once; a waiting Acquire and a held Lease end at their next renewal,
	// within a third of their TTL, or sooner where the backend tells (the
	// Lease with a cause matching ErrLeaseLost and ErrClientClosed). It matches
	// ErrUnavailable too: whether the lock is held is unknown to the
	// Locker, which can no longer ask, so code that tells "held by someone
	// else" (ErrNotAcquired) from "could not tell" keeps doing the right
	// thing; unlike a backend that is down it never comes back, so code
	// that retries on ErrUnavailable should stop on ErrClientClosed. The
	// client's own error stays in the chain.
	ErrClientClosed = driver.ErrClientClosed
	// ErrPermission: the backend refused the request for lack of
	// permission (an ACL, a role, a digest). The server's message stays in
	// the chain.
	ErrPermission = driver.ErrPermission
	// ErrInvalidURL: a backend URL cannot be parsed, names an unknown scheme
	// or carries an unknown or malformed query parameter.
	ErrInvalidURL = driver.ErrInvalidURL
)

// answered are the errors that are the backend's answer, or the caller's
// mistake, rather than a want of one.
var answered = []error{ErrUnavailable, ErrLeaseLost, ErrReleased, ErrClosed, ErrPermission,
	ErrInvalidOption, ErrInvalidName, ErrNotAcquired, errors.ErrUnsupported}

// unanswered returns err, from a call to the backend under ctx, so that a
// call whose context ended before the backend answered matches
// ErrUnavailable and ctx.Err() on every backend (whether it took effect is
// unknown, as when the backend cannot be reached); an answer is kept as it
// is, and an ErrUnavailable gains ctx.Err() if it lacks it.
func unanswered(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if err == nil || ctxErr == nil {
		return err
	}
	if errors.Is(err, ErrUnavailable) {
		if errors.Is(err, ctxErr) {
			return err
		}
		return fmt.Errorf("%w (%w)", err, ctxErr)
	}
	for _, a := range answered {
		if errors.Is(err, a) {
			return err
		}
	}
	if errors.Is(err, ctxErr) {
		return fmt.Errorf("%w: no answer from the backend before the context ended: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("%w: no answer from the backend before the context ended: %w: %w", ErrUnavailable, ctxErr, err)
}
