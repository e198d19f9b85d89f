// Package etcdfence keeps fencing tokens in etcd next to the data they
// protect: one Txn compares the resource's stored token and, only if it is
// not higher, applies the write's staged operations and stores the token.
//
// Guard.Do hands the write function a *Txn: it stages operations there (Put,
// Delete) and may add conditions (If), for example HeldBy, the compare the
// etcd Mutex's IsOwner() makes: the lock key still exists with the create
// revision the token came from. Then a write is refused as soon as the lock
// is lost, before a newer holder has written anything.
//
//	g, err := etcdfence.New(cli) // option: WithPrefix
//	err = g.Do(ctx, "report", token, func(ctx context.Context, t *etcdfence.Txn) error {
//		t.If(etcdfence.HeldBy(lockKey, token))
//		t.Put("/reports/daily", body)
//		return nil
//	})
//
// A put sent on the client itself instead lands whatever the token.
// Guard.Gate is the same guard as a plain fencing.Guard for store-agnostic
// code (httpfence.Middleware); its write function gets no Txn.
//
// Tokens are stored as 20-digit zero-padded decimals so that etcd's
// byte-wise value compare orders them numerically. The token key of resource
// r is prefix+r. A Txn may not touch one key twice: do not stage writes to a
// token key.
package etcdfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencelock/fencelock/fencing"
)

// ErrConditionFailed is returned when a condition added with Txn.If (such as
// HeldBy) is false: nothing was written and the token was not recorded.
var ErrConditionFailed = errors.New("etcdfence: condition failed")

// DefaultPrefix is the token key prefix of a Guard made without WithPrefix.
const DefaultPrefix = "fencelock-fences/"

// Guard is a fencing.StoreGuard[*Txn] over an etcd cluster.
type Guard struct {
	c      *clientv3.Client
	prefix string
	ins    *fencing.Instruments
}

// Option configures a Guard made by New.
type Option func(*Guard)

// WithPrefix sets the prefix of the token keys: the token of resource r is
// kept at prefix+r (default DefaultPrefix, "fencelock-fences/"). New rejects
// an empty prefix, which would make every resource name a bare key.
func WithPrefix(prefix string) Option { return func(g *Guard) { g.prefix = prefix } }

// WithTelemetry makes the Guard report its decisions, durations and spans
// (kind "etcd"; see fencing.Telemetry) for every Do, Admit and Gate
// included (default: the zero Telemetry, off). A write refused by a
// condition of its own (ErrConditionFailed) counts as an error, not as
// stale.
func WithTelemetry(t fencing.Telemetry) Option {
	return func(g *Guard) { g.ins = t.Instruments("etcd") }
}

// New returns a Guard over the etcd cluster of c.
func New(c *clientv3.Client, opts ...Option) (*Guard, error) {
	if c == nil {
		return nil, errors.New("etcdfence: New: nil client")
	}
	g := &Guard{c: c, prefix: DefaultPrefix}
	for _, o := range opts {
		o(g)
	}
	if g.prefix == "" {
		return nil, errors.New("etcdfence: New: empty token key prefix")
	}
	return g, nil
}

// Txn is the staged part of one Do: conditions and operations, sent in the
// etcd transaction that checks the token and applied only if it is admitted
// and every condition holds. A Txn is valid only during the write function
// it was handed to.
type Txn struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
}

// If adds conditions; all must hold for the write to apply.
func (t *Txn) If(cmps ...clientv3.Cmp) { t.cmps = append(t.cmps, cmps...) }

// Put stages a put.
func (t *Txn) Put(key, val string, opts ...clientv3.OpOption) {
	t.ops = append(t.ops, clientv3.OpPut(key, val, opts...))
}

// Delete stages a delete.
func (t *Txn) Delete(key string, opts ...clientv3.OpOption) {
	t.ops = append(t.ops, clientv3.OpDelete(key, opts...))
}

// HeldBy is true while lockKey exists with the create revision token: for a
// lock kept in etcd whose token is its key's create revision (fencelock's
// etcd backend, the concurrency Mutex), "the lock is still this grant's".
func HeldBy(lockKey string, token fencing.Token) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(lockKey), "=", int64(token))
}

func pad(t fencing.Token) string { return fmt.Sprintf("%020d", uint64(t)) }

