package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// holdRecord is one critical section as its holder saw it: from the return
// of Acquire to the call of Release, on this process's monotonic clock.
type holdRecord struct {
	who        string
	token      fencing.Token
	start, end time.Time
}

// history collects the holds of one lock name from many goroutines.
type history struct {
	mu    sync.Mutex
	holds []holdRecord
}

func (h *history) add(r holdRecord) {
	h.mu.Lock()
	h.holds = append(h.holds, r)
	h.mu.Unlock()
}

func (h *history) snapshot() []holdRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.holds)
}

// sections is what concurrent critical sections on one lock name share:
// the fencing guard they write through, their history, how many are
// inside at once and the failures their goroutines report.
type sections struct {
	name     string
	guard    *fencing.Memory
	hist     history
	inside   atomic.Int32
	overlaps atomic.Int32 // sections entered while another was inside
	errMu    sync.Mutex
	errs     []string
}

// newSections returns the sections of the lock called name.
func newSections(name string) *sections {
	return &sections{name: name, guard: fencing.NewMemory()}
}

// fail records a failure reported by a goroutine.
func (k *sections) fail(format string, args ...any) {
	k.errMu.Lock()
	k.errs = append(k.errs, fmt.Sprintf(format, args...))
	k.errMu.Unlock()
}

// enter notes that a critical section begins, counting an overlap if
// another is inside, and returns when it began.
func (k *sections) enter() time.Time {
	start := time.Now()
	if k.inside.Add(1) != 1 {
		k.overlaps.Add(1)
	}
	return start
}

// write makes a section's two writes through the guard with token,
// failing with "guarded write N <of> <token>".
func (k *sections) write(c context.Context, who, of string, token fencing.Token) {
	for i := range 2 {
		err := k.guard.Do(c, k.name, token, func(context.Context) error {
			time.Sleep(100 * time.Microsecond)
			return nil
		})
		if err != nil {
			k.fail("%s: guarded write %d %s %d: %v", who, i, of, token, err)
		}
	}
}

// leave notes that who's section with token, begun at start, ended, and
// records it in the history.
func (k *sections) leave(who string, token fencing.Token, start time.Time) {
	k.inside.Add(-1)
	k.hist.add(holdRecord{who: who, token: token, start: start, end: time.Now()})
}

// checkHistory is the overlapping-term checker (kubernetes#67651): in grant
// order (by start), every token is strictly greater than the one before, and
// no hold starts before the previous one ended. It returns one line per
// violation.
func checkHistory(holds []holdRecord) []string {
	holds = slices.Clone(holds)
	slices.SortStableFunc(holds, func(a, b holdRecord) int { return a.start.Compare(b.start) })
	var bad []string
	seen := make(map[fencing.Token]string, len(holds))
	for i, h := range holds {
		if h.end.Before(h.start) {
			bad = append(bad, fmt.Sprintf("hold %d (%s, token %d) ends before it starts", i, h.who, h.token))
		}
		if h.token == 0 {
			bad = append(bad, fmt.Sprintf("hold %d (%s) has the zero token", i, h.who))
		}
		if other, dup := seen[h.token]; dup {
			bad = append(bad, fmt.Sprintf("token %d granted twice: %s and %s", h.token, other, h.who))
		}
		seen[h.token] = h.who
		if i == 0 {
			continue
		}
		p := holds[i-1]
		if h.token <= p.token {
			bad = append(bad, fmt.Sprintf("token went from %d (%s) to %d (%s) in grant order", p.token, p.who, h.token, h.who))
		}
		if h.start.Before(p.end) {
			bad = append(bad, fmt.Sprintf("holds overlap: %s (token %d) started %v before %s (token %d) ended",
				h.who, h.token, p.end.Sub(h.start), p.who, p.token))
		}
	}
	return bad
}
