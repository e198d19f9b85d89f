package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"

	"github.com/fencelock/fencelock/internal/freeport"
)

// freezeTries is how many times a member's pause asks Docker to freeze it,
// freezeRetryPause the wait between two tries (see the pause handle).
const (
	freezeTries      = 3
	freezeRetryPause = 200 * time.Millisecond
)

// DefaultImages are the images the Docker provider runs; ImageEnv names the
// variable that overrides each.
var DefaultImages = map[Kind]string{
	Etcd:      "gcr.io/etcd-development/etcd:v3.7.3",
	ZooKeeper: "zookeeper:3.8",
	Redis:     "redis:7",
	Postgres:  "postgres:15",
}

// ImageEnv maps each kind to the environment variable that overrides its
// Docker image.
var ImageEnv = map[Kind]string{
	Etcd:      "FENCELOCK_ETCD_IMAGE",
	ZooKeeper: "FENCELOCK_ZOOKEEPER_IMAGE",
	Redis:     "FENCELOCK_REDIS_IMAGE",
	Postgres:  "FENCELOCK_POSTGRES_IMAGE",
}

// Image returns the Docker image for kind: $FENCELOCK_<KIND>_IMAGE, or
// DefaultImages[kind].
func Image(kind Kind) string {
	if v := os.Getenv(ImageEnv[kind]); v != "" {
		return v
	}
	return DefaultImages[kind]
}

// ReadyTimeout bounds every wait for a server or member to answer its
// protocol (at start, and in the hooks that bring a member back).
const ReadyTimeout = 2 * time.Minute

// Labels on every container and network of the Docker provider. The
// owner labels let a later run remove what a killed run left behind.
const (
	LabelServers    = "fencelock.servers"     // "1"
	LabelOwnerPID   = "fencelock.owner.pid"   // the test process's pid
	LabelOwnerHost  = "fencelock.owner.host"  // its host name
	LabelOwnerStart = "fencelock.owner.start" // its start time (clock ticks since boot), against pid reuse
)

var dockerState struct {
	once sync.Once
	pool *dockertest.Pool
	err  error

	mu     sync.Mutex
	images map[string]error // image -> nil (present or pulled) or the pull's error

	// What this process runs, for the signal handler.
	live struct {
		sync.Mutex
		containers map[string]bool
		networks   map[string]bool
	}
}

// dockerPool connects to the engine once per process, sweeps the
// leftovers of dead runs, and installs the signal handler.
func dockerPool() (*dockertest.Pool, error) {
	s := &dockerState
	s.once.Do(func() {
		pool, err := dockertest.NewPool("")
		if err != nil {
			s.err = fmt.Errorf("docker: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := pool.Client.PingWithContext(ctx); err != nil {
			s.err = fmt.Errorf("docker engine at %s does not answer: %w", pool.Client.Endpoint(), err)
			return
		}
		s.pool = pool
		s.images = map[string]error{}
		s.live.containers = map[string]bool{}
		s.live.networks = map[string]bool{}
		sweep(pool)
		handleSignals(pool)
	})
	return s.pool, s.err
}

// dockerUsable says whether Docker can run kind: the engine answers and the
// image is present or was pulled.
func dockerUsable(kind Kind) error {
	pool, err := dockerPool()
	if err != nil {
		return err
	}
	return ensureImage(pool, Image(kind))
}

// ensureImage pulls image if the engine does not have it (once per process).
func ensureImage(pool *dockertest.Pool, image string) error {
	s := &dockerState
	s.mu.Lock()
	defer s.mu.Unlock()
	if err, ok := s.images[image]; ok {
		return err
	}
	if _, err := pool.Client.InspectImage(image); err == nil {
		s.images[image] = nil
		return nil
	}
	repo, tag := splitImage(image)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := pool.Client.PullImage(dc.PullImageOptions{Repository: repo, Tag: tag, Context: ctx, OutputStream: &out}, dc.AuthConfiguration{})
	if err != nil {
		err = fmt.Errorf("image %s is not present and pulling it failed (build it, e.g. scripts/images, or set $%s): %w", image, imageEnvOf(image), err)
	}
	s.images[image] = err
	return err
}

func imageEnvOf(image string) string {
	for k, v := range DefaultImages {
		if v == image || Image(k) == image {
			return ImageEnv[k]
		}
	}
	return "FENCELOCK_<KIND>_IMAGE"
}

// splitImage splits "repo:tag" or "repo@digest"; a missing tag is latest.
func splitImage(image string) (repo, tag string) {
	if r, d, ok := strings.Cut(image, "@"); ok {
		return r, d
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, "latest"
}

// ownerLabels are this process's labels.
func ownerLabels() map[string]string {
	host, _ := os.Hostname()
	return map[string]string{
		LabelServers:    "1",
		LabelOwnerPID:   strconv.Itoa(os.Getpid()),
		LabelOwnerHost:  host,
		LabelOwnerStart: procStart(os.Getpid()),
	}
}

// procStart returns the start time of process pid (field 22 of
// /proc/pid/stat, in clock ticks since boot), or "" if unknown.
func procStart(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22: fields after ')' start at field 3
}

// ownerGone says whether the labels name a process of this host that no
// longer runs (or whose pid now belongs to another process).
func ownerGone(labels map[string]string) bool {
	host, _ := os.Hostname()
	if labels[LabelOwnerHost] != host {
		return false
	}
	pid, err := strconv.Atoi(labels[LabelOwnerPID])
	if err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	start := labels[LabelOwnerStart]
	return start != "" && procStart(pid) != "" && procStart(pid) != start
}

// sweep removes the containers and networks of test processes of this host
// that are gone (a killed run), so that nothing piles up.
func sweep(pool *dockertest.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := pool.Client.ListContainers(dc.ListContainersOptions{All: true, Context: ctx,
		Filters: map[string][]string{"label": {LabelServers + "=1"}}})
	if err == nil {
		for _, c := range cs {
			if ownerGone(c.Labels) {
				_ = pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true, Context: ctx})
			}
		}
	}
	ns, err := pool.Client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {LabelServers + "=1": true}})
	if err == nil {
		for _, n := range ns {
			if ownerGone(n.Labels) {
				_ = pool.Client.RemoveNetwork(n.ID)
			}
		}
	}
}

