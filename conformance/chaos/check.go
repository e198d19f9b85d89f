package chaos

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fencelock/internal/urlkit"
)

// Summary is the checker's figures for one campaign (summary.json).
type Summary struct {
	URL             string  `json:"url"`                    // the lock service, password hidden
	Guard           Guard   `json:"guard"`                  // the store the counter lives in
	RedisClient     string  `json:"redis_client,omitempty"` // for redis:// URLs
	Workers         int     `json:"workers"`                // worker processes contending
	TTLSeconds      float64 `json:"ttl_seconds"`            // the leases' TTL
	DurationSeconds float64 `json:"duration_seconds"`       // how long the campaign ran
	// Grants counts the leases granted; GrantsPerSecond over the
	// campaign's history.
	Grants          int     `json:"grants"`
	GrantsPerSecond float64 `json:"grants_per_second"`
	// Faults counts the faults injected, by kind.
	Faults map[Fault]int `json:"faults"`
	// WritesAccepted, WritesStale and WritesUnknown count the counter
	// writes by outcome (unknown: failed otherwise, or never answered).
	WritesAccepted int   `json:"writes_accepted"`
	WritesStale    int   `json:"writes_stale"`
	WritesUnknown  int   `json:"writes_unknown"`
	FinalCounter   int64 `json:"final_counter"` // the counter's value at the end
	// StaleWritesAccepted counts accepted writes and admits whose token is
	// lower than one accepted before they were invoked. Must be 0.
	StaleWritesAccepted int `json:"stale_writes_accepted"`
	// LostUpdates counts accepted writes that wrote a value another
	// accepted write wrote, or the final counter's shortfall below the
	// accepted writes, whichever is more. Must be 0.
	LostUpdates int `json:"lost_updates"`
	// TokenAnomalies counts grants whose token is not greater than that of
	// a grant that completed before they were asked for. Must be 0.
	TokenAnomalies int `json:"token_anomalies"`
	// Overlaps counts the holds that another's grant overlapped in real
	// time (a hold lasts from Acquire's return to the call of Release, the
	// loss signal, or the holder's kill): expected under pauses.
	// OverlapsCaught counts those in which the guard rejected a step the
	// earlier holder invoked after the later one's grant.
	Overlaps       int `json:"overlaps"`
	OverlapsCaught int `json:"overlaps_caught"`
	// PartitionsOfHolder counts the partitions that cut off a holder
	// followed by another's grant; LossSignalLate those in which the
	// holder's loss signal had not fired (nor had it released) when the
	// next holder's Acquire returned. LossSignalLate must be 0.
	PartitionsOfHolder int `json:"partitions_of_holder"`
	LossSignalLate     int `json:"loss_signal_late"`
	// LongestGapSeconds is, for each fault kind, the longest time between
	// two grants while a fault of that kind lasted or within a TTL after
	// it; LongestGapOverallSeconds the longest time between two grants.
	LongestGapSeconds        map[Fault]float64 `json:"longest_gap_seconds"`
	LongestGapOverallSeconds float64           `json:"longest_gap_overall_seconds"`
	// UnexpectedExits counts workers that exited unbidden. Must be 0.
	UnexpectedExits int `json:"unexpected_exits"`
	// FaultErrors counts the faults that could not be injected or undone
	// (a member that did not restart, a failover that did not happen).
	// Must be 0.
	FaultErrors int `json:"fault_errors"`
	// Linearizable is porcupine's verdict on the guarded counter as a
	// fenced register: "ok", "illegal" or "unknown" (its time ran out);
	// must be "ok".
	Linearizable string `json:"linearizable"`
	// ShortOf says which minimum the campaign did not reach ("" if none).
	ShortOf string `json:"short_of,omitempty"`
	// Violations lists every check that failed; empty if none did.
	Violations []string `json:"violations"`
}

// step is one worker step, its invocation paired with its outcome.
type step struct {
	worker    int
	op        string
	token     uint64
	value     int64 // written (write) or read (read)
	call, ret int64 // ret is math.MaxInt64 if it never returned
	phase     string
	answered  bool
	holdIndex int // the hold the step belongs to, -1 for an acquire
}

