package servers

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dc "github.com/ory/dockertest/v3/docker"

	"github.com/fencelock/fencelock/internal/freeport"
	"github.com/fencelock/fencelock/internal/redistest"
)

// childEnv makes the test binary, run again by TestDockerSignalAndSweep,
// start a server and wait to be signalled.
const childEnv = "FENCELOCK_SERVERS_CHILD"

func TestDockerChildProcess(t *testing.T) {
	skipDockerInShort(t)
	if os.Getenv(childEnv) == "" {
		return // only a helper for TestDockerSignalAndSweep
	}
	s := StartWith(t, Docker, Redis, Single)
	os.Stdout.WriteString("container " + s.Members[0].Name + "\n")
	time.Sleep(5 * time.Minute)
}

// startChild runs the test binary as a child that starts a Docker Redis,
// and returns the child and its container's name.
func startChild(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDockerChildProcess$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "container "); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return cmd, name
		}
	}
	t.Fatalf("the child printed no container name (%v)", sc.Err())
	return nil, ""
}

func containerExists(t *testing.T, name string) bool {
	t.Helper()
	pool, err := dockerPool()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := pool.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{"name": {name}}})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs) > 0
}

func networkExists(t *testing.T, name string) bool {
	t.Helper()
	pool, err := dockerPool()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := pool.Client.FilteredListNetworks(dc.NetworkFilterOpts{"name": {name: true}})
	if err != nil {
		t.Fatal(err)
	}
	return len(ns) > 0
}

// TestDockerSignalAndSweep checks both ways nothing is left behind by a
// test process that does not end normally: SIGINT/SIGTERM remove its
// containers and network before it dies; after a SIGKILL, the next
// process's sweep removes them.
func TestDockerSignalAndSweep(t *testing.T) {
	skipDockerInShort(t)
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd, name := startChild(t)
		network := strings.TrimSuffix(name, "-1")
		if !containerExists(t, name) || !networkExists(t, network) {
			t.Fatalf("the child's container %s or network is not there", name)
		}
		_ = cmd.Process.Signal(sig)
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("the child ended with %v, want death by %v", err, sig)
		}
		if containerExists(t, name) || networkExists(t, network) {
			t.Errorf("after %v the child's container %s or its network is still there", sig, name)
		}
	}

	cmd, name := startChild(t)
	network := strings.TrimSuffix(name, "-1")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !containerExists(t, name) {
		t.Fatalf("the killed child's container %s is gone already", name)
	}
	pool, err := dockerPool()
	if err != nil {
		t.Fatal(err)
	}
	sweep(pool)
	if containerExists(t, name) || networkExists(t, network) {
		t.Errorf("after the sweep the killed child's container %s or its network is still there", name)
	}
}

// TestDockerPortConflict checks that a container whose chosen port was
// taken in the meantime is started again on another port: published
// (Docker refuses the port), and on the host's network, where the server
// fails to bind it while another Redis server answers on it.
func TestDockerPortConflict(t *testing.T) {
	skipDockerInShort(t)
	t.Run("published", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		calls := takePort(t, taken.Addr().(*net.TCPAddr).Port)
		s := StartWith(t, Docker, Redis, Single)
		if *calls != 2 {
			t.Errorf("%d ports picked, want 2 (the taken one, then another)", *calls)
		}
		if s.Members[0].Addr == taken.Addr().String() {
			t.Errorf("the server is published on the taken port %s", s.Members[0].Addr)
		}
		if err := redisPing(context.Background(), s.Members[0].Addr); err != nil {
			t.Error(err)
		}
	})
	t.Run("host", func(t *testing.T) {
		other := redistest.Start(t)
		_, port, _ := net.SplitHostPort(other.Addr())
		p, _ := strconv.Atoi(port)
		calls := takePort(t, p)
		d, err := newDockerServer(t, Redis, true)
		if err != nil {
			t.Fatal(err)
		}
		n, err := d.redisOnHost(d.name(1), false, "")
		if err != nil {
			t.Fatal(err)
		}
		if *calls != 2 {
			t.Errorf("%d ports picked, want 2 (the taken one, then another)", *calls)
		}
		if n.Addr() == other.Addr() {
			t.Errorf("the container took the other server (%s) for its own", other.Addr())
		}
		if !n.Running() {
			t.Errorf("the container does not run")
		}
	})
}

// takePort makes the next port pick return port first, then free ones,
// until t ends; it returns the count of picks.
func takePort(t *testing.T, port int) *int {
	calls := 0
	pickPorts = func(n int) ([]int, error) {
		calls++
		ps, err := freeport.Ports(n)
		if calls == 1 && err == nil {
			ps[0] = port
		}
		return ps, err
	}
	t.Cleanup(func() { pickPorts = freeport.Ports })
	return &calls
}

// skipDockerInShort skips a test that runs containers under -short (the
// quick tier, scripts/test quick, runs local servers only); the full run
// runs it, and there a missing Docker engine fails it.
func skipDockerInShort(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: Docker tests run in the full run (scripts/test)")
	}
}