// handleSignals removes this process's containers and networks on SIGINT
// or SIGTERM, then dies of the signal as it would have.
func handleSignals(pool *dockertest.Pool) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		purgeAll(pool)
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
}

func purgeAll(pool *dockertest.Pool) {
	live := &dockerState.live
	live.Lock()
	defer live.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for id := range live.containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: id, Force: true, RemoveVolumes: true, Context: ctx})
		}()
	}
	wg.Wait()
	for id := range live.networks {
		_ = pool.Client.RemoveNetwork(id)
	}
}

func track(m *map[string]bool, id string, on bool) {
	live := &dockerState.live
	live.Lock()
	defer live.Unlock()
	if on {
		(*m)[id] = true
	} else {
		delete(*m, id)
	}
}

// dockerServer is the Docker side of one Server: its network and
// containers.
type dockerServer struct {
	t      testing.TB
	pool   *dockertest.Pool
	kind   Kind
	image  string
	suffix string
	net    *dockertest.Network // nil for a Server on the host's network

	mu sync.Mutex // guards cs: run may be called from several goroutines
	cs []*container
}

// container is one container of a dockerServer.
type container struct {
	d     *dockerServer
	name  string
	id    string
	cport dc.Port // the client port inside, e.g. "2379/tcp"
	port  int     // its published port on 127.0.0.1 (on the host's network: its client port)
	ports []int   // on the host's network: port and the others it listens on
	ready func(ctx context.Context) error
}

// containerSpec describes a container to run: on the Server's network
// with cport published, or with host on the host's network.
type containerSpec struct {
	name  string
	env   []string
	cmd   []string
	cport dc.Port
	host  *hostSpec
}

// hostSpec runs a container on the host's network: its servers listen on
// 127.0.0.1 ports picked here (no port is published, and none is taken by
// Docker before the server binds it) and announce 127.0.0.1:port, an
// address that clients on the host can dial, also those that learn it
// from the servers (Sentinel, Redis Cluster).
type hostSpec struct {
	// ports is how many ports to pick; the first is the client port.
	ports int
	// cmd is the command for the picked ports.
	cmd func(ports []int) []string
	// ready says whether the container's server answers on the client
	// port: it must tell it from another that took the port meanwhile (a
	// test process of another package), whose answers would otherwise
	// pass for the container's while it fails to bind.
	ready func(c *container) func(context.Context) error
}

// newDockerServer makes the private network of a Server; t removes it at
// cleanup, after the containers. With onHost the Server's containers run
// on the host's network (see hostSpec) and it gets none.
func newDockerServer(t testing.TB, kind Kind, onHost bool) (*dockerServer, error) {
	pool, err := dockerPool()
	if err != nil {
		return nil, err
	}
	image := Image(kind)
	if err := ensureImage(pool, image); err != nil {
		return nil, err
	}
	d := &dockerServer{t: t, pool: pool, kind: kind, image: image, suffix: randomHex(4)}
	if onHost {
		return d, nil
	}
	name := "fencelock-" + string(kind) + "-" + d.suffix
	n, err := pool.CreateNetwork(name, func(o *dc.CreateNetworkOptions) {
		o.Labels = ownerLabels()
		o.CheckDuplicate = true
	})
	if err != nil {
		return nil, fmt.Errorf("create network %s: %w", name, err)
	}
	d.net = n
	track(&dockerState.live.networks, n.Network.ID, true)
	t.Cleanup(func() {
		if err := pool.Client.RemoveNetwork(n.Network.ID); err != nil {
			t.Errorf("servers: remove network %s: %v", name, err)
		}
		track(&dockerState.live.networks, n.Network.ID, false)
	})
	return d, nil
}

