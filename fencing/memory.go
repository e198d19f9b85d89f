package fencing

import (
	"context"
	"fmt"
	"sync"
)

// Memory is a concurrency-safe, in-process Guard: the highest admitted token
// per resource lives in memory and is lost when the process exits, so use it
// for resources that live in the same process (a cache, an in-memory table),
// or in tests. Its zero value is ready to use, with telemetry off.
type Memory struct {
	mu        sync.Mutex
	resources map[string]*memoryResource
	tel       *Instruments
}

type memoryResource struct {
	mu      sync.Mutex // held across the check, the write and the record
	highest Token
}

// MemoryOption configures a Memory made by NewMemory.
type MemoryOption func(*Memory)

// WithTelemetry makes a Memory report its decisions, durations and spans
// (kind "memory") as t says (default: the zero Telemetry, off: no
// instruments, no spans, no allocations). Every guard package has a
// WithTelemetry option taking the same Telemetry.
func WithTelemetry(t Telemetry) MemoryOption {
	return func(m *Memory) { m.tel = t.Instruments("memory") }
}

// NewMemory returns an empty in-memory guard.
func NewMemory(opts ...MemoryOption) *Memory {
	m := &Memory{}
	for _, o := range opts {
		o(m)
	}
	return m
}

func (m *Memory) resource(name string) *memoryResource {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.resources == nil {
		m.resources = make(map[string]*memoryResource)
	}
	r := m.resources[name]
	if r == nil {
		r = &memoryResource{}
		m.resources[name] = r
	}
	return r
}

// Do implements Guard. Writes to one resource are serialized; different
// resources do not block each other.
func (m *Memory) Do(ctx context.Context, resource string, token Token, write func(ctx context.Context) error) error {
	ctx, obs := m.tel.Start(ctx, resource, token)
	err := m.do(ctx, resource, token, write)
	obs.End(err)
	return err
}

func (m *Memory) do(ctx context.Context, resource string, token Token, write func(ctx context.Context) error) error {
	if token == 0 {
		return fmt.Errorf("%w: zero token", ErrInvalidToken)
	}
	r := m.resource(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		return &StaleTokenError{Resource: resource, Token: token, Highest: r.highest}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if write != nil {
		if err := write(ctx); err != nil {
			return err
		}
	}
	r.highest = token
	return nil
}

// Highest returns the highest token admitted for resource (zero if none).
func (m *Memory) Highest(resource string) Token {
	r := m.resource(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}