// hold is one grant, as its holder saw it.
type hold struct {
	worker     int
	token      uint64
	start, end int64 // Acquire returned; Release called, loss signal or kill
	lost       bool  // the loss signal fired before Release
	outcome    string
}

type history struct {
	steps  []step // every invocation, in order
	grants []step // the acquires that returned a lease
	holds  []hold // in the order the grants reached the campaign
	faults []Event
	first  int64
	last   int64
	exits  []Event
}

func index(evs []Event) *history {
	h := &history{first: math.MaxInt64}
	type key struct {
		w   int
		seq int64
	}
	open := map[key]int{}    // an invocation's index in steps
	current := map[int]int{} // worker → its latest hold's index
	for _, e := range evs {
		h.first, h.last = min(h.first, e.Time), max(h.last, e.Time)
		switch e.Op {
		case opFault:
			h.faults = append(h.faults, e)
			continue
		case opExit:
			h.exits = append(h.exits, e)
			if i, ok := current[e.Worker]; ok && h.holds[i].end == math.MaxInt64 {
				h.holds[i].end = e.Time
			}
			continue
		case opLost:
			if i, ok := current[e.Worker]; ok && h.holds[i].token == e.Token {
				h.holds[i].lost = true
				h.holds[i].end = min(h.holds[i].end, e.Time)
			}
			continue
		case opStart:
			continue
		}
		k := key{e.Worker, e.Seq}
		if e.Phase == phaseInvoke {
			s := step{worker: e.Worker, op: e.Op, token: e.Token, value: e.Value, call: e.Time, ret: math.MaxInt64, holdIndex: -1}
			if e.Op != opAcquire {
				if i, ok := current[e.Worker]; ok {
					s.holdIndex = i
				}
			}
			if e.Op == opRelease {
				if i, ok := current[e.Worker]; ok {
					h.holds[i].end = min(h.holds[i].end, e.Time)
				}
			}
			open[k] = len(h.steps)
			h.steps = append(h.steps, s)
			continue
		}
		i, ok := open[k]
		if !ok {
			continue
		}
		delete(open, k)
		s := &h.steps[i]
		s.ret, s.phase, s.answered = e.Time, e.Phase, true
		if e.Op == opRead {
			s.value = e.Value
		}
		if e.Op == opAcquire && e.Phase == phaseOK {
			s.token = e.Token
			h.grants = append(h.grants, *s)
			current[e.Worker] = len(h.holds)
			h.holds = append(h.holds, hold{worker: e.Worker, token: e.Token, start: e.Time, end: math.MaxInt64})
		}
	}
	// A kill ends the holds of its worker that were still open.
	for _, f := range h.faults {
		if f.Fault != Kill || f.Phase != phaseStart {
			continue
		}
		for i := range h.holds {
			if ho := &h.holds[i]; ho.worker == f.Worker && ho.start <= f.Time && f.Time < ho.end {
				ho.end = f.Time
			}
		}
	}
	for i := range h.holds {
		if h.holds[i].end == math.MaxInt64 {
			h.holds[i].end = h.last
		}
	}
	for i := range h.steps {
		s := &h.steps[i]
		if s.holdIndex < 0 {
			continue
		}
		ho := &h.holds[s.holdIndex]
		if s.op == opWrite || (s.op == opAdmit && s.phase != phaseOK) {
			ho.outcome = s.phase
			if !s.answered {
				ho.outcome = phaseError
			}
		}
	}
	slices.SortStableFunc(h.grants, func(a, b step) int { return cmp64(a.ret, b.ret) })
	return h
}

