package driver

import (
	"context"
	"log/slog"
)

type loggerKey struct{}

// WithLogger returns ctx carrying the logger of the Locker that
// backend.Open is opening (backend.WithLogger), for Scheme.Open: the client
// an adapter opens for a URL logs its own lines there, at debug level with
// the attribute client=<library>, instead of to os.Stderr.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// LoggerFrom returns the logger WithLogger put in ctx, or nil if none: the
// client's lines are then dropped.
func LoggerFrom(ctx context.Context) *slog.Logger {
	l, _ := ctx.Value(loggerKey{}).(*slog.Logger)
	return l
}
