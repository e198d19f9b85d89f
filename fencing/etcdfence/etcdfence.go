// Package etcdfence keeps fencing tokens in etcd next to the data they
// protect: one Txn compares the resource's stored token and, only if it is
// not higher, applies the write's staged operations and stores the token.
//
// A write function stages its operations on Ops(ctx) (Put, Delete) and may
// add conditions (If), for example HeldBy, the compare the etcd Mutex's
// IsOwner() makes: the lock key still exists with the create revision the
// token came from. Then a write is refused as soon as the lock is lost,
// before a newer holder has written anything.
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

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencelock/fencelock/fencing"
)

// ErrConditionFailed is returned when a condition added with Txn.If (such as
// HeldBy) is false: nothing was written and the token was not recorded.
var ErrConditionFailed = errors.New("etcdfence: condition failed")

// Guard is a fencing.Guard over an etcd cluster.
type Guard struct {
	c      *clientv3.Client
	prefix string
}

// New returns a Guard keeping the token of resource r at prefix+r.
func New(c *clientv3.Client, prefix string) *Guard { return &Guard{c: c, prefix: prefix} }

// Txn is the staged part of one Do: conditions and operations.
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

type txnKey struct{}

// Ops returns the Txn of the Do whose write function received ctx (nil
// outside one).
func Ops(ctx context.Context) *Txn {
	t, _ := ctx.Value(txnKey{}).(*Txn)
	return t
}

func pad(t fencing.Token) string { return fmt.Sprintf("%020d", uint64(t)) }

// Do implements fencing.Guard. It first reads the token so that an already
// stale write is turned away before write runs; the Txn then checks again,
// atomically with the staged operations. If write fails nothing is sent.
func (g *Guard) Do(ctx context.Context, resource string, token fencing.Token, write func(ctx context.Context) error) error {
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
		if err := write(context.WithValue(ctx, txnKey{}, txn)); err != nil {
			return err
		}
	}
	apply := append(txn.ops, clientv3.OpPut(key, pad(token)))
	if len(txn.cmps) > 0 {
		apply = []clientv3.Op{clientv3.OpTxn(txn.cmps, apply, nil)}
	}
	// A missing key fails a value compare, so "stored > token" is false
	// for a first write as it should be.
	resp, err := g.c.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(key), ">", pad(token))).
		Then(clientv3.OpGet(key)).
		Else(apply...).
		Commit()
	if err != nil {
		return err
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
