package main

import (
	"context"
	"slices"
	"sync"

	"github.com/fencelock/fencelock/fencing"
)

// Entry is one numbered entry of the journal, with the term it was written
// under.
type Entry struct {
	Seq   int           // 1, 2, 3, ...: the journal's order
	By    string        // the replica that wrote it
	Token fencing.Token // the writer's term
}

// journal is the shared store the singleton appends to. Every append goes
// through a fencing guard with the writer's term: the guard admits a term
// no older than the newest it admitted, and runs the append under the same
// mutex as that check, so a leader whose term was superseded cannot add
// anything, however late its write arrives. fencing.Memory suits a store
// that lives in this process; a database would keep the token beside the
// data (fencing/sqlfence, sqlfence.LeaseGuard; see examples/staleholder
// and examples/pglease).
type journal struct {
	guard *fencing.Memory

	mu      sync.Mutex
	entries []Entry
	changed chan struct{} // closed at the next append
}

// resource is the name the guard keeps the journal's newest term under.
const resource = "journal"

func newJournal() *journal {
	return &journal{guard: fencing.NewMemory(), changed: make(chan struct{})}
}

// append adds an entry by who under token, or returns an error matching
// fencing.ErrStaleToken, and adds nothing, if a later term has written.
func (j *journal) append(ctx context.Context, who string, token fencing.Token) (Entry, error) {
	var e Entry
	err := j.guard.Do(ctx, resource, token, func(context.Context) error {
		j.mu.Lock()
		defer j.mu.Unlock()
		e = Entry{Seq: len(j.entries) + 1, By: who, Token: token}
		j.entries = append(j.entries, e)
		close(j.changed)
		j.changed = make(chan struct{})
		return nil
	})
	return e, err
}

// await waits until ok holds for the journal's entries, and returns them.
func (j *journal) await(ctx context.Context, ok func([]Entry) bool) ([]Entry, error) {
	for {
		j.mu.Lock()
		entries, changed := slices.Clone(j.entries), j.changed
		j.mu.Unlock()
		if ok(entries) {
			return entries, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return entries, context.Cause(ctx)
		}
	}
}

// after returns a condition that holds once n entries were written under a
// term later than token.
func after(token fencing.Token, n int) func([]Entry) bool {
	return func(entries []Entry) bool {
		count := 0
		for _, e := range entries {
			if e.Token > token {
				count++
			}
		}
		return count >= n
	}
}
