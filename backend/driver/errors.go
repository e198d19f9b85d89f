package driver

import (
	"errors"
	"fmt"
)

// Errors a Driver and its Leases return, wrapped with the client's error
// where there is one. Package backend re-exports each under the same name,
// and documents what they mean to users.
var (
	// ErrNotAcquired: the backend said the lock is held (a TryAcquire), or
	// had queued the acquisition behind a holder when its wait was given up.
	ErrNotAcquired = errors.New("fencelock: lock not acquired")
	// ErrLeaseLost: the lease or the lock key is known gone. A driver
	// reports it through the cause it saw (ErrExpired, ErrRevoked,
	// ErrDeleted, ErrSessionLost), each of which matches ErrLeaseLost; a
	// bare ErrLeaseLost is a loss of unknown cause.
	ErrLeaseLost = errors.New("fencelock: lease lost")
	// ErrExpired: the backend let the lease's TTL run out (no renewal
	// reached it in time).
	ErrExpired error = &LossCause{"fencelock: lease lost: expired"}
	// ErrRevoked: someone ended the lease or the acquisition (an
	// operator's revoke, Locker.Revoke, a lease revoked by another
	// client), which removed its lock key with it.
	ErrRevoked error = &LossCause{"fencelock: lease lost: revoked"}
	// ErrDeleted: the lock key (row, znode) was removed or overwritten by
	// someone else while the lease itself lived on.
	ErrDeleted error = &LossCause{"fencelock: lease lost: lock key deleted"}
	// ErrSessionLost: the session the lease lives in ended on the server
	// (ZooKeeper: the ensemble expired it, which the client learns when it
	// reconnects), taking every lease of that session with it.
	ErrSessionLost error = &LossCause{"fencelock: lease lost: session lost"}
	// ErrReleased: the lease was released by its holder.
	ErrReleased = errors.New("fencelock: lease released")
	// ErrClosed: the Locker or the driver was closed.
	ErrClosed = errors.New("fencelock: locker closed")
	// ErrInvalidOption: a TTL or another argument the backend cannot honour.
	ErrInvalidOption = errors.New("fencelock: invalid option")
	// ErrUnavailable: a request could not be sent or got no answer, so
	// whether the lock is free is unknown.
	ErrUnavailable = errors.New("fencelock: backend unavailable")
	// ErrClientClosed: the client the driver was given (not one it opened
	// itself) was closed by its owner, so nothing can be asked any more. It
	// matches ErrUnavailable too.
	ErrClientClosed = fmt.Errorf("%w: the client was closed", ErrUnavailable)
	// ErrPermission: the backend refused a request for lack of permission.
	ErrPermission = errors.New("fencelock: permission denied")
	// ErrInvalidURL: a URL that cannot be parsed, or a query parameter
	// that is unknown or malformed.
	ErrInvalidURL = errors.New("fencelock: invalid URL")
)

// LossCause is a cause of a lost lease: an error that matches ErrLeaseLost
// too (errors.Is), so that callers who do not care why still see the loss.
type LossCause struct{ Msg string }

// Error returns the cause's message.
func (e *LossCause) Error() string { return e.Msg }

// Unwrap returns ErrLeaseLost.
func (e *LossCause) Unwrap() error { return ErrLeaseLost }
