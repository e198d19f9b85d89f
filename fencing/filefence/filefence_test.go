//go:build unix

package filefence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/filefence"
)

type store struct{ *filefence.Guard }

func (s store) Put(_, v string) func(context.Context, io.Writer) error {
	return func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, v)
		return err
	}
}

func (s store) Get(_ context.Context, res string) (string, error) {
	b, _, err := s.Read(res)
	return string(b), err
}

func TestConformance(t *testing.T) {
	var mu sync.Mutex
	dirs := map[*testing.T]string{}
	fencetest.Run(t, fencetest.Harness[io.Writer]{
		Rollback: true,
		Kind:     "file",
		Open: func(t *testing.T, tel fencing.Telemetry) fencetest.Store[io.Writer] {
			mu.Lock()
			dir, ok := dirs[t]
			if !ok {
				dir = t.TempDir()
				dirs[t] = dir
			}
			mu.Unlock()
			d, err := filefence.New(dir, filefence.WithTelemetry(tel))
			require.NoError(t, err)
			return store{d}
		},
		Unreachable: func(t *testing.T, tel fencing.Telemetry) fencing.StoreGuard[io.Writer] {
			dir := t.TempDir() + "/gone"
			d, err := filefence.New(dir, filefence.WithTelemetry(tel))
			require.NoError(t, err)
			require.NoError(t, os.Remove(dir))
			require.NoError(t, os.WriteFile(dir, nil, 0o600)) // a file where the directory was
			return d
		},
	})
}

