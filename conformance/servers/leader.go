package servers

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Leader returns the member that leads an etcd cluster (the member whose
// status names itself as leader) or a ZooKeeper ensemble (srvr's "Mode:
// leader"), asking each member that answers. Other kinds return an error
// matching errors.ErrUnsupported; a cluster without a leader now, an
// error saying so.
func (s *Server) Leader(ctx context.Context) (*Member, error) {
	var ask func(context.Context, *Member) (bool, error)
	switch s.Kind {
	case Etcd:
		ask = etcdLeads
	case ZooKeeper:
		ask = func(ctx context.Context, m *Member) (bool, error) {
			mode, err := zkMode(ctx, m.Addr)
			return mode == "leader" || mode == "standalone", err
		}
	default:
		return nil, fmt.Errorf("servers: Leader: %s has no leader: %w", s.Kind, errors.ErrUnsupported)
	}
	var errs []error
	for _, m := range s.Members {
		leads, err := ask(ctx, m)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		if leads {
			return m, nil
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("servers: Leader: no member of %s leads now", s.Kind)
	}
	return nil, fmt.Errorf("servers: Leader: no member of %s leads now: %w", s.Kind, errors.Join(errs...))
}

// etcdLeads asks the member at m.Addr for its status.
func etcdLeads(ctx context.Context, m *Member) (bool, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + m.Addr}, DialTimeout: probeTimeout, Logger: zap.NewNop()})
	if err != nil {
		return false, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	st, err := c.Status(ctx, "http://"+m.Addr)
	if err != nil {
		return false, err
	}
	return st.Leader != 0 && st.Header.MemberId == st.Leader, nil
}
