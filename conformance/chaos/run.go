package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/faultproxy"
	"github.com/fencelock/fencelock/internal/urlkit"
	"github.com/fencelock/fencelock/redis"
)

// Result is what a campaign found.
type Result struct {
	// Summary holds the checker's figures and its violations.
	Summary Summary
	// Dir is where history.jsonl, summary.json, report.html and
	// timeline.html are.
	Dir string
}

// Run runs the campaign c, checks its history and writes its files to
// c.Out. The error is non-nil if c is invalid (before anything starts), if
// the campaign could not run (a worker could not reach the lock service or
// the guard's store: the error says which), or, wrapping ErrViolation, if
// the checker found a violation; the Result is then still complete.
func Run(ctx context.Context, c Config) (*Result, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Out, 0o755); err != nil {
		return nil, err
	}
	hist, err := os.Create(filepath.Join(c.Out, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	defer hist.Close()
	var cp *campaign
	defer func() { // what was recorded is kept, whatever ended the campaign
		if cp != nil {
			cp.mu.Lock()
			_ = cp.hist.Flush()
			cp.mu.Unlock()
		}
	}()
	exe := c.Worker
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	u, _ := url.Parse(c.URL)
	cp = &campaign{
		c: c, u: u, exe: exe,
		hist:   bufio.NewWriter(hist),
		rng:    mrand.New(mrand.NewPCG(uint64(c.Seed), 0)),
		procs:  map[int]*proc{},
		holder: map[int]uint64{},
		faults: map[Fault]int{},
		guard: guardSpec{
			Kind: c.Guard, URL: c.GuardURL,
			Dir:      filepath.Join(c.Out, "guard"),
			Resource: "chaos-" + randomHex(4),
		},
	}
	cp.enc = json.NewEncoder(cp.hist)
	if dialsThroughHook(u, c) {
		nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cp.nodes, err = redis.Nodes(nctx, c.URL)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	store, err := openCounter(ctx, cp.guard)
	if err != nil {
		return nil, fmt.Errorf("%w: chaos: guard %s: %w", backend.ErrUnavailable, c.Guard, err)
	}
	defer store.Close()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = store.Read(pctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: chaos: guard %s does not answer: %w", backend.ErrUnavailable, c.Guard, err)
	}

	started := time.Now()
	runErr := cp.run(ctx)
	cp.stopAll()
	if runErr != nil {
		return nil, runErr
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	final, err := store.Read(rctx)
	if err != nil {
		return nil, fmt.Errorf("chaos: reading the final counter: %w", err)
	}
	cp.mu.Lock()
	evs := cp.events
	err = cp.hist.Flush()
	cp.mu.Unlock()
	if err != nil {
		return nil, err
	}
	sum, h, info := check(evs, final, c)
	sum.DurationSeconds = time.Since(started).Seconds()
	sum.ShortOf = cp.shortOf()
	if sum.ShortOf != "" {
		sum.Violations = append(sum.Violations, "the campaign ended at its maximum duration short of its minimum: "+sum.ShortOf)
	}
	res := &Result{Summary: sum, Dir: c.Out}
	if err := writeReports(res, h, info); err != nil {
		return res, err
	}
	if len(sum.Violations) > 0 {
		return res, fmt.Errorf("%w: %s", ErrViolation, strings.Join(sum.Violations, "; "))
	}
	return res, nil
}

type campaign struct {
	c     Config
	u     *url.URL
	exe   string
	guard guardSpec
	// nodes, for a URL whose client dials the addresses the servers
	// announce (redis+sentinel, redis+cluster), are those addresses
	// (redis.Nodes): each worker reaches every one through a proxy.
	nodes []string

	mu       sync.Mutex
	hist     *bufio.Writer
	enc      *json.Encoder
	events   []Event
	rng      *mrand.Rand
	procs    map[int]*proc  // live workers
	nextID   int            // the next worker's number
	holder   map[int]uint64 // worker → the token it holds now
	grants   int
	faults   map[Fault]int
	running  bool // every worker started, not stopping yet
	stopping bool
	readers  sync.WaitGroup
}

// proc is one worker process and its proxies to the lock service.
type proc struct {
	id      int
	cmd     *exec.Cmd
	proxies []*faultproxy.Proxy
	started chan struct{} // closed when the worker says it started
	exited  chan struct{} // closed when the process has been waited for
	logPath string
	killed  bool // by the nemesis: its exit is expected
}

// record appends e to the history and follows who holds the lock.
func (cp *campaign) record(e Event) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.events = append(cp.events, e)
	_ = cp.enc.Encode(e) // a full disk shows at Flush
	switch {
	case e.Op == opAcquire && e.Phase == phaseOK:
		cp.holder[e.Worker] = e.Token
		cp.grants++
	case e.Op == opRelease && e.Phase == phaseInvoke, e.Op == opLost, e.Op == opExit:
		delete(cp.holder, e.Worker)
	case e.Op == opStart:
		if p := cp.procs[e.Worker]; p != nil {
			close(p.started)
		}
	}
}

func (cp *campaign) logf(format string, a ...any) {
	if cp.c.Log != nil {
		fmt.Fprintf(cp.c.Log, "chaos: "+format+"\n", a...)
	}
}

// run starts the workers and the nemesis and returns when the campaign is
// over: its duration passed and its minimums are met, or its maximum
// duration passed, or ctx ended.
func (cp *campaign) run(ctx context.Context) error {
	for range cp.c.Workers {
		if _, err := cp.startWorker(); err != nil {
			return err
		}
	}
	if err := cp.waitStarted(ctx); err != nil {
		return err
	}
	cp.mu.Lock()
	cp.running = true
	cp.mu.Unlock()
	begin := time.Now()
	nctx, stopNemesis := context.WithCancel(ctx)
	var nemesis sync.WaitGroup
	nemesis.Add(1)
	go func() { defer nemesis.Done(); cp.nemesis(nctx) }()
	defer func() { stopNemesis(); nemesis.Wait() }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastLog := begin
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-tick.C:
			el := now.Sub(begin)
			if el >= cp.c.MaxDuration || (el >= cp.c.Duration && cp.shortOf() == "") {
				return nil
			}
			if now.Sub(lastLog) >= 10*time.Second {
				lastLog = now
				cp.mu.Lock()
				cp.logf("%v: %d grants, faults %v", el.Round(time.Second), cp.grants, cp.faults)
				cp.mu.Unlock()
			}
		}
	}
}

