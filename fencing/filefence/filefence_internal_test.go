//go:build unix

package filefence

import (
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/fencelock/fencelock/fencing"
)

// A write renamed into place whose directory fsync then fails is of
// unknown outcome (visible now, maybe gone after a crash), never a plain
// failure the caller would take for "nothing changed".
func TestDirSyncFailureIsUnknown(t *testing.T) {
	g, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sync := syncDir
	defer func() { syncDir = sync }()
	syncDir = func(string) error { return syscall.EIO }
	err = g.WriteFile(context.Background(), "r", 5, []byte("new"))
	if !errors.Is(err, fencing.ErrOutcomeUnknown) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("err = %v, want ErrOutcomeUnknown wrapping EIO", err)
	}
	b, tok, err := g.Read("r")
	if err != nil || string(b) != "new" || tok != 5 {
		t.Fatalf("Read = %q, %d, %v: want the new content in place", b, tok, err)
	}
	syncDir = sync
	if err := g.Admit(context.Background(), "r", 4); !errors.Is(err, fencing.ErrStaleToken) {
		t.Fatalf("token 4 after the write with 5: %v, want stale", err)
	}
}
