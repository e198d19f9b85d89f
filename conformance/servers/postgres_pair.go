package servers

import (
	"context"
	"errors"
	"fmt"
)

// A PostgreSQL Server in the Cluster or SyncStandby topology is a primary
// (Role "primary") and a streaming standby (Role "standby"). Failover
// kills the primary, promotes the standby, and rebuilds the old primary
// as a standby of the new one before it returns, so that it can be called
// again and again: the old primary's data directory is replaced by a
// fresh base backup of the new primary (pg_basebackup; it cannot rejoin
// with its own history, which may hold commits the new primary never
// received), and it starts again on the same address, behind the same
// proxy or published port, so that the URL's host list stays valid. While
// it is being rebuilt its Role is "failed"; if the rebuild fails (ctx
// ended, say), it stays "failed", Failover refuses (no standby), and its
// Restart rebuilds it.
//
// The rebuild is inside Failover, bounded by its ctx, rather than in the
// background: when Failover returns, both members are up in their Roles,
// so the next fault (a kill of the standby, say) acts on a member that is
// what its Role says.
//
// In the SyncStandby topology the primary waits for the standby at every
// commit. A promoted standby runs without a synchronous standby until the
// old primary, rebuilt, streams from it; then it waits for it at every
// commit again (as Patroni's synchronous_mode without
// synchronous_mode_strict): the promotion is not held up by the rebuild,
// and no commit is lost by a failover, which only ever promotes a
// synchronous standby.
type pgPair struct {
	s *Server
	// promote makes the standby m a primary and returns once it accepts
	// writes.
	promote func(ctx context.Context, m *Member) error
	// follow makes m, which does not run, a streaming standby of primary
	// (for SyncStandby, its synchronous standby), from a fresh base
	// backup of it, and returns once it streams.
	follow func(ctx context.Context, m, primary *Member) error
}

// role returns the member with role, or nil.
func (p *pgPair) role(role string) *Member {
	for _, m := range p.s.Members {
		if m.Role == role {
			return m
		}
	}
	return nil
}

// primary returns the member that is the primary now.
func (p *pgPair) primary(context.Context) (*Member, error) {
	if m := p.role("primary"); m != nil {
		return m, nil
	}
	return nil, errors.New("servers: Primary: no PostgreSQL member is the primary")
}

// failover kills the primary, promotes the standby and rebuilds the old
// primary as its standby; it returns the new primary.
func (p *pgPair) failover(ctx context.Context) (*Member, error) {
	old, err := p.primary(ctx)
	if err != nil {
		return nil, err
	}
	standby := p.role("standby")
	if standby == nil {
		return nil, errors.New(`servers: Failover: no standby to promote (a member whose rebuild failed is "failed": its Restart rebuilds it)`)
	}
	if err := old.Kill(ctx); err != nil {
		return nil, fmt.Errorf("servers: Failover: %w", err)
	}
	old.Role = "failed"
	if err := p.promote(ctx, standby); err != nil {
		return nil, fmt.Errorf("servers: Failover: promote %s: %w", standby.Name, err)
	}
	standby.Role = "primary"
	if err := p.rejoin(ctx, old); err != nil {
		return nil, fmt.Errorf("servers: Failover: %w", err)
	}
	return standby, nil
}

// rejoin rebuilds the failed member m as a standby of the primary.
func (p *pgPair) rejoin(ctx context.Context, m *Member) error {
	primary, err := p.primary(ctx)
	if err != nil {
		return err
	}
	if err := p.follow(ctx, m, primary); err != nil {
		return fmt.Errorf("rebuild %s as a standby of %s: %w", m.Name, primary.Name, err)
	}
	m.Role = "standby"
	return nil
}

// restartHook returns m's Restart for the pair: a failed member (an old
// primary whose rebuild did not finish) is rebuilt as a standby, another
// is restarted by plain.
func (p *pgPair) restartHook(m *Member, plain func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if m.Role == "failed" {
			return p.rejoin(ctx, m)
		}
		return plain(ctx)
	}
}

// CutReplication cuts a local PostgreSQL standby's replication from the
// primary, and nothing else: the clients still reach both members, the
// primary goes on committing (with a synchronous standby, its commits
// then wait), and the standby receives nothing more. A Failover meanwhile
// promotes a standby that missed the primary's last commits, as when a
// primary dies before its last commits were streamed: the asynchronous
// standby's worst case. HealReplication undoes it, and so does the rebuild
// of the next standby in Failover. Other servers: an error matching
// errors.ErrUnsupported.
func (s *Server) CutReplication(context.Context) error { return s.setReplication(true) }

// HealReplication undoes CutReplication (the standby then catches up).
func (s *Server) HealReplication(context.Context) error { return s.setReplication(false) }

func (s *Server) setReplication(cut bool) error {
	if s.replication == nil {
		return fmt.Errorf("servers: a standby's replication of %s %s via %s: %w", s.Kind, s.Topology, s.Provider, errors.ErrUnsupported)
	}
	if err := s.replication(cut); err != nil {
		return fmt.Errorf("servers: a standby's replication: %w", err)
	}
	return nil
}
