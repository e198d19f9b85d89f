package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// migrateTimeout is MIGRATE's own timeout: how long the source waits for
// the target's answer to one batch.
const migrateTimeout = 5 * time.Second

// Migration is the move of one hash slot from the master that serves it
// to another master, under way, in the steps redis-cli --cluster reshard
// takes: the target IMPORTING the slot and the source MIGRATING it
// (StartMigration), the slot's keys moved from the source to the target
// with MIGRATE in batches (Move, Step), then the slot given to the target
// (SETSLOT NODE on the target, the source and the other masters: Finish).
//
// Until Finish the slot's keys may be split between the two masters.
// Redis then serves a command on the source if every key it names is
// there; if none is, it answers ASK (the client sends ASKING and the
// command to the target); if some are, TRYAGAIN. The target serves a
// command after ASKING if it names one key, or has every key it names,
// and answers TRYAGAIN otherwise; without ASKING it answers MOVED (to the
// source). A command that names a key that does not exist (yet) counts it
// as missing: a multi-key command meets TRYAGAIN for the whole migration
// unless all its keys exist on one side.
type Migration struct {
	// Slot is the hash slot being moved.
	Slot int
	// From is the master that served the slot, To the one it moves to.
	From, To *Server

	c            *Cluster
	fromID, toID string
}

// Slot returns key's hash slot (CLUSTER KEYSLOT, asked of a running
// node).
func (c *Cluster) Slot(ctx context.Context, key string) (int, error) {
	var err error
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		var slot int64
		if slot, err = n.client().ClusterKeySlot(ctx, key).Result(); err == nil {
			return int(slot), nil
		}
	}
	return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT: no running node answered (last: %v)", err)
}

// StartMigration begins moving slot from the master that serves it to
// master to (nil: another running master, the next one in the order of
// Nodes): CLUSTER SETSLOT IMPORTING on the target, then MIGRATING on the
// source. It first waits until the cluster is healthy (WaitHealthy). All
// of it is bounded by ctx.
func (c *Cluster) StartMigration(ctx context.Context, slot int, to *Server) (*Migration, error) {
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, fmt.Errorf("redistest: migrate slot %d: %w", slot, err)
	}
	from, err := c.masterOfSlot(ctx, int64(slot))
	if err != nil {
		return nil, err
	}
	if to == nil {
		if to, err = c.otherMaster(ctx, from); err != nil {
			return nil, err
		}
	}
	if to == from {
		return nil, fmt.Errorf("redistest: migrate slot %d: %s serves it already", slot, to.Addr())
	}
	m := &Migration{Slot: slot, From: from, To: to, c: c}
	if m.fromID, err = from.NodeID(ctx); err != nil {
		return nil, err
	}
	if m.toID, err = to.NodeID(ctx); err != nil {
		return nil, err
	}
	if err := to.do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", m.fromID); err != nil {
		return nil, fmt.Errorf("redistest: SETSLOT %d IMPORTING on %s: %w", slot, to.Addr(), err)
	}
	if err := from.do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", m.toID); err != nil {
		return nil, fmt.Errorf("redistest: SETSLOT %d MIGRATING on %s: %w", slot, from.Addr(), err)
	}
	return m, nil
}

// MoveSlot moves slot to master to (nil: another master, as for
// StartMigration) at once: StartMigration, then Finish. It returns the
// slot's new master.
func (c *Cluster) MoveSlot(ctx context.Context, slot int, to *Server) (*Server, error) {
	m, err := c.StartMigration(ctx, slot, to)
	if err != nil {
		return nil, err
	}
	return m.To, m.Finish(ctx)
}

// Remaining returns up to n of the slot's keys still on the source
// (CLUSTER GETKEYSINSLOT).
func (m *Migration) Remaining(ctx context.Context, n int) ([]string, error) {
	keys, err := m.From.client().ClusterGetKeysInSlot(ctx, m.Slot, n).Result()
	if err != nil {
		return nil, fmt.Errorf("redistest: GETKEYSINSLOT %d on %s: %w", m.Slot, m.From.Addr(), err)
	}
	return keys, nil
}