// Do implements fencing.StoreGuard[*Txn]. It first reads the token so that
// an already stale write is turned away before write runs; then write stages
// its conditions and operations on t, and one etcd transaction checks the
// token again, atomically with applying them and storing the token. If a
// higher token is admitted while write runs, the staged operations are not
// applied and Do returns the *fencing.StaleTokenError; if a condition added
// with t.If is false, nothing is written and the error wraps
// ErrConditionFailed. If write returns an error nothing is sent. A nil
// write stores the token alone (see Admit).
//
// A transaction whose answer is lost (the connection dropped, the request
// timed out, ctx ended while it was on its way) returns an
// *fencing.OutcomeUnknownError (errors.Is(err, fencing.ErrOutcomeUnknown)):
// the write and its token may have been applied. The etcd client resends
// no transaction once sent, so a stale rejection is never the answer to a
// write that landed.
func (g *Guard) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, t *Txn) error) error {
	ctx, obs := g.ins.Start(ctx, resource, token)
	err := g.do(ctx, resource, token, write)
	obs.End(err)
	return err
}

func (g *Guard) do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context, t *Txn) error) error {
	if token == 0 {
		return fmt.Errorf("%w: zero token", fencing.ErrInvalidToken)
	}
	key := g.prefix + resource
	txn := &Txn{}
	if write != nil {
		cur, err := g.Highest(ctx, resource)
		if err != nil {
			return err
		}
		if token < cur {
			return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: cur}
		}
		if err := write(ctx, txn); err != nil {
			return err
		}
	}
	apply := append(txn.ops, clientv3.OpPut(key, pad(token)))
	if len(txn.cmps) > 0 {
		apply = []clientv3.Op{clientv3.OpTxn(txn.cmps, apply, nil)}
	}
	if err := ctx.Err(); err != nil {
		return err // nothing sent
	}
	// A missing key fails a value compare, so "stored > token" is false
	// for a first write as it should be.
	resp, err := g.c.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), ">", pad(token))).
		Then(clientv3.OpGet(key)).
		Else(apply...).
		Commit()
	if err != nil {
		if refused(err) {
			return err
		}
		return &fencing.OutcomeUnknownError{Resource: resource, Token: token, Err: err}
	}
	if resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return fmt.Errorf("etcdfence: token key %q vanished", key)
		}
		highest, err := parse(key, kvs[0].Value)
		if err != nil {
			return err
		}
		return &fencing.StaleTokenError{Resource: resource, Token: token, Highest: highest}
	}
	if len(txn.cmps) > 0 && !resp.Responses[0].GetResponseTxn().GetSucceeded() {
		return fmt.Errorf("%w: %q: nothing written", ErrConditionFailed, resource)
	}
	return nil
}

// refused says err is etcd turning the transaction away before applying
// it (a request etcd rejects as invalid or too large, a failed
// precondition, no permission, no space left or too many requests), or the
// client refusing to send it. Anything else (Unavailable: a connection
// lost, a request timed out or a leader changed while it was proposed;
// DeadlineExceeded or Canceled: a context that ended meanwhile) may follow
// a transaction that was applied.
func refused(err error) bool {
	code := status.Code(err)
	var ee rpctypes.EtcdError // what the client makes of etcd's own errors
	if errors.As(err, &ee) {
		code = ee.Code()
	}
	switch code {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.PermissionDenied,
		codes.Unauthenticated, codes.ResourceExhausted, codes.NotFound, codes.AlreadyExists, codes.Unimplemented:
		return true
	}
	return false
}

// Admit stores token for resource without a write of its own (rejecting a
// lower one), in one etcd transaction.
func (g *Guard) Admit(ctx context.Context, resource string, token fencing.Token) error {
	return g.Do(ctx, resource, token, nil)
}

// Gate returns g as a fencing.Guard for store-agnostic code
// (httpfence.Middleware, fencing.Admit). Its write function gets no Txn and
// runs between the pre-check and the etcd transaction, holding nothing: the
// token is stored only if it returns nil and is still not stale, but nothing
// the function does is part of the transaction, and a higher token may be
// admitted while it runs. To change etcd atomically with the check, use Do
// and t.
func (g *Guard) Gate() fencing.Guard { return fencing.Gate[*Txn](g) }

func parse(key string, v []byte) (fencing.Token, error) {
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcdfence: token key %q holds %q", key, v)
	}
	return fencing.Token(n), nil
}

// Highest returns the highest token admitted for resource (0 if none).
func (g *Guard) Highest(ctx context.Context, resource string) (fencing.Token, error) {
	key := g.prefix + resource
	resp, err := g.c.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return parse(key, resp.Kvs[0].Value)
}
