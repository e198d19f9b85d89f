package fencing_test

import (
	"context"
	"sync"
	"testing"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
)

// memStore is a Memory guard over an in-process map.
type memStore struct {
	*fencing.Memory
	mu   sync.Mutex
	vals map[string]string
}

func (s *memStore) Put(res, v string) func(context.Context) error {
	return func(context.Context) error {
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
	fencetest.Run(t, fencetest.Harness{
		Volatile: true,
		Open: func(t *testing.T) fencetest.Store {
			mu.Lock()
			defer mu.Unlock()
			if shared == nil {
				shared = map[*testing.T]*memStore{}
			}
			if s := shared[t]; s != nil {
				return s // one state per subtest
			}
			s := &memStore{Memory: fencing.NewMemory(), vals: map[string]string{}}
			shared[t] = s
			return s
		},
	})
}
