package freeport

import (
	"sync"
	"testing"
)

// No port is handed out twice in a process, even to callers that ask at
// once and never bind what they got (so every port is still free).
func TestPortsNeverRepeat(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				ps, err := Ports(3)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, p := range ps {
					if seen[p] {
						t.Errorf("port %d handed out twice", p)
					}
					seen[p] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 8*50*3 {
		t.Fatalf("%d distinct ports, want %d", len(seen), 8*50*3)
	}
}
