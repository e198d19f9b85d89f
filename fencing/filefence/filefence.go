//go:build unix

// Package filefence fences files: each resource is a file in a directory
// whose first line records the highest token admitted, so the token and the
// content are replaced together by one rename and survive a restart.
//
// A write (Guard.Do) takes an exclusive flock on the resource's lock file
// (excluding other goroutines and other processes on the same host), reads
// the stored token, rejects a lower one, hands the write function the
// writer of a new temporary file, fsyncs it, renames it over the resource's
// file and fsyncs the directory. A crash leaves either the old content and
// token or the new ones, never a mix; a failed write leaves both unchanged.
//
//	g, err := filefence.New(dir) // option: WithFileMode
//	err = g.Do(ctx, "report.csv", token, func(ctx context.Context, w io.Writer) error {
//		_, err := io.WriteString(w, csv)
//		return err
//	})
//
// Only what goes to w is the new content; a file written by other means is
// not fenced. Guard.WriteFile is Do for content already in memory, and
// Guard.Gate is the same guard as a plain fencing.Guard for store-agnostic
// code (httpfence.Middleware); its write function gets no writer, and the
// content is kept.
//
// flock does not work across hosts on most network file systems: use
// filefence only on a local file system, or behind one service that owns the
// directory (see httpfence).
package filefence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/fencelock/fencelock/fencing"
)

const header = "fencelock-token "

// Guard is a fencing.StoreGuard[io.Writer] over the files of one directory.
type Guard struct {
	path string
	mode fs.FileMode
	ins  *fencing.Instruments
}

// Option configures a Guard made by New.
type Option func(*Guard)

// WithFileMode sets the permission bits of the resources' files (default
// 0o600: read and written by the owner only). The lock files are 0o644,
// before the umask, and a directory New creates is 0o755.
func WithFileMode(perm fs.FileMode) Option { return func(g *Guard) { g.mode = perm } }

// WithTelemetry makes the Guard report its decisions, durations and spans
// (kind "file"; see fencing.Telemetry) for every Do, Admit, WriteFile and
// Gate included (default: the zero Telemetry, off).
func WithTelemetry(t fencing.Telemetry) Option {
	return func(g *Guard) { g.ins = t.Instruments("file") }
}

// New returns a Guard over the directory path, creating it if needed.
func New(path string, opts ...Option) (*Guard, error) {
	if path == "" {
		return nil, errors.New("filefence: New: empty directory path")
	}
	g := &Guard{path: path, mode: 0o600}
	for _, o := range opts {
		o(g)
	}
	if g.mode&^fs.ModePerm != 0 {
		return nil, fmt.Errorf("filefence: New: file mode %v has more than permission bits", g.mode)
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, err
	}
	return g, nil
}

// Path returns the directory.
func (d *Guard) Path() string { return d.path }

// escape maps a resource name to a file name stem: [A-Za-z0-9_.-] are kept,
// everything else (and a leading dot) becomes %XX.
func escape(resource string) string {
	var b strings.Builder
	for i := 0; i < len(resource); i++ {
		c := resource[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' && i > 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// File returns the path of resource's file: its first line is
// "fencelock-token N", the rest is the content.
func (d *Guard) File(resource string) string {
	return filepath.Join(d.path, escape(resource)+".fence")
}

// Do implements fencing.StoreGuard[io.Writer]. Under the resource's flock,
// it rejects a token lower than the stored one (write does not run), then
// calls write with w, the writer of the new content: what write writes to w
// replaces the resource's content, together with the new token, if and only
// if write returns nil. w is valid only during write. A nil write keeps the
// content and raises the token (see Admit). If the directory's fsync fails
// after the rename, the new content and token are in place but may not
// survive a crash: Do returns an *fencing.OutcomeUnknownError
// (errors.Is(err, fencing.ErrOutcomeUnknown)); any earlier failure leaves
// both unchanged.
func (d *Guard) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, w io.Writer) error) error {
	return d.do(ctx, resource, token, write, write == nil)
}

// Admit raises resource's token to token (rejecting a lower one) and keeps
// its content.
func (d *Guard) Admit(ctx context.Context, resource string, token fencing.Token) error {
	return d.do(ctx, resource, token, nil, true)
}

// Gate returns d as a fencing.Guard for store-agnostic code
// (httpfence.Middleware, fencing.Admit). Its write function gets no writer:
// it runs under the resource's flock, after the check, and the token is
// raised (the content kept) only if it returns nil, but nothing it does is
// part of the file's replacement. To change the content atomically with the
// check, use Do and w.
func (d *Guard) Gate() fencing.Guard { return gate{d} }

type gate struct{ d *Guard }

func (x gate) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context) error) error {
	if write == nil {
		return x.d.Admit(ctx, resource, token)
	}
	return x.d.do(ctx, resource, token, func(ctx context.Context, _ io.Writer) error { return write(ctx) }, true)
}

