// Command singleton runs a worker that must run on one replica at a time (a
// scheduler, a compactor, a singleton consumer) on three replicas. Each
// replica campaigns for "singleton" (package election) and, while it leads,
// appends numbered entries to a shared journal through a fencing guard,
// each write carrying its term number (the term's fencing token). When its
// term ends it stops and campaigns again.
//
// The timeline: the leader resigns and the next candidate in line leads at
// once, with a higher term; then the new leader pauses (a GC pause,
// SIGSTOP) between its check that it leads and its next write, its term
// runs out, a third term begins and writes, and the paused leader wakes and
// writes under its old term: the guard rejects it, and nothing of it is
// kept. An observer follows the leader throughout (Elector.Observe).
//
//	go run ./examples/singleton                        # in-process backend
//	go run ./examples/singleton -url etcd://127.0.0.1:2379/locks
//	go run ./examples/singleton -url 'zk://127.0.0.1:2181/locks?ttl=2s'
//	go run ./examples/singleton -url redis://127.0.0.1:6379/0
//	go run ./examples/singleton -url "$DATABASE_URL"   # postgres://...
//
// The replicas are goroutines of one process here, each with a Locker of
// its own: a connection of its own, as a separate process would have.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/election"
	"github.com/fencelock/fencelock/fencing"

	// The adapters, imported for the URL schemes they register.
	_ "github.com/fencelock/fencelock/backend/mem" // mem://
	_ "github.com/fencelock/fencelock/etcd"        // etcd://, etcds://
	_ "github.com/fencelock/fencelock/postgres"    // postgres://, postgresql://
	_ "github.com/fencelock/fencelock/redis"       // redis://, rediss://
	_ "github.com/fencelock/fencelock/zookeeper"   // zk://, zks://
)

func main() {
	url := flag.String("url", cmp.Or(os.Getenv("FENCELOCK_URL"), "mem://singleton"), "backend URL (default $FENCELOCK_URL, else the in-process mem://singleton)")
	ttl := flag.Duration("ttl", 2*time.Second, "term TTL: how long a paused leader keeps its term (etcd: whole seconds, 2s at least on a server with default settings)")
	flag.Parse()
	res, err := run(context.Background(), *url, *ttl, os.Stdout)
	if err == nil && !errors.Is(res.Late, fencing.ErrStaleToken) {
		err = fmt.Errorf("the paused leader's late write was not rejected: %v", res.Late)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "singleton:", err)
		os.Exit(1)
	}
}

// Result is what the timeline produced.
type Result struct {
	Resigned fencing.Token     // the term the first leader resigned
	Paused   fencing.Token     // the term the second leader paused in
	Next     fencing.Token     // the term that wrote last before the paused leader woke
	Late     error             // what the paused leader's late write returned
	Journal  []Entry           // every entry kept, in order
	Observed []election.Leader // every leader the observer saw, in order
}

// replicaNames are the three replicas.
var replicaNames = []string{"r1", "r2", "r3"}

func run(ctx context.Context, url string, ttl time.Duration, out io.Writer) (Result, error) {
	var res Result
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	start := time.Now()
	var outMu sync.Mutex
	say := func(who, format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, "%+7.3fs  %-8s %s\n", time.Since(start).Seconds(), who, fmt.Sprintf(format, args...))
	}

	j := newJournal()
	byName := map[string]*replica{}
	var replicas []*replica
	for _, name := range replicaNames {
		locker, err := backend.Open(ctx, url)
		if err != nil {
			return res, fmt.Errorf("replica %s: %w", name, err)
		}
		defer locker.Close()
		e, err := election.New(locker)
		if err != nil {
			return res, err
		}
		r := &replica{name: name, elector: e, journal: j, ttl: ttl, say: say,
			resigns: make(chan chan fencing.Token), pauses: make(chan *pause)}
		byName[name] = r
		replicas = append(replicas, r)
	}

	// The observer: a fourth process that only follows the election.
	observerLocker, err := backend.Open(ctx, url)
	if err != nil {
		return res, fmt.Errorf("observer: %w", err)
	}
	defer observerLocker.Close()
	observer, err := election.New(observerLocker)
	if err != nil {
		return res, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	changes, err := observer.Observe(watchCtx, electionName)
	if err != nil {
		return res, err
	}
	watched := make(chan []election.Leader, 1)
	go func() {
		var seen []election.Leader
		for o := range changes {
			switch {
			case o.Err != nil:
				say("observer", "leader unknown: %v", o.Err)
			case o.Leader == nil:
				say("observer", "no leader")
			default:
				say("observer", "leader %s, term %s", o.Leader.Value, o.Leader.Token)
				seen = append(seen, *o.Leader)
			}
		}
		watched <- seen
	}()

	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	for _, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(workCtx)
		}()
	}
	err = timeline(ctx, j, byName, say, &res)
	stopWork()
	wg.Wait()
	stopWatch()
	res.Observed = <-watched
	res.Journal, _ = j.await(ctx, func([]Entry) bool { return true })
	if err != nil {
		return res, err
	}
	say("journal", "%d entries kept: %s", len(res.Journal), summary(res.Journal))
	return res, nil
}

// timeline drives the replicas: a resignation, then a pause past the TTL.
// Who leads is read from the journal: the writer of its last entry.
func timeline(ctx context.Context, j *journal, replicas map[string]*replica, say func(string, string, ...any), res *Result) error {
	// The first leader writes a few entries, then resigns.
	entries, err := j.await(ctx, after(0, 3))
	if err != nil {
		return fmt.Errorf("no leader wrote: %w", err)
	}
	leader := entries[len(entries)-1].By
	say("main", "asks %s to resign", leader)
	if res.Resigned, err = replicas[leader].resign(ctx); err != nil {
		return err
	}

	// The next leader writes, then pauses.
	if entries, err = j.await(ctx, after(res.Resigned, 3)); err != nil {
		return fmt.Errorf("no leader after the resignation: %w", err)
	}
	leader = entries[len(entries)-1].By
	say("main", "pauses %s", leader)
	p, paused, err := replicas[leader].stall(ctx)
	if err != nil {
		return err
	}
	res.Paused = paused

	// Its term runs out; a later one is elected and writes.
	if entries, err = j.await(ctx, after(paused, 3)); err != nil {
		close(p.resume)
		return fmt.Errorf("no leader after the pause: %w", err)
	}
	next := entries[len(entries)-1]
	res.Next = next.Token
	say("main", "%s leads with term %s; wakes %s", next.By, next.Token, leader)
	close(p.resume)
	select {
	case res.Late = <-p.late:
	case <-ctx.Done():
		return context.Cause(ctx)
	}

	// The paused replica campaigns again; the leader goes on writing.
	if _, err := j.await(ctx, after(paused, 5)); err != nil {
		return err
	}
	say("main", "stops the replicas")
	return nil
}

// summary says which replica wrote which entries under which term.
func summary(entries []Entry) string {
	s := ""
	for i := 0; i < len(entries); {
		k := i
		for k < len(entries) && entries[k].Token == entries[i].Token {
			k++
		}
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%d-%d by %s (term %s)", entries[i].Seq, entries[k-1].Seq, entries[i].By, entries[i].Token)
		i = k
	}
	return s
}