// shortOf says which minimum is not met yet, or "".
func (cp *campaign) shortOf() string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var short []string
	if cp.grants < cp.c.MinGrants {
		short = append(short, fmt.Sprintf("%d of %d grants", cp.grants, cp.c.MinGrants))
	}
	for _, f := range cp.c.Faults {
		if cp.faults[f] < cp.c.MinFaults {
			short = append(short, fmt.Sprintf("%d of %d %s faults", cp.faults[f], cp.c.MinFaults, f))
		}
	}
	return strings.Join(short, ", ")
}

// startWorker starts a worker process behind proxies of its own.
func (cp *campaign) startWorker() (*proc, error) {
	cp.mu.Lock()
	id := cp.nextID
	cp.nextID++
	seed := cp.rng.Int64()
	cp.mu.Unlock()
	p := &proc{id: id, started: make(chan struct{}), exited: make(chan struct{}),
		logPath: filepath.Join(cp.c.Out, fmt.Sprintf("worker-%d.log", id))}
	u := *cp.u
	var sentinel *Sentinel
	proxy := func(addr string) (string, error) {
		px, err := faultproxy.Start(addr)
		if err != nil {
			return "", err
		}
		p.proxies = append(p.proxies, px)
		return px.Addr(), nil
	}
	var err error
	var hosts map[string]string
	switch {
	case cp.nodes != nil: // every node, behind proxies: the worker dials through them
		hosts = map[string]string{}
		for _, n := range cp.nodes {
			if hosts[n], err = proxy(n); err != nil {
				break
			}
		}
	case cp.c.Sentinel != nil: // the Sentinel and every server it names, behind proxies
		sn := *cp.c.Sentinel
		sentinel = &Sentinel{Master: sn.Master, Hosts: map[string]string{}}
		if sentinel.Addr, err = proxy(sn.Addr); err == nil {
			for from, to := range sn.Hosts {
				if sentinel.Hosts[from], err = proxy(to); err != nil {
					break
				}
			}
		}
	case u.Scheme != "mem": // mem://name: no network
		var hosts []string
		for _, h := range strings.Split(u.Host, ",") {
			if h, err = urlkit.HostPort(h, defaultPorts[u.Scheme]); err != nil {
				break
			}
			var a string
			if a, err = proxy(h); err != nil {
				break
			}
			hosts = append(hosts, a)
		}
		u.Host = strings.Join(hosts, ",")
	}
	if err != nil {
		p.closeProxies()
		return nil, err
	}
	spec, _ := json.Marshal(workerSpec{ID: id, URL: u.String(), Name: cp.c.Name, TTL: cp.c.TTL,
		HoldMax: cp.c.HoldMax, Guard: cp.guard, Redis: cp.c.RedisClient, Sentinel: sentinel, Hosts: hosts, Seed: seed})
	logf, err := os.Create(p.logPath)
	if err != nil {
		p.closeProxies()
		return nil, err
	}
	p.cmd = exec.Command(cp.exe)
	p.cmd.SysProcAttr = workerAttr() // a worker dies with the campaign
	p.cmd.Env = append(os.Environ(), workerEnv+"="+string(spec))
	p.cmd.Stderr = logf
	out, err := p.cmd.StdoutPipe()
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		logf.Close()
		p.closeProxies()
		return nil, fmt.Errorf("chaos: starting worker %d: %w", id, err)
	}
	cp.mu.Lock()
	if cp.stopping {
		cp.mu.Unlock()
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		logf.Close()
		p.closeProxies()
		return nil, fmt.Errorf("chaos: worker %d started while the campaign stops", id)
	}
	cp.procs[id] = p
	cp.readers.Add(1)
	cp.mu.Unlock()
	go func() {
		defer cp.readers.Done()
		defer logf.Close()
		cp.read(p, out)
	}()
	return p, nil
}

