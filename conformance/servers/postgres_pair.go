package servers

import (
	"context"
	"errors"
	"fmt"
)

// A PostgreSQL Server in the cluster topology is a primary (Role
// "primary") and an asynchronous streaming standby (Role "standby").
// Failover kills the primary and promotes the standby; the old primary
// stays down (Role "failed"): it could only rejoin rebuilt as a standby of
// the new primary, and started as it is, it would be a second primary.

// pgPrimary returns the member that is the primary now.
func (s *Server) pgPrimary() (*Member, error) {
	for _, m := range s.Members {
		if m.Role == "primary" {
			return m, nil
		}
	}
	return nil, errors.New("servers: Primary: no PostgreSQL member is the primary")
}

// pgFailover kills the primary and promotes the standby, which it returns
// once it accepts writes; the URL, which names both hosts with
// target_session_attrs=read-write, then reaches it.
func (s *Server) pgFailover(ctx context.Context) (*Member, error) {
	old, err := s.pgPrimary()
	if err != nil {
		return nil, err
	}
	var standby *Member
	for _, m := range s.Members {
		if m.Role == "standby" && m.h.promote != nil {
			standby = m
		}
	}
	if standby == nil {
		return nil, fmt.Errorf("servers: Failover: no standby left to promote: %w", errors.ErrUnsupported)
	}
	if err := old.Kill(ctx); err != nil {
		return nil, fmt.Errorf("servers: Failover: %w", err)
	}
	old.Role = "failed"
	old.h.restart, old.h.unpause = nil, nil
	if err := standby.do(ctx, "promote", standby.h.promote); err != nil {
		return nil, fmt.Errorf("servers: Failover: %w", err)
	}
	standby.Role, standby.h.promote = "primary", nil
	return standby, nil
}
