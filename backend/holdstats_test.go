package backend

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/backend/driver"
)

// Percentiles are never below the exact ones and within the bucket width
// (2^(1/4)-1, about 19%) above, for a spread of hold times, and Max is
// exact.
func TestHoldTimesPercentiles(t *testing.T) {
	s := newHoldStats(holdStatsNames)
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for range 100_000 {
		// Log-uniform from 1ms to 100s.
		d := time.Duration(float64(time.Millisecond) * math.Pow(10, 5*r.Float64()))
		all = append(all, d)
		s.record("n", d)
	}
	slices.Sort(all)
	h, ok := s.get("n")
	if !ok {
		t.Fatal("no hold times")
	}
	if h.Count != uint64(len(all)) || h.Max != all[len(all)-1] {
		t.Errorf("count %d max %v, want %d %v", h.Count, h.Max, len(all), all[len(all)-1])
	}
	exact := func(q float64) time.Duration { return all[int(q*float64(len(all))+0.999999)-1] }
	for _, c := range []struct {
		q   float64
		got time.Duration
	}{{0.5, h.P50}, {0.99, h.P99}, {0.999, h.P999}} {
		want := exact(c.q)
		if rel := float64(c.got-want) / float64(want); rel > 0.1893 || rel < 0 {
			t.Errorf("p%v = %v, exact %v: off by %.1f%%", c.q*100, c.got, want, 100*rel)
		}
	}

	// Holds under 1ms are within 1ms, and never above Max.
	s.record("fast", 300*time.Microsecond)
	s.record("fast", 200*time.Microsecond)
	f, _ := s.get("fast")
	if f.P50 != 300*time.Microsecond || f.P999 != 300*time.Microsecond {
		t.Errorf("sub-millisecond holds: %+v", f)
	}
	// Beyond the last bucket, Max.
	s.record("slow", 10*time.Hour)
	if sl, _ := s.get("slow"); sl.P50 != 10*time.Hour {
		t.Errorf("a 10h hold: %+v", sl)
	}
}

// Memory is bounded: past the limit the least recently recorded name is
// forgotten, and its memory reused.
func TestHoldTimesBounded(t *testing.T) {
	s := newHoldStats(3)
	for _, n := range []string{"a", "b", "c"} {
		s.record(n, time.Second)
	}
	s.record("a", time.Second) // a is the most recent now, b the least
	s.record("d", time.Second)
	if _, ok := s.get("b"); ok {
		t.Error("b kept past the limit")
	}
	for _, n := range []string{"a", "c", "d"} {
		if _, ok := s.get(n); !ok {
			t.Errorf("%s forgotten", n)
		}
	}
	if d, _ := s.get("d"); d.Count != 1 {
		t.Errorf("d took over b's counts: %+v", d)
	}
	if len(s.names) != 3 || s.lru.Len() != 3 {
		t.Errorf("%d names, %d in the list", len(s.names), s.lru.Len())
	}
	allocs := testing.AllocsPerRun(100, func() {
		s.record("a", time.Second)
		s.record("e", time.Second) // evicts and reuses
		s.record("f", time.Second)
	})
	if allocs > 0 {
		t.Errorf("%v allocations per record at the limit", allocs)
	}
	big := newHoldStats(holdStatsNames)
	for i := range 5 * holdStatsNames {
		big.record(fmt.Sprint(i), time.Second)
	}
	if len(big.names) != holdStatsNames {
		t.Errorf("%d names kept, limit %d", len(big.names), holdStatsNames)
	}
}

