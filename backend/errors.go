package backend

import (
	"errors"

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
	// stop writing.
	ErrLeaseLost = driver.ErrLeaseLost
	// ErrMaxHold: the lease ran out because its max hold (WithMaxHold)
	// stopped the renewals. An error matching it also matches ErrLeaseLost.
	ErrMaxHold = errors.New("fencelock: max hold reached")
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
	// ErrPermission: the backend refused the request for lack of
	// permission (an ACL, a role, a digest). The server's message stays in
	// the chain.
	ErrPermission = driver.ErrPermission
	// ErrInvalidURL: a backend URL cannot be parsed, names an unknown scheme
	// or carries an unknown or malformed query parameter.
	ErrInvalidURL = driver.ErrInvalidURL
)