// Move moves keys, of the slot, from the source to the target in one
// MIGRATE; a key that is not on the source (moved already, expired) is
// skipped.
func (m *Migration) Move(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	args := []any{"MIGRATE", "127.0.0.1", m.To.port, "", 0, migrateTimeout.Milliseconds(), "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	// (A reply of NOKEY, not an error, says none of the keys was there.)
	if err := m.From.do(ctx, args...); err != nil {
		return fmt.Errorf("redistest: MIGRATE %d keys of slot %d from %s to %s: %w", len(keys), m.Slot, m.From.Addr(), m.To.Addr(), err)
	}
	return nil
}

// Step moves up to n of the slot's keys still on the source to the
// target, and returns how many it asked to move.
func (m *Migration) Step(ctx context.Context, n int) (int, error) {
	keys, err := m.Remaining(ctx, n)
	if err != nil {
		return 0, err
	}
	return len(keys), m.Move(ctx, keys...)
}

// Finish moves the keys left on the source, 100 at a time, then gives the
// slot to the target as redis-cli does (CLUSTER SETSLOT NODE on the target,
// then the source, then the other running masters), and waits until
// every running node names the target as the slot's master.
func (m *Migration) Finish(ctx context.Context) error {
	for {
		n, err := m.Step(ctx, 100)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	owners := []*Server{m.To, m.From}
	for _, n := range m.c.Nodes() {
		if n.Running() && !slices.Contains(owners, n) {
			if role, err := InfoField(ctx, n.client(), "role"); err == nil && role == "master" {
				owners = append(owners, n)
			}
		}
	}
	for _, n := range owners {
		if err := n.do(ctx, "CLUSTER", "SETSLOT", m.Slot, "NODE", m.toID); err != nil {
			return fmt.Errorf("redistest: SETSLOT %d NODE on %s: %w", m.Slot, n.Addr(), err)
		}
	}
	for _, n := range m.c.Nodes() {
		if !n.Running() {
			continue
		}
		err := poll(ctx, func(ctx context.Context) error {
			owner, err := n.slotOwner(ctx, int64(m.Slot))
			if err == nil && owner != m.toID {
				err = fmt.Errorf("%s names %s as slot %d's master, not %s", n.Addr(), owner, m.Slot, m.toID)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("redistest: slot %d moved to %s: %w", m.Slot, m.To.Addr(), err)
		}
	}
	return nil
}

// masterOfSlot returns the node that serves slot now (see the generic
// masterOfSlot).
func (c *Cluster) masterOfSlot(ctx context.Context, slot int64) (*Server, error) {
	return masterOfSlot(ctx, c.Nodes(), slot)
}

// slotOwner returns the id of the master that serves slot as s sees it
// (CLUSTER SHARDS).
func (s *Server) slotOwner(ctx context.Context, slot int64) (string, error) {
	shards, err := s.client().ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		if !slices.ContainsFunc(sh.Slots, func(r goredis.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
			continue
		}
		for _, node := range sh.Nodes {
			if node.Role == "master" {
				return node.ID, nil
			}
		}
	}
	return "", errors.New(s.Addr() + " knows no master of slot " + strconv.FormatInt(slot, 10))
}

// otherMaster returns the first running master, in the order of Nodes,
// after from (wrapping around), other than from.
func (c *Cluster) otherMaster(ctx context.Context, from *Server) (*Server, error) {
	nodes := c.Nodes()
	i := slices.Index(nodes, from)
	for k := 1; k < len(nodes); k++ {
		n := nodes[(i+k)%len(nodes)]
		if !n.Running() {
			continue
		}
		if role, err := InfoField(ctx, n.client(), "role"); err == nil && role == "master" {
			return n, nil
		}
	}
	return nil, fmt.Errorf("redistest: no running master other than %s", from.Addr())
}