// do is Do, observed; keep says the old content is copied after what write
// wrote (nothing, for Admit and the Gate).
func (d *Guard) do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, w io.Writer) error, keep bool) error {
	ctx, obs := d.ins.Start(ctx, resource, token)
	err := d.replace(ctx, resource, token, write, keep)
	obs.End(err)
	return err
}

// replace is do without the observation.
func (d *Guard) replace(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, w io.Writer) error, keep bool) error {
	if token == 0 {
		return fmt.Errorf("%w: zero token", fencing.ErrInvalidToken)
	}
	if resource == "" {
		return errors.New("filefence: empty resource name")
	}
	stem := filepath.Join(d.path, escape(resource))
	lock, err := os.OpenFile(stem+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close() // releases the flock
	if err := flockCtx(ctx, lock); err != nil {
		return err
	}
	final := stem + ".fence"
	old, highest, err := open(final)
	if err != nil {
		return err
	}
	if old != nil {
		defer old.Close()
	}
	if token < highest {
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d.path, escape(resource)+".tmp-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriter(tmp)
	fmt.Fprintf(bw, "%s%d\n", header, uint64(token))
	if write != nil {
		if err := write(ctx, bw); err != nil {
			return err
		}
	}
	if keep && old != nil {
		if _, err := io.Copy(bw, old); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tmp.Chmod(d.mode); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		return err
	}
	done = true
	if err := syncDir(d.path); err != nil {
		return &fencing.OutcomeUnknownError{Resource: resource, Token: token,
			Err: fmt.Errorf("filefence: the new content and token are in place, but fsync of %s failed (they may not survive a crash): %w", d.path, err)}
	}
	return nil
}

// open opens a resource file positioned after its header and returns its
// token; a missing file is (nil, 0, nil).
func open(path string) (*os.File, fencing.Token, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	tok, n, err := readHeader(f)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("filefence: %s: %w", path, err)
	}
	if _, err := f.Seek(int64(n), io.SeekStart); err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, tok, nil
}

func readHeader(f *os.File) (fencing.Token, int, error) {
	buf := make([]byte, len(header)+21)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, 0, fmt.Errorf("no token header: %w", err)
	}
	line, _, ok := strings.Cut(string(buf[:n]), "\n")
	if !ok || !strings.HasPrefix(line, header) {
		return 0, 0, errors.New("no token header")
	}
	tok, err := fencing.ParseToken(line[len(header):])
	if err != nil {
		return 0, 0, err
	}
	return tok, len(line) + 1, nil
}

// Read returns resource's content and the highest token admitted for it; a
// resource never written is (nil, 0, nil). The file is replaced atomically,
// so Read needs no lock.
func (d *Guard) Read(resource string) ([]byte, fencing.Token, error) {
	f, tok, err := open(d.File(resource))
	if f == nil || err != nil {
		return nil, tok, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return b, tok, err
}

// Highest returns the highest token admitted for resource (0 if none).
func (d *Guard) Highest(_ context.Context, resource string) (fencing.Token, error) {
	f, tok, err := open(d.File(resource))
	if f != nil {
		f.Close()
	}
	return tok, err
}

// WriteFile replaces resource's content with data under token: Do with a
// write function that writes data.
func (d *Guard) WriteFile(ctx context.Context, resource string, token fencing.Token, data []byte) error {
	return d.Do(ctx, resource, token, func(_ context.Context, w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// flockCtx takes an exclusive flock, giving up when ctx ends.
func flockCtx(ctx context.Context, f *os.File) error {
	for delay := 0; ; {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("filefence: flock %s: %w", f.Name(), err)
		}
		if delay < 20 {
			delay++
		}
		if err := sleepCtx(ctx, delay); err != nil {
			return err
		}
	}
}

// syncDir fsyncs the directory path, making a rename in it durable (a
// variable: a test makes it fail).
var syncDir = func(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