func TestAdviseTTL(t *testing.T) {
	h := HoldTimes{Count: 10_000, Max: 2600 * time.Millisecond, P50: time.Second, P99: 2 * time.Second, P999: 2410 * time.Millisecond}
	a := AdviseTTL(h, 500*time.Millisecond)
	if a.TTL != 3*time.Second {
		t.Errorf("TTL %v, want 3s", a.TTL)
	}
	// The local deadline a Locker takes from that TTL with the default
	// drift margin leaves the p99.9 hold and the headroom.
	if a.TTL-a.Drift < h.P999+500*time.Millisecond {
		t.Errorf("TTL %v - drift %v does not cover hold %v + headroom", a.TTL, a.Drift, h.P999)
	}
	want := "TTL 3s: p99.9 hold 2.41s (of 10000 holds, max 2.6s) + renewal headroom 500ms + drift margin 35ms, rounded up to whole seconds"
	if a.Explanation != want {
		t.Errorf("explanation\n%q, want\n%q", a.Explanation, want)
	}
	if strings.Contains(a.Explanation, "\n") {
		t.Error("explanation is more than one line")
	}

	// Short holds: whole milliseconds, still covered after the drift.
	short := AdviseTTL(HoldTimes{Count: 5, Max: 40 * time.Millisecond, P999: 40 * time.Millisecond}, 20*time.Millisecond)
	s, err := resolve(settings{ttl: short.TTL, autoRenew: true}, &syncDriver{}, (&syncDriver{}).Capabilities(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if short.TTL%time.Millisecond != 0 || short.TTL-s.drift < 60*time.Millisecond || short.Drift != s.drift {
		t.Errorf("short holds: %+v, drift %v", short, s.drift)
	}
	for _, hold := range []time.Duration{0, time.Millisecond, 30 * time.Millisecond, 54 * time.Millisecond, 900 * time.Millisecond, time.Hour} {
		a := AdviseTTL(HoldTimes{Count: 1, P999: hold, Max: hold}, 0)
		s, err := resolve(settings{ttl: a.TTL, autoRenew: true}, &syncDriver{}, (&syncDriver{}).Capabilities(), nil)
		if err != nil {
			t.Fatalf("hold %v: TTL %v: %v", hold, a.TTL, err)
		}
		if a.TTL-s.drift < hold {
			t.Errorf("hold %v: TTL %v - drift %v is shorter", hold, a.TTL, s.drift)
		}
	}

	none := AdviseTTL(HoldTimes{}, time.Second)
	if none.TTL != 0 || none.Explanation == "" {
		t.Errorf("no holds: %+v", none)
	}
}

// secondsDriver is a driver with etcd's TTL limits: whole seconds, 1s at
// least, and serverMin (if set) at least with a server's default settings.
type secondsDriver struct {
	syncDriver
	serverMin time.Duration
}

func (d *secondsDriver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Name: "seconds", MinTTL: time.Second, DefaultServerMinTTL: d.serverMin}
}

func (d *secondsDriver) CheckTTL(ttl time.Duration) error {
	if ttl%time.Second != 0 {
		return fmt.Errorf("whole seconds, got %v", ttl)
	}
	return nil
}

// The Locker's advice is a TTL its backend takes: raised to the minimum
// (and to what a server with default settings takes), rounded up to what
// the backend counts in, never shorter than the backend-neutral advice.
func TestLockerAdviseTTL(t *testing.T) {
	for _, serverMin := range []time.Duration{0, 2 * time.Second} {
		l, err := New(&secondsDriver{serverMin: serverMin}, WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for _, hold := range []time.Duration{10 * time.Millisecond, 700 * time.Millisecond, 1300 * time.Millisecond, 2 * time.Second} {
			h := HoldTimes{Count: 100, P999: hold, Max: hold}
			neutral := AdviseTTL(h, 100*time.Millisecond)
			a := l.AdviseTTL(h, 100*time.Millisecond)
			if a.TTL < neutral.TTL || a.TTL < max(time.Second, serverMin) || a.TTL%time.Second != 0 {
				t.Errorf("server minimum %v, hold %v: TTL %v (neutral %v)", serverMin, hold, a.TTL, neutral.TTL)
			}
			if _, err := l.TryAcquire(context.Background(), "advised", WithTTL(a.TTL)); err != nil {
				t.Errorf("hold %v: the advised TTL %v is refused: %v", hold, a.TTL, err)
			}
			if a.Drift != driftOf(a.TTL) || a.TTL-a.Drift < hold+100*time.Millisecond {
				t.Errorf("hold %v: %+v", hold, a)
			}
			if a.TTL != neutral.TTL && !strings.Contains(a.Explanation, a.TTL.String()) {
				t.Errorf("hold %v: explanation %q does not say why %v", hold, a.Explanation, a.TTL)
			}
		}
		if none := l.AdviseTTL(HoldTimes{}, time.Second); none.TTL != 0 {
			t.Errorf("no holds: %+v", none)
		}
	}
}

// A Locker's HoldTimes are a HoldHistogram's figures for the holds it
// recorded (the computation fencelock advise uses for the holds it
// measures from outside): equal percentiles, max exact, and the p99.9 of
// holds up to 600ms is 600ms, not below.
func TestLockerHoldTimesAreHoldHistogram(t *testing.T) {
	l, err := New(&syncDriver{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var h HoldHistogram
	r := rand.New(rand.NewPCG(3, 4))
	for _, i := range r.Perm(1000) {
		d := time.Duration(i+1) * 600 * time.Microsecond
		l.holds.record("n", d)
		h.Add(d)
	}
	got, ok := l.HoldTimes("n")
	if !ok {
		t.Fatal("no hold times")
	}
	if want := h.Times(); got != want {
		t.Errorf("Locker %+v, HoldHistogram %+v", got, want)
	}
	if got.Max != 600*time.Millisecond || got.P999 != 600*time.Millisecond || got.Count != 1000 {
		t.Errorf("holds of 0.6ms to 600ms: %+v", got)
	}
	var empty HoldHistogram
	if empty.Times() != (HoldTimes{}) {
		t.Error("an empty HoldHistogram has figures")
	}
}
