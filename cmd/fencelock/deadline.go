package main

import (
	"os"
	"path/filepath"
	"time"
)

// deadlineLayout is how FENCELOCK_DEADLINE and FENCELOCK_DEADLINE_FILE give
// the lease's local deadline: RFC 3339 in UTC, always with nine digits of
// nanoseconds, so that a child can parse it with any RFC 3339 parser.
const deadlineLayout = "2006-01-02T15:04:05.000000000Z07:00"

// formatDeadline is d, a lease's local deadline, on the wall clock.
func formatDeadline(d time.Time) string { return d.UTC().Format(deadlineLayout) }

// deadlineFile is the file FENCELOCK_DEADLINE_FILE names: it holds the
// lease's current local deadline (formatDeadline and a newline), rewritten
// by a rename each time the lease is renewed, so that a child reading it
// never sees a partial one. It lives in a directory of its own, removed
// when the command has ended.
type deadlineFile struct {
	dir, path string
}

// newDeadlineFile creates the file with the deadline d.
func newDeadlineFile(d time.Time) (*deadlineFile, error) {
	dir, err := os.MkdirTemp("", "fencelock-")
	if err != nil {
		return nil, err
	}
	f := &deadlineFile{dir: dir, path: filepath.Join(dir, "deadline")}
	if err := f.write(d); err != nil {
		f.remove()
		return nil, err
	}
	return f, nil
}

// write replaces the file's content with the deadline d, atomically.
func (f *deadlineFile) write(d time.Time) error {
	tmp := f.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(formatDeadline(d)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f.path)
}

// remove removes the file and its directory.
func (f *deadlineFile) remove() { _ = os.RemoveAll(f.dir) }
