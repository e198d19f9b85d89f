package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fencelock/backend"
)

// mapErr wraps a clientv3 error in backend.ErrUnavailable when it says the
// cluster could not be reached or did not answer (gRPC Unavailable or
// DeadlineExceeded, no leader, a request timed out or cut off by a leader
// change, the context's deadline), or in backend.ErrPermission when the
// cluster refused it for lack of permission (RBAC, authentication). The
// client's error stays in the chain. Other errors are returned as they
// are.
func mapErr(err error) error {
	if err == nil || errors.Is(err, backend.ErrUnavailable) || errors.Is(err, backend.ErrPermission) {
		return err
	}
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrGRPCPermissionDenied),
		errors.Is(err, rpctypes.ErrInvalidAuthToken), errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken),
		errors.Is(err, rpctypes.ErrAuthFailed), errors.Is(err, rpctypes.ErrGRPCAuthFailed),
		errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrGRPCUserEmpty):
		return fmt.Errorf("%w: %w", backend.ErrPermission, err)
	case errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrGRPCNoLeader),
		errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrGRPCTimeout),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrGRPCTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrGRPCTimeoutDueToConnectionLost),
		errors.Is(err, rpctypes.ErrLeaderChanged), errors.Is(err, rpctypes.ErrGRPCLeaderChanged),
		errors.Is(err, rpctypes.ErrTooManyRequests),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
		case codes.PermissionDenied, codes.Unauthenticated:
			return fmt.Errorf("%w: %w", backend.ErrPermission, err)
		}
	}
	return err
}

// mapErr is the package's mapErr for a request of d's client, which also
// tells a client its owner closed under the Locker (etcd.New's): then the
// error wraps backend.ErrClientClosed, whatever gRPC made of it (Canceled,
// mostly).
func (d *etcdDriver) mapErr(err error) error {
	if err != nil && !d.owned && d.client.Ctx().Err() != nil {
		return fmt.Errorf("%w: etcd: %w", backend.ErrClientClosed, err)
	}
	return mapErr(err)
}