// The helper process: FILEFENCE_HELPER=dir, writes its token's decimal form
// to resource "doc" and exits 0 (written), 3 (stale) or 1.
func TestMain(m *testing.M) {
	if dir := os.Getenv("FILEFENCE_HELPER"); dir != "" {
		tok, _ := fencing.ParseToken(os.Getenv("FILEFENCE_TOKEN"))
		d, err := filefence.New(dir)
		if err == nil {
			err = d.WriteFile(context.Background(), "doc", tok, []byte(tok.String()))
		}
		switch {
		case err == nil:
			os.Exit(0)
		case errors.Is(err, fencing.ErrStaleToken):
			os.Exit(3)
		default:
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func helper(t *testing.T, dir string, tok fencing.Token) (stale bool) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FILEFENCE_HELPER="+dir, "FILEFENCE_TOKEN="+tok.String())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		return true
	}
	require.NoError(t, err, string(out))
	return false
}

// Processes writing concurrently with interleaved tokens, and a restart:
// the token lives in the file, so a new process still rejects a lower one.
func TestAcrossProcesses(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var maxOK fencing.Token
	for _, tok := range []fencing.Token{5, 3, 8, 1, 7, 2, 6, 4} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !helper(t, dir, tok) {
				mu.Lock()
				maxOK = max(maxOK, tok)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	d, err := filefence.New(dir)
	require.NoError(t, err)
	b, tok, err := d.Read("doc")
	require.NoError(t, err)
	assert.Equal(t, maxOK, tok)
	assert.Equal(t, maxOK.String(), string(b))
	assert.True(t, helper(t, dir, maxOK-1), "a new process rejects a lower token")
	assert.False(t, helper(t, dir, maxOK), "and admits the same token")
}

func TestResourceNamesAreEscaped(t *testing.T) {
	d, err := filefence.New(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	for i, res := range []string{"../escape", "a/b", ".hidden", "x.lock", "ünïcode", "x"} {
		require.NoError(t, d.WriteFile(ctx, res, fencing.Token(i+1), []byte(res)))
	}
	for i, res := range []string{"../escape", "a/b", ".hidden", "x.lock", "ünïcode", "x"} {
		b, tok, err := d.Read(res)
		require.NoError(t, err)
		assert.Equal(t, res, string(b))
		assert.Equal(t, fencing.Token(i+1), tok)
	}
	entries, err := os.ReadDir(d.Path())
	require.NoError(t, err)
	for _, e := range entries {
		assert.NotContains(t, e.Name(), "/")
		assert.NotContains(t, e.Name(), "tmp-", "no temporary file is left behind")
	}
	require.Error(t, d.WriteFile(ctx, "", 1, nil))
	_, err = os.Stat(d.File("../escape"))
	require.NoError(t, err)
	assert.Equal(t, d.Path(), dirOf(d.File("../escape")))
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return ""
}

// The whole content is replaced with the token, or neither is.
func ExampleGuard_WriteFile() {
	dir, _ := os.MkdirTemp("", "filefence-example-")
	defer os.RemoveAll(dir)
	d, _ := filefence.New(dir)
	ctx := context.Background()
	fmt.Println(d.WriteFile(ctx, "report.csv", 34, []byte("by the current holder")))
	err := d.WriteFile(ctx, "report.csv", 33, []byte("by a paused former holder"))
	fmt.Println(err)
	d2, _ := filefence.New(dir) // after a restart
	content, tok, _ := d2.Read("report.csv")
	fmt.Printf("%s (token %d)\n", content, tok)
	// Output:
	// <nil>
	// fencing: stale token 33 for "report.csv": token 34 was already admitted
	// by the current holder (token 34)
}

// The writer is the atomic handle: when the write function fails after
// writing to w, the content and the token stay as they were; a stale token
// never gets a writer; the Gate keeps the content.
func TestWriterIsTheAtomicHandle(t *testing.T) {
	d, err := filefence.New(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, d.WriteFile(ctx, "doc", 5, []byte("by 5")))
	boom := errors.New("boom")
	err = d.Do(ctx, "doc", 9, func(_ context.Context, w io.Writer) error {
		_, _ = io.WriteString(w, "by 9, half")
		return boom
	})
	require.ErrorIs(t, err, boom)
	b, tok, err := d.Read("doc")
	require.NoError(t, err)
	assert.Equal(t, "by 5", string(b))
	assert.Equal(t, fencing.Token(5), tok)

	require.NoError(t, d.Admit(ctx, "doc", 7))
	ran := false
	err = d.Do(ctx, "doc", 6, func(context.Context, io.Writer) error { ran = true; return nil })
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	assert.False(t, ran)

	require.NoError(t, d.Gate().Do(ctx, "doc", 8, func(context.Context) error { return nil }))
	b, tok, err = d.Read("doc")
	require.NoError(t, err)
	assert.Equal(t, "by 5", string(b), "Admit and the Gate keep the content")
	assert.Equal(t, fencing.Token(8), tok)
	h, err := d.Highest(ctx, "doc")
	require.NoError(t, err)
	assert.Equal(t, fencing.Token(8), h)
	h, err = d.Highest(ctx, "never written")
	require.NoError(t, err)
	assert.Zero(t, h)
}

func TestNewOptions(t *testing.T) {
	_, err := filefence.New("")
	assert.Error(t, err)
	_, err = filefence.New(t.TempDir(), filefence.WithFileMode(os.ModeDir|0o700))
	assert.Error(t, err)
	ctx := context.Background()
	for _, perm := range []os.FileMode{0o600, 0o640} {
		var opts []filefence.Option
		if perm != 0o600 {
			opts = append(opts, filefence.WithFileMode(perm))
		}
		d, err := filefence.New(t.TempDir(), opts...)
		require.NoError(t, err)
		require.NoError(t, d.WriteFile(ctx, "doc", 1, []byte("x")))
		fi, err := os.Stat(d.File("doc"))
		require.NoError(t, err)
		assert.Equal(t, perm, fi.Mode().Perm())
	}
}

// A write function gets the writer of the new content; the token and the
// content are replaced together when it returns nil.
func ExampleGuard_Do() {
	dir, _ := os.MkdirTemp("", "filefence-example-")
	defer os.RemoveAll(dir)
	g, _ := filefence.New(dir, filefence.WithFileMode(0o644))
	ctx := context.Background()
	err := g.Do(ctx, "totals.csv", 34, func(_ context.Context, w io.Writer) error {
		fmt.Fprintln(w, "day,total")
		_, err := fmt.Fprintln(w, "2024-06-01,1250")
		return err
	})
	fmt.Println(err)
	content, tok, _ := g.Read("totals.csv")
	fmt.Printf("token %d\n%s", tok, content)
	// Output:
	// <nil>
	// token 34
	// day,total
	// 2024-06-01,1250
}
