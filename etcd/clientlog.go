package etcd

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// clientLogger returns the zap logger of a clientv3 client opened from a
// URL: its lines go to l at debug level with client=etcd and the zap level
// as zap_level, or nowhere if l is nil (clientv3's default writes JSON
// lines to os.Stderr).
func clientLogger(l *slog.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return zap.New(slogCore{l: l})
}

// slogCore is a zapcore.Core that writes to an slog.Logger.
type slogCore struct {
	l      *slog.Logger
	fields []zapcore.Field
}

// Enabled implements zapcore.LevelEnabler: every level, if l takes debug.
func (c slogCore) Enabled(zapcore.Level) bool {
	return c.l.Enabled(context.Background(), slog.LevelDebug)
}

// With implements zapcore.Core.
func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{l: c.l, fields: append(c.fields[:len(c.fields):len(c.fields)], fields...)}
}

// Check implements zapcore.Core.
func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write implements zapcore.Core.
func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+2)
	attrs = append(attrs, slog.String("client", "etcd"), slog.String("zap_level", e.Level.String()))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	c.l.LogAttrs(context.Background(), slog.LevelDebug, e.Message, attrs...)
	return nil
}

// Sync implements zapcore.Core.
func (c slogCore) Sync() error { return nil }