// read records what worker p prints, then its exit.
func (cp *campaign) read(p *proc, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			e.Worker = p.id
			cp.record(e)
		}
	}
	err := p.cmd.Wait()
	cp.mu.Lock()
	// A worker the nemesis killed dies of SIGKILL; one that died of
	// something else first died unbidden.
	killed := p.killed && p.cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	unexpected := !killed && !cp.stopping
	cp.mu.Unlock()
	e := Event{Worker: p.id, Op: opExit, Phase: phaseOK, Time: time.Now().UnixNano()}
	if err != nil {
		e.Phase, e.Err = phaseError, err.Error()
	}
	if unexpected {
		// A worker that dies unbidden is a defect (the checker counts
		// it); another takes its place, unless the campaign is starting.
		e.Target = exitUnexpected
	}
	cp.record(e)
	cp.mu.Lock()
	delete(cp.procs, p.id)
	replace := unexpected && cp.running
	cp.mu.Unlock()
	p.closeProxies()
	close(p.exited)
	if unexpected {
		// Its last line, which says why if it could not start: the log
		// itself goes with a test's temporary directory.
		cp.logf("worker %d exited on its own (%v): %s (see %s)", p.id, err, lastLine(p.logPath), p.logPath)
	}
	if replace {
		if _, err := cp.startWorker(); err != nil {
			cp.logf("starting a worker in place of %d: %v", p.id, err)
		}
	}
}

func (p *proc) closeProxies() {
	for _, px := range p.proxies {
		px.Close()
	}
}

// waitStarted waits until every worker has opened its lock and its guard;
// a worker that exits first fails the campaign with its log's last line.
func (cp *campaign) waitStarted(ctx context.Context) error {
	cp.mu.Lock()
	ps := make([]*proc, 0, len(cp.procs))
	for _, p := range cp.procs {
		ps = append(ps, p)
	}
	cp.mu.Unlock()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for _, p := range ps {
		select {
		case <-p.started:
		case <-p.exited:
			return fmt.Errorf("%w: chaos: worker %d could not start: %s", backend.ErrUnavailable, p.id, lastLine(p.logPath))
		case <-timeout.C:
			return fmt.Errorf("%w: chaos: worker %d did not start within a minute: %s", backend.ErrUnavailable, p.id, lastLine(p.logPath))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if l := lines[len(lines)-1]; l != "" {
		return l
	}
	return "(nothing logged in " + path + ")"
}

// stopAll ends every worker: continued and healed, then SIGTERM, then
// SIGKILL for all that are left 15s later; it returns when all have been
// waited for.
func (cp *campaign) stopAll() {
	cp.mu.Lock()
	cp.stopping, cp.running = true, false
	ps := make([]*proc, 0, len(cp.procs))
	for _, p := range cp.procs {
		ps = append(ps, p)
	}
	cp.mu.Unlock()
	for _, p := range ps {
		for _, px := range p.proxies {
			px.SetLatency(0)
			px.Heal()
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	grace := time.After(15 * time.Second)
	for _, p := range ps {
		select {
		case <-p.exited:
			continue
		case <-grace:
		}
		for _, p := range ps {
			_ = p.cmd.Process.Kill()
		}
		break
	}
	cp.readers.Wait()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// dialsThroughHook reports whether the campaign's workers reach the lock
// service through a dial hook with a proxy in front of every address the
// client dials (cp.nodes), rather than through a URL rewritten to name
// their proxies: for every Redis scheme opened from its URL. A Sentinel or
// Cluster client dials the addresses the servers announce, which no URL
// rewrite reaches, and a TLS client checks the certificate against the
// address it was asked to dial, not the proxy's.
func dialsThroughHook(u *url.URL, c Config) bool {
	return strings.HasPrefix(u.Scheme, "redis") && c.RedisClient == RedisClientURL && c.Sentinel == nil
}

// defaultPorts are the client ports of the schemes whose URLs may leave
// them out.
var defaultPorts = map[string]string{"etcd": "2379", "zk": "2181", "redis": "6379", "postgres": "5432", "postgresql": "5432"}

// exitUnexpected is the Target of the exit of a worker that nobody
// killed or stopped.
const exitUnexpected = "unexpected"
