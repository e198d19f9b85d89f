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
	// ErrLeaseLost: the lease or the lock key is known gone.
	ErrLeaseLost = errors.New("fencelock: lease lost")
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