// check computes the summary of a campaign's history (final is the
// counter's value at the end) and returns the indexed history and
// porcupine's linearization, which the timeline draws.
func check(evs []Event, final int64, c Config) (Summary, *history, porcupine.LinearizationInfo) {
	h := index(evs)
	sum := Summary{
		URL: redactURL(c.URL), Guard: c.Guard, RedisClient: redisClientOf(c), Workers: c.Workers, TTLSeconds: c.TTL.Seconds(),
		Grants: len(h.grants), Faults: map[Fault]int{}, FinalCounter: final,
		LongestGapSeconds: map[Fault]float64{}, Violations: []string{},
	}
	for _, f := range c.Faults {
		sum.Faults[f] = 0
	}
	for _, f := range h.faults {
		if f.Phase == phaseStart {
			sum.Faults[f.Fault]++
		}
	}
	if span := h.last - h.first; span > 0 {
		sum.GrantsPerSecond = float64(len(h.grants)) / time.Duration(span).Seconds()
	}
	bad := func(n int, format string, a ...any) {
		if n > 0 {
			sum.Violations = append(sum.Violations, fmt.Sprintf(format, a...))
		}
	}

	// Writes, and the accepted steps that raise the highest token.
	var accepted []step
	written := map[int64]int{}
	for _, s := range h.steps {
		if s.op == opWrite {
			switch {
			case s.phase == phaseOK:
				sum.WritesAccepted++
				written[s.value]++
			case s.phase == phaseStale:
				sum.WritesStale++
			default:
				sum.WritesUnknown++
			}
		}
		if (s.op == opWrite || s.op == opAdmit) && s.phase == phaseOK {
			accepted = append(accepted, s)
		}
	}
	sum.StaleWritesAccepted = countStale(accepted)
	bad(sum.StaleWritesAccepted, "%d stale writes accepted", sum.StaleWritesAccepted)
	dup := sum.WritesAccepted - len(written)
	short := int(int64(sum.WritesAccepted) - final)
	sum.LostUpdates = max(dup, short, 0)
	bad(sum.LostUpdates, "%d lost updates (%d accepted writes, %d distinct values written, final counter %d)",
		sum.LostUpdates, sum.WritesAccepted, len(written), final)

	sum.TokenAnomalies = max(countStale(h.grants), duplicates(h.grants))
	bad(sum.TokenAnomalies, "%d token anomalies", sum.TokenAnomalies)

	sum.Overlaps, sum.OverlapsCaught = overlaps(h)
	sum.PartitionsOfHolder, sum.LossSignalLate = lossBeforeGrant(h)
	bad(sum.LossSignalLate, "the loss signal came after the next grant in %d of %d partitions of a holder",
		sum.LossSignalLate, sum.PartitionsOfHolder)

	for i := 1; i < len(h.grants); i++ {
		sum.LongestGapOverallSeconds = max(sum.LongestGapOverallSeconds, seconds(h.grants[i].ret-h.grants[i-1].ret))
	}
	for _, f := range h.spans() {
		sum.LongestGapSeconds[f.kind] = max(sum.LongestGapSeconds[f.kind], seconds(h.longestGap(f.start, f.end+int64(c.TTL))))
	}
	for _, e := range h.exits {
		if e.Target == exitUnexpected {
			sum.UnexpectedExits++
		}
	}
	bad(sum.UnexpectedExits, "%d workers exited unbidden (see their logs)", sum.UnexpectedExits)

	if sum.Grants == 0 {
		sum.Violations = append(sum.Violations, "no lease was granted: nothing was checked (see the acquire errors in history.jsonl)")
	}
	for _, f := range h.spans() {
		if f.err != "" {
			sum.FaultErrors++
		}
	}
	bad(sum.FaultErrors, "%d faults could not be injected or undone (see their errors in history.jsonl): the campaign did not test what it says", sum.FaultErrors)
	verdict, info := linearizable(h)
	sum.Linearizable = strings.ToLower(string(verdict))
	switch verdict {
	case porcupine.Illegal:
		sum.Violations = append(sum.Violations, "the guarded counter is not linearizable as a fenced register (see timeline.html)")
	case porcupine.Unknown:
		sum.Violations = append(sum.Violations, fmt.Sprintf("porcupine could not decide within %v whether the guarded counter is linearizable", checkTimeout))
	}
	return sum, h, info
}

// span is one fault, from its start to its end (the history's end if it
// did not end).
type span struct {
	kind       Fault
	target     string
	start, end int64
	err        string
}

