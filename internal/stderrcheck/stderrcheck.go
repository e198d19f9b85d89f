// Package stderrcheck runs a test again in a child process of the test
// binary and gives back what that child wrote to its standard error, so that
// a test can check that no backend client logged there (go-redis, go-zookeeper
// and etcd's zap logger write to os.Stderr, not through package testing).
//
// A test calls Child first: in the child it does the work whose standard
// error is checked and returns; in the parent it calls Start, makes the
// fault happen while the child runs (stopping a server, ...) and calls Wait.
package stderrcheck

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

const childEnv = "FENCELOCK_STDERRCHECK_CHILD"

// Child reports whether this process is the child that Start runs for t.
func Child(t *testing.T) bool { return os.Getenv(childEnv) == t.Name() }

// Mark writes line on the child's standard output, where the parent's
// WaitFor finds it.
func Mark(line string) { _, _ = io.WriteString(os.Stdout, line+"\n") }

// Proc is a running child.
type Proc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	lines  chan string
	mu     sync.Mutex
	out    strings.Builder // the child's standard output so far
}

// Start runs t again (t must be a top-level test) in a child process of the
// test binary, with env added to its environment.
func Start(t *testing.T, env ...string) *Proc {
	t.Helper()
	p := &Proc{lines: make(chan string, 100)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	p.cmd.Env = append(append(os.Environ(), childEnv+"="+t.Name()), env...)
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	go func() {
		defer close(p.lines)
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.mu.Lock()
			p.out.WriteString(s.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- s.Text():
			default: // nobody waits for it
			}
		}
	}()
	return p
}

// WaitFor waits up to timeout for the child to Mark line.
func (p *Proc) WaitFor(t *testing.T, line string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("the child exited before %q:\n%s", line, p.stdout())
			}
			if l == line {
				return
			}
		case <-deadline:
			t.Fatalf("no %q from the child within %v:\n%s", line, timeout, p.stdout())
		}
	}
}

// Wait waits up to timeout for the child to exit, fails t if its test
// failed, and returns its standard output and standard error.
func (p *Proc) Wait(t *testing.T, timeout time.Duration) (stdout, stderr string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		for range p.lines { // drain, so that the child never blocks
		}
		done <- p.cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, p.stdout(), p.stderr.String())
		}
	case <-time.After(timeout):
		t.Fatalf("the child did not exit within %v:\n%s", timeout, p.stdout())
	}
	return p.stdout(), p.stderr.String()
}

func (p *Proc) stdout() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}
