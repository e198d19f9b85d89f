package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/fencelock/fencelock/backend"
)

// mapErr wraps an error of pgx in backend.ErrClientClosed when the pool was
// closed (puddle's ErrClosedPool), in backend.ErrPermission when the server
// refused the request for lack of permission or credentials (SQLSTATE
// 42501 insufficient_privilege, class 28 invalid authorization), in a
// clear error naming Migrate when a table or function of the adapter is
// missing (42P01, 42883), and in backend.ErrUnavailable when the request
// got no answer that says anything about the lock: every error that is not
// the server's (a dial, a closed or reset connection, a timeout, a closed
// pool, a context that ended), a connection exception (class 08), a server
// shutting down or starting (57P0x), out of connections or resources
// (class 53), a cancelled statement (57014), a read-only standby (25006),
// or a statement that lost a race it may win when tried again: a lock wait
// that a lock_timeout ended (55P03 lock_not_available), a serialization
// failure (40001) or a deadlock (40P01). Other server errors are returned
// as they are. The pgx error stays in the chain.
func mapErr(err error) error {
	if err == nil || errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrPermission) {
		return err
	}
	if errors.Is(err, puddle.ErrClosedPool) {
		// The caller's pool was closed under the Locker (a pool the
		// adapter opened is closed only once the Locker is).
		return fmt.Errorf("%w: postgres: %w", backend.ErrClientClosed, err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, oneLineError{err})
	}
	switch {
	case pe.Code == "42501", strings.HasPrefix(pe.Code, "28"):
		return fmt.Errorf("%w: %w", backend.ErrPermission, err)
	case pe.Code == "42P01", pe.Code == "42883":
		return fmt.Errorf("%w: %w", errNoSchema, err)
	case pe.Code == "ZF001" && pe.Hint != "":
		// The functions refuse an isolation other than READ COMMITTED; the
		// hint says which setting to change, which pgx's message leaves out.
		return fmt.Errorf("%w: %s", err, pe.Hint)
	case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "57P"), strings.HasPrefix(pe.Code, "53"),
		pe.Code == "57014", pe.Code == "25006", pe.Code == "55P03", pe.Code == "40001", pe.Code == "40P01":
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return err
}

// oneLineError is a pgx error whose message is put on one line: pgx lists
// each connection attempt (one per address, and a second one per address
// when sslmode=prefer falls back to plain text) on a line of its own, which
// would split the CLI's one-line errors and every log line. Repeated
// attempts that failed the same way are named once.
type oneLineError struct{ err error }

func (e oneLineError) Error() string {
	var parts []string
	for _, line := range strings.Split(e.err.Error(), "\n") {
		if line = strings.TrimSpace(line); line != "" && !slices.Contains(parts, line) {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, " ")
}

func (e oneLineError) Unwrap() error { return e.err }
