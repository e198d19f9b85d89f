package conformance

import (
	"fmt"
	"slices"
	"sync"
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
