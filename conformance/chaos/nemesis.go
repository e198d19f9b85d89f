package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"
)

// nemesis injects one fault at a time, round robin over the kinds in a
// shuffled order, with FaultGap (±50%) of quiet between two, until ctx
// ends; the fault under way is undone first.
func (cp *campaign) nemesis(ctx context.Context) {
	kinds := cp.c.Faults
	if len(kinds) == 0 {
		return
	}
	cp.mu.Lock()
	order := cp.rng.Perm(len(kinds))
	cp.mu.Unlock()
	for i := 0; ; i++ {
		if !sleepCtx(ctx, cp.jitter(cp.c.FaultGap, 0.5, 1.5)) {
			return
		}
		cp.inject(ctx, kinds[order[i%len(kinds)]])
	}
}

// jitter returns d times a random factor in [lo, hi).
func (cp *campaign) jitter(d time.Duration, lo, hi float64) time.Duration {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return time.Duration(float64(d) * (lo + cp.rng.Float64()*(hi-lo)))
}

// target is the worker that holds the lock now or, if none does, a random
// running one (nil if none is running).
func (cp *campaign) target() *proc {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	// In order of worker number, so that a seed repeats the schedule.
	for _, w := range slices.Sorted(maps.Keys(cp.holder)) {
		if p := cp.procs[w]; p != nil {
			return p
		}
	}
	ids := slices.Sorted(maps.Keys(cp.procs))
	if len(ids) == 0 {
		return nil
	}
	return cp.procs[ids[cp.rng.IntN(len(ids))]]
}

// fault records the start of a fault and returns the function that
// records its end (with the error that undoing it returned, if any).
func (cp *campaign) fault(kind Fault, worker int, target string) func(err error) {
	cp.mu.Lock()
	cp.faults[kind]++
	cp.mu.Unlock()
	cp.logf("%s %s", kind, target)
	cp.record(Event{Worker: worker, Op: opFault, Phase: phaseStart, Fault: kind, Target: target, Time: time.Now().UnixNano()})
	return func(err error) {
		e := Event{Worker: worker, Op: opFault, Phase: phaseEnd, Fault: kind, Target: target, Time: time.Now().UnixNano()}
		if err != nil {
			e.Err = err.Error()
			cp.logf("%s %s: %v", kind, target, err)
		}
		cp.record(e)
	}
}

// slotMoveTimeout bounds a SlotMove fault, beyond its stop halfway.
const slotMoveTimeout = time.Minute

// hookTimeout bounds a Failover, and each step (kill, restart, pause,
// continue) of a member fault: a hook that does not return by then (a
// SENTINEL FAILOVER that never completes) ends as a failed fault, which
// fails the campaign, instead of holding it past its MaxDuration.
const hookTimeout = 2 * time.Minute

// inject runs one fault of kind to its end. A fault is undone even if ctx
// ends meanwhile (its wait is cut short).
func (cp *campaign) inject(ctx context.Context, kind Fault) {
	ttl := cp.c.TTL
	switch kind {
	case Member:
		cp.memberFault(ctx)
		return
	case Failover:
		failover, target := cp.c.Failover, "primary"
		if failover == nil {
			failover, target = cp.c.Sentinel.Failover, "primary, through the Sentinel"
		}
		end := cp.fault(kind, -1, target)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hookTimeout)
		end(failover(fctx))
		cancel()
		return
	case SlotMove:
		// Stopped halfway for a quarter of the TTL to a TTL: the
		// holder's lease outlives the shorter stops, not always the
		// longer ones (its last renewal came up to TTL/3 before). Finished
		// even if ctx ends meanwhile.
		midway := cp.jitter(ttl, 0.25, 1)
		end := cp.fault(kind, -1, fmt.Sprintf("the lock's slot, halfway for %v", midway.Round(time.Millisecond)))
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), midway+slotMoveTimeout)
		end(cp.c.SlotMove(mctx, midway))
		cancel()
		return
	}
	p := cp.target()
	if p == nil {
		return
	}
	who := fmt.Sprintf("worker %d", p.id)
	switch kind {
	case Pause:
		if p.cmd.Process.Signal(syscall.SIGSTOP) != nil {
			return // it exited meanwhile
		}
		end := cp.fault(kind, p.id, who)
		sleepCtx(ctx, cp.jitter(ttl, 2, 3))
		end(p.cmd.Process.Signal(syscall.SIGCONT))
	case Kill:
		cp.mu.Lock()
		p.killed = true
		cp.mu.Unlock()
		if p.cmd.Process.Kill() != nil {
			return
		}
		end := cp.fault(kind, p.id, who)
		<-p.exited
		_, err := cp.startWorker()
		end(err)
	case Partition:
		for _, px := range p.proxies {
			px.Partition()
		}
		end := cp.fault(kind, p.id, who)
		sleepCtx(ctx, cp.jitter(ttl, 1, 2))
		for _, px := range p.proxies {
			px.Heal()
		}
		end(nil)
	case Latency:
		d := cp.jitter(100*time.Millisecond, 0.5, 2) // 50–200ms
		for _, px := range p.proxies {
			px.SetLatency(d)
		}
		end := cp.fault(kind, p.id, fmt.Sprintf("%s +%v each way", who, d.Round(time.Millisecond)))
		sleepCtx(ctx, 2*ttl)
		for _, px := range p.proxies {
			px.SetLatency(0)
		}
		end(nil)
	}
}

// memberFault kills then restarts, or pauses then continues, the next
// server member in turn, for 1–2×TTL.
func (cp *campaign) memberFault(ctx context.Context) {
	cp.mu.Lock()
	n := cp.faults[Member]
	cp.mu.Unlock()
	m := cp.c.Members[n%len(cp.c.Members)]
	// Members in turn, and kill and pause in turn over each member's
	// visits.
	kill := (n/len(cp.c.Members))%2 == 0
	verb, act, undo := "kill", m.Kill, m.Restart
	if !kill {
		verb, act, undo = "pause", m.Pause, m.Unpause
	}
	hold := cp.jitter(cp.c.TTL, 1, 2)
	end := cp.fault(Member, -1, verb+" "+m.String())
	actCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hookTimeout)
	err := act(actCtx)
	cancel()
	if err != nil {
		end(err)
		return
	}
	sleepCtx(ctx, hold)
	undoCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hookTimeout)
	end(undo(undoCtx))
	cancel()
}

// sleepCtx sleeps d; it returns false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