// name returns the name of member i (from 1).
func (d *dockerServer) name(i int) string {
	return fmt.Sprintf("fencelock-%s-%s-%d", d.kind, d.suffix, i)
}

// run creates and starts a container on the network, its client port
// published on a free 127.0.0.1 port (another one if that is taken by the
// time the container starts), or on the host's network (spec.host) on free
// 127.0.0.1 ports (others if the server cannot bind them), then waits
// until it is ready; t removes it at cleanup. It may be called from
// several goroutines at once.
func (d *dockerServer) run(spec containerSpec) (*container, error) {
	var errs []error
	for attempt := 0; attempt < 5; attempt++ {
		c, err := d.runOnce(spec)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if !isPortConflict(err) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// isPortConflict says whether err is a port taken: Docker's, when it
// publishes a port, or the server's own (Redis: "Address already in
// use"), in the logs of a container on the host's network.
func isPortConflict(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "port is already allocated") || strings.Contains(s, "address already in use")
}

// pickPorts picks the host ports of a container (a variable for a test).
var pickPorts = freeport.Ports

func (d *dockerServer) runOnce(spec containerSpec) (*container, error) {
	n := 1
	if spec.host != nil {
		n = spec.host.ports
	}
	ports, err := pickPorts(n)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := d.pool.Client
	opts := dc.CreateContainerOptions{
		Name: spec.name,
		Config: &dc.Config{
			Hostname:     spec.name,
			Image:        d.image,
			Env:          spec.env,
			Cmd:          spec.cmd,
			ExposedPorts: map[dc.Port]struct{}{spec.cport: {}},
			Labels:       ownerLabels(),
			// StopSignal unset: the image's (postgres: SIGINT).
		},
		HostConfig: &dc.HostConfig{
			PortBindings: map[dc.Port][]dc.PortBinding{spec.cport: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(ports[0])}}},
		},
		Context: ctx,
	}
	if spec.host != nil {
		// No hostname (Docker refuses one with the host's network), no
		// published port.
		opts.Config.Hostname, opts.Config.ExposedPorts, opts.Config.Cmd = "", nil, spec.host.cmd(ports)
		opts.HostConfig = &dc.HostConfig{NetworkMode: "host"}
	} else {
		opts.NetworkingConfig = &dc.NetworkingConfig{EndpointsConfig: map[string]*dc.EndpointConfig{
			d.net.Network.Name: {Aliases: []string{spec.name}},
		}}
	}
	created, err := cl.CreateContainer(opts)
	if err != nil {
		return nil, fmt.Errorf("create container %s: %w", spec.name, err)
	}
	c := &container{d: d, name: spec.name, id: created.ID, cport: spec.cport, port: ports[0], ports: ports}
	track(&dockerState.live.containers, c.id, true)
	if err := cl.StartContainerWithContext(c.id, nil, ctx); err != nil {
		_ = c.remove()
		return nil, fmt.Errorf("start container %s: %w", spec.name, err)
	}
	if spec.host != nil {
		// Docker took no port for it: whether the server could bind them
		// shows once it runs.
		c.ready = spec.host.ready(c)
		if err := c.waitReady(context.Background()); err != nil {
			if rerr := c.remove(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, err
		}
	}
	d.mu.Lock()
	d.cs = append(d.cs, c)
	d.mu.Unlock()
	d.t.Cleanup(func() {
		if err := c.remove(); err != nil {
			d.t.Errorf("servers: %v", err)
		}
	})
	return c, nil
}

// logsOnFailure makes t log the end of every container's output if the
// test failed (registered after the containers, so it runs before their
// removal).
func (d *dockerServer) logsOnFailure() {
	d.t.Cleanup(func() {
		if !d.t.Failed() {
			return
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, c := range d.cs {
			d.t.Logf("servers: the last lines of %s:\n%s", c.name, c.logs(30))
		}
	})
}

func (c *container) remove() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.d.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: c.id, Force: true, RemoveVolumes: true, Context: ctx})
	var nsc *dc.NoSuchContainer
	if err != nil && !errors.As(err, &nsc) {
		return fmt.Errorf("remove container %s: %w", c.name, err)
	}
	track(&dockerState.live.containers, c.id, false)
	return nil
}

// addr is the published client address.
func (c *container) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// logs returns the last n lines of the container's output.
func (c *container) logs(n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b bytes.Buffer
	err := c.d.pool.Client.Logs(dc.LogsOptions{Context: ctx, Container: c.id, OutputStream: &b, ErrorStream: &b,
		Stdout: true, Stderr: true, Tail: strconv.Itoa(n)})
	if err != nil {
		fmt.Fprintf(&b, "(logs: %v)", err)
	}
	return b.String()
}

