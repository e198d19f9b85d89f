//go:build unix

package filefence

import (
	"context"
	"time"
)

// sleepCtx waits about n*250µs, or until ctx ends.
func sleepCtx(ctx context.Context, n int) error {
	t := time.NewTimer(time.Duration(n) * 250 * time.Microsecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
