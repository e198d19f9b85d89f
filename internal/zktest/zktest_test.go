package zktest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencelock/fencelock/internal/tlstest"
	"github.com/fencelock/fencelock/internal/zktest"
)

func TestStartRestartProxy(t *testing.T) {
	start := time.Now()
	s := zktest.Start(t)
	t.Logf("started in %v at %s", time.Since(start), s.Addr())
	c := s.Connect(t, 4*time.Second)
	if _, err := c.Create("/x", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	_, st, err := c.Get("/x")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	c2 := s.Connect(t, 4*time.Second)
	data, st2, err := c2.Get("/x")
	if err != nil || string(data) != "v" || st2.Czxid != st.Czxid {
		t.Fatalf("after restart: %q %v %v", data, st2, err)
	}

	p := zktest.NewProxy(t, s.Addr())
	pc := zktest.ConnectTo(t, p.Addr(), 4*time.Second)
	if _, _, err := pc.Exists("/x"); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for pc.State() == zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatal("client did not notice the cut")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTLS(t *testing.T) {
	f := tlstest.New(t)
	start := time.Now()
	s := zktest.Start(t, zktest.WithTLS(f))
	t.Logf("started in %v at %s", time.Since(start), s.Addr())
	c := s.Connect(t, 4*time.Second)
	if _, err := c.Create("/x", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	m, err := s.Monitor()
	if err != nil {
		t.Fatal(err)
	}
	if m["zk_packets_received"] == 0 {
		t.Fatalf("mntr over TLS: %v", m)
	}

	// TLS only: plain ZooKeeper gets no session on that port.
	plain, _, err := zk.Connect([]string{s.Addr()}, 4*time.Second, zk.WithLogger(zktest.Quiet()), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	time.Sleep(2 * time.Second)
	if st := plain.State(); st == zk.StateHasSession {
		t.Fatal("a plain client got a session on the TLS port")
	}
}

// FENCELOCK_ZK_JVM_FLAGS replaces the lean JVM flags.
func TestJVMFlagsFromEnvironment(t *testing.T) {
	t.Setenv("FENCELOCK_ZK_JVM_FLAGS", "-Xmx128m -Dfencelock.test=jvmflags")
	zktest.Start(t)
	args := childJavaArgs(t)
	if !slices.Contains(args, "-Dfencelock.test=jvmflags") || !slices.Contains(args, "-Xmx128m") {
		t.Fatalf("java started with %q", args)
	}
	for _, lean := range zktest.LeanJVMFlags {
		if slices.Contains(args, lean) {
			t.Fatalf("lean flag %s kept: %q", lean, args)
		}
	}
}

// childJavaArgs returns the command line of this process's java child.
func childJavaArgs(t *testing.T) []string {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if strings.HasSuffix(args[0], "java") {
			return args
		}
	}
	t.Fatal("no java child process")
	return nil
}