// exec runs cmd in the container and returns its output; a command that
// exits non-zero is an error.
func (c *container) exec(ctx context.Context, cmd ...string) (string, error) {
	cl := c.d.pool.Client
	e, err := cl.CreateExec(dc.CreateExecOptions{Container: c.id, Cmd: cmd, AttachStdout: true, AttachStderr: true, Context: ctx})
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := cl.StartExec(e.ID, dc.StartExecOptions{OutputStream: &out, ErrorStream: &out, Context: ctx}); err != nil {
		return out.String(), err
	}
	st, err := cl.InspectExec(e.ID)
	if err != nil {
		return out.String(), err
	}
	if st.ExitCode != 0 {
		return out.String(), fmt.Errorf("%q exited with %d", cmd, st.ExitCode)
	}
	return out.String(), nil
}

func (c *container) inspect(ctx context.Context) (*dc.Container, error) {
	return c.d.pool.Client.InspectContainerWithContext(c.id, ctx)
}

// waitReady polls c.ready until it succeeds, the container exits, or
// ReadyTimeout passes; the error carries the container's last log lines.
func (c *container) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	for {
		err := c.ready(ctx)
		if err == nil {
			return nil
		}
		if st, ierr := c.inspect(ctx); ierr == nil && !st.State.Running {
			return fmt.Errorf("container %s exited (status %d) before it was ready: %v; its last lines:\n%s",
				c.name, st.State.ExitCode, err, c.logs(40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %s not ready within %v: %v; its last lines:\n%s", c.name, ReadyTimeout, err, c.logs(40))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitAll waits until every container is ready, concurrently.
func (d *dockerServer) waitAll(cs []*container) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.waitReady(context.Background())
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newMember returns c's Member with the Docker hooks.
func (c *container) newMember(role string) *Member {
	cl := c.d.pool.Client
	unpauseIfPaused := func(ctx context.Context) error {
		st, err := c.inspect(ctx)
		if err != nil {
			return err
		}
		if st.State.Paused {
			return cl.UnpauseContainer(c.id)
		}
		return nil
	}
	stop := func(ctx context.Context) error {
		if err := unpauseIfPaused(ctx); err != nil {
			return err
		}
		err := cl.StopContainerWithContext(c.id, 10, ctx)
		var nr *dc.ContainerNotRunning
		if errors.As(err, &nr) {
			return nil
		}
		return err
	}
	m := &Member{Name: c.name, Addr: c.addr(), Role: role}
	m.h = hooks{
		stop: stop,
		kill: func(ctx context.Context) error {
			if err := unpauseIfPaused(ctx); err != nil {
				return err
			}
			err := cl.KillContainer(dc.KillContainerOptions{ID: c.id, Signal: dc.SIGKILL, Context: ctx})
			var nr *dc.ContainerNotRunning
			if errors.As(err, &nr) {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = cl.WaitContainerWithContext(c.id, ctx)
			return err
		},
		pause: func(ctx context.Context) error {
			// On a loaded machine the cgroup freezer may not freeze a busy
			// container in time ("OCI runtime pause failed: unable to
			// freeze"); runc then thaws it, so asking again is safe.
			var err error
			for try := 0; try < freezeTries; try++ {
				if err = cl.PauseContainer(c.id); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
					return err
				}
				select {
				case <-ctx.Done():
					return err
				case <-time.After(freezeRetryPause):
				}
			}
			return err
		},
		unpause: func(ctx context.Context) error {
			if err := cl.UnpauseContainer(c.id); err != nil {
				return err
			}
			return c.waitReady(ctx)
		},
		restart: func(ctx context.Context) error {
			st, err := c.inspect(ctx)
			if err != nil {
				return err
			}
			if st.State.Running {
				if err := stop(ctx); err != nil {
					return err
				}
			}
			if err := cl.StartContainerWithContext(c.id, nil, ctx); err != nil {
				return err
			}
			return c.waitReady(ctx)
		},
	}
	if c.d.net == nil {
		return m // on the host's network: no network to cut it off
	}
	m.h.disconnect = func(ctx context.Context) error {
		return cl.DisconnectNetwork(c.d.net.Network.ID, dc.NetworkConnectionOptions{Container: c.id, Force: true, Context: ctx})
	}
	m.h.reconnect = func(ctx context.Context) error {
		err := cl.ConnectNetwork(c.d.net.Network.ID, dc.NetworkConnectionOptions{Container: c.id, Context: ctx,
			EndpointConfig: &dc.EndpointConfig{Aliases: []string{c.name}}})
		if err != nil {
			return err
		}
		return c.waitReady(ctx)
	}
	return m
}
