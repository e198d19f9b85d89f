//go:build unix

// Package filefence fences files: each resource is a file in a directory
// whose first line records the highest token admitted, so the token and the
// content are replaced together by one rename and survive a restart.
//
// A write (Dir.Do) takes an exclusive flock on the resource's lock file
// (excluding other goroutines and other processes on the same host), reads
// the stored token, rejects a lower one, lets the write function fill a new
// temporary file (Writer(ctx)), fsyncs it, renames it over the resource's
// file and fsyncs the directory. A crash leaves either the old content and
// token or the new ones, never a mix; a failed write leaves both unchanged.
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

// Dir is a fencing.Guard over the files of one directory.
type Dir struct {
	path string
}

// New returns a Dir over path, creating the directory if needed.
func New(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, err
	}
	return &Dir{path: path}, nil
}

// Path returns the directory.
func (d *Dir) Path() string { return d.path }

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
func (d *Dir) File(resource string) string {
	return filepath.Join(d.path, escape(resource)+".fence")
}

type writerKey struct{}

// Writer returns the new content's writer of the Do whose write function
// received ctx (nil outside one). What is written replaces the resource's
// content if, and only if, the write function returns nil.
func Writer(ctx context.Context) io.Writer {
	w, _ := ctx.Value(writerKey{}).(io.Writer)
	return w
}

// Do implements fencing.Guard. A nil write (fencing.Admit) keeps the content
// and raises the token.
func (d *Dir) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context) error) error {
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
		if err := write(context.WithValue(ctx, writerKey{}, io.Writer(bw))); err != nil {
			return err
		}
	} else if old != nil {
		if _, err := io.Copy(bw, old); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
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
	return syncDir(d.path)
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
func (d *Dir) Read(resource string) ([]byte, fencing.Token, error) {
	f, tok, err := open(d.File(resource))
	if f == nil || err != nil {
		return nil, tok, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return b, tok, err
}

// WriteFile replaces resource's content with data under token.
func (d *Dir) WriteFile(ctx context.Context, resource string, token fencing.Token, data []byte) error {
	return d.Do(ctx, resource, token, func(ctx context.Context) error {
		_, err := Writer(ctx).Write(data)
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

func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
