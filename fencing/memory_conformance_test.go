package fencing_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
)

// memStore is a Memory guard over an in-process map. Memory's write
// function takes no handle (the map is in scope), so the suite's handle is
// struct{}.
type memStore struct {
	m    *fencing.Memory
	mu   sync.Mutex
	vals map[string]string
}

func (s *memStore) Do(ctx context.Context, res string, tok fencing.Token, write func(context.Context, struct{}) error) error {
	if write == nil {
		return s.m.Do(ctx, res, tok, nil)
	}
	return s.m.Do(ctx, res, tok, func(ctx context.Context) error { return write(ctx, struct{}{}) })
}

func (s *memStore) Admit(ctx context.Context, res string, tok fencing.Token) error {
	return fencing.Admit(ctx, s.m, res, tok)
}

func (s *memStore) Gate() fencing.Guard { return s.m }

func (s *memStore) Put(res, v string) func(context.Context, struct{}) error {
	return func(context.Context, struct{}) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.vals[res] = v
		return nil
	}
}

func (s *memStore) Get(_ context.Context, res string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vals[res], nil
}

func TestMemoryConformance(t *testing.T) {
	var shared map[*testing.T]*memStore
	var mu sync.Mutex
	fencetest.Run(t, fencetest.Harness[struct{}]{
		Volatile: true,
		Kind:     "memory",
		// The state is the Memory: a subtest's later Opens get its first
		// Store, with the first Open's telemetry.
		Open: func(t *testing.T, tel fencing.Telemetry) fencetest.Store[struct{}] {
			mu.Lock()
			defer mu.Unlock()
			if shared == nil {
				shared = map[*testing.T]*memStore{}
			}
			if s := shared[t]; s != nil {
				return s // one state per subtest
			}
			s := &memStore{m: fencing.NewMemory(fencing.WithTelemetry(tel)), vals: map[string]string{}}
			shared[t] = s
			return s
		},
	})
}