// spans pairs the faults' starts and ends.
func (h *history) spans() []span {
	var out []span
	open := map[[2]string]int{}
	for _, f := range h.faults {
		k := [2]string{string(f.Fault), f.Target}
		if f.Phase == phaseStart {
			open[k] = len(out)
			out = append(out, span{kind: f.Fault, target: f.Target, start: f.Time, end: h.last})
			continue
		}
		if i, ok := open[k]; ok {
			out[i].end, out[i].err = f.Time, f.Err
			delete(open, k)
		}
	}
	return out
}

// longestGap is the longest time without a grant among the gaps between
// grants (and up to the history's end) that overlap [from, to].
func (h *history) longestGap(from, to int64) int64 {
	i, _ := slices.BinarySearchFunc(h.grants, from, func(g step, t int64) int { return cmp64(g.ret, t) })
	var longest int64
	for ; ; i++ {
		prev := from
		if i > 0 {
			prev = h.grants[i-1].ret
		}
		if prev > to {
			return longest
		}
		next := h.last
		if i < len(h.grants) {
			next = h.grants[i].ret
		}
		longest = max(longest, next-prev)
		if i >= len(h.grants) {
			return longest
		}
	}
}

func seconds(ns int64) float64 { return time.Duration(ns).Seconds() }

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// countStale counts the steps whose token is lower than that of a step
// that returned before they were invoked (steps must be answered).
func countStale(steps []step) int {
	byRet := slices.Clone(steps)
	slices.SortFunc(byRet, func(a, b step) int { return cmp64(a.ret, b.ret) })
	byCall := slices.Clone(steps)
	slices.SortFunc(byCall, func(a, b step) int { return cmp64(a.call, b.call) })
	var highest uint64
	n, j := 0, 0
	for _, s := range byCall {
		for j < len(byRet) && byRet[j].ret < s.call {
			highest = max(highest, byRet[j].token)
			j++
		}
		if s.token < highest || (s.op == opAcquire && s.token == highest) {
			n++
		}
	}
	return n
}

// duplicates counts grants whose token another grant also got.
func duplicates(grants []step) int {
	seen := map[uint64]int{}
	for _, g := range grants {
		seen[g.token]++
	}
	n := 0
	for _, c := range seen {
		n += c - 1
	}
	return n
}

// overlaps counts the holds that another worker's grant overlapped in
// time (the holder still believed it held when the other's Acquire
// returned), and those of them in which the guard rejected a step the
// earlier holder invoked after that grant.
func overlaps(h *history) (n, caught int) {
	order := make([]int, len(h.holds))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int { return cmp64(h.holds[x].start, h.holds[y].start) })
	for p, i := range order {
		a := h.holds[i]
		for _, j := range order[p+1:] {
			b := h.holds[j]
			if b.start >= a.end {
				break
			}
			if b.worker == a.worker {
				continue
			}
			n++
			for _, s := range h.steps {
				if s.holdIndex == i && s.call >= b.start && s.phase == phaseStale {
					caught++
					break
				}
			}
			break
		}
	}
	return n, caught
}

// lossBeforeGrant checks, for every partition that cut off a holder, that
// its hold had ended (loss signal or Release) before the next holder's
// Acquire returned.
func lossBeforeGrant(h *history) (partitions, late int) {
	for _, f := range h.faults {
		if f.Fault != Partition || f.Phase != phaseStart {
			continue
		}
		for _, a := range h.holds {
			if a.worker != f.Worker || a.start > f.Time || f.Time >= a.end {
				continue
			}
			next := int64(math.MaxInt64)
			for _, b := range h.holds {
				if b.worker != a.worker && b.start > f.Time && b.token > a.token {
					next = min(next, b.start)
				}
			}
			if next == math.MaxInt64 {
				continue // nobody was granted the lock after it
			}
			partitions++
			if a.end >= next {
				late++
			}
		}
	}
	return partitions, late
}

// redisClientOf names c's Redis client configuration, for redis URLs.
func redisClientOf(c Config) string {
	if strings.HasPrefix(c.URL, "redis") {
		return string(c.RedisClient)
	}
	return ""
}

// redactURL hides a URL's password.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return urlkit.Redact(u)
}
