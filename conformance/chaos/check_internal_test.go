package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// histBuilder writes a history by hand, for the checks no real campaign
// can be made to fail on demand.
type histBuilder struct {
	evs []Event
	seq int64
}

func (b *histBuilder) step(w int, op string, tok uint64, value int64, call, ret time.Duration, phase string) {
	b.seq++
	b.evs = append(b.evs,
		Event{Worker: w, Op: op, Seq: b.seq, Phase: phaseInvoke, Token: tok, Value: value, Time: int64(call)},
		Event{Worker: w, Op: op, Seq: b.seq, Phase: phase, Token: tok, Value: value, Time: int64(ret)})
}

// grant is one fenced round: acquire, admit, read, write, release.
func (b *histBuilder) grant(w int, tok uint64, read int64, at time.Duration) {
	ms := time.Millisecond
	b.step(w, opAcquire, tok, 0, at, at+ms, phaseOK)
	b.step(w, opAdmit, tok, 0, at+2*ms, at+3*ms, phaseOK)
	b.step(w, opRead, tok, read, at+4*ms, at+5*ms, phaseOK)
	b.step(w, opWrite, tok, read+1, at+6*ms, at+7*ms, phaseOK)
	b.step(w, opRelease, tok, 0, at+8*ms, at+9*ms, phaseOK)
}

func (b *histBuilder) event(e Event, at time.Duration) {
	e.Time = int64(at)
	b.evs = append(b.evs, e)
}

func TestCheckCountsALateLossSignal(t *testing.T) {
	var b histBuilder
	s := time.Second
	b.grant(0, 1, 0, 0)
	b.step(1, opAcquire, 2, 0, s, s+time.Millisecond, phaseOK)
	b.event(Event{Worker: 1, Op: opFault, Phase: phaseStart, Fault: Partition, Target: "worker 1"}, 2*s)
	b.grant(0, 3, 1, 5*s) // granted while worker 1 still believes it holds
	b.event(Event{Worker: 1, Op: opFault, Phase: phaseEnd, Fault: Partition, Target: "worker 1"}, 6*s)
	b.event(Event{Worker: 1, Op: opLost, Phase: phaseOK, Token: 2}, 7*s)
	sum, _, _ := check(b.evs, 2, Config{TTL: s, Faults: []Fault{Partition}})
	assert.Equal(t, 1, sum.PartitionsOfHolder)
	assert.Equal(t, 1, sum.LossSignalLate)
	assert.Equal(t, 1, sum.Overlaps)
	assert.Contains(t, sum.Violations, "the loss signal came after the next grant in 1 of 1 partitions of a holder")
	// From the fault (2s) to the next grant (5s) is the longest gap that
	// overlaps the fault or the TTL after it.
	assert.InDelta(t, 4.0, sum.LongestGapSeconds[Partition], 0.01, "from the grant at 1s to the one at 5s")
	assert.Equal(t, "ok", sum.Linearizable)
}

func TestCheckPassesACleanHistory(t *testing.T) {
	var b histBuilder
	for i := range 10 {
		b.grant(i%3, uint64(i+1), int64(i), time.Duration(i)*20*time.Millisecond)
	}
	sum, _, _ := check(b.evs, 10, Config{TTL: time.Second})
	assert.Empty(t, sum.Violations)
	assert.Equal(t, 10, sum.Grants)
	assert.Equal(t, 10, sum.WritesAccepted)
	assert.Zero(t, sum.Overlaps)
}

func TestCheckCountsATokenGoingBack(t *testing.T) {
	var b histBuilder
	b.grant(0, 5, 0, 0)
	b.grant(1, 4, 1, time.Second) // a later grant with a lower token
	sum, _, _ := check(b.evs, 2, Config{TTL: time.Second})
	assert.Equal(t, 1, sum.TokenAnomalies)
	assert.Positive(t, sum.StaleWritesAccepted, "the guard admitted 4 after 5")
	assert.Equal(t, "illegal", sum.Linearizable)
}
