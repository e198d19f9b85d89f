package etcd

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchHub multiplexes the driver's watches of single keys (held keys, and
// the predecessors of waiting ones) over one gRPC Watch stream of its own,
// with two goroutines for all of them (one sends, one receives) while any
// watch is registered, and none otherwise. clientv3's Watch would run a
// goroutine per watch and create watches one round trip after another, so
// that 1,000 waiters queueing at once waited for 1,000 round trips in turn
// before the last one watched its predecessor.
//
// Each watch asks the server for one key (or, for a waiter next in line,
// the few keys of one lock from its predecessor's to its own), so that a
// client receives the events of its own keys only: a single watch of the
// driver's whole prefix would bring every client every acquisition and
// release of every lock, which does not scale with the number of clients
// of a lock service.
//
// The hub names its watches itself (WatchCreateRequest.watch_id, etcd 3.4
// and later), so that their creation is pipelined; the server answers
// creations in order, which also tells which creation a refusal (sent
// without an ID) belongs to. A watch resumes from the revision after the
// last it delivered when the stream fails and is opened again, so nothing
// is missed; a watch the server cancels (its start revision compacted, a
// refusal) is removed and its owner told.
type watchHub struct {
	client *clientv3.Client
	ctx    context.Context // parent of the streams; cancelled by close
	stop   context.CancelFunc

	mu       sync.Mutex
	watches  map[int64]*keyWatch // registered, by ID
	nextID   int64
	queue    []hubRequest // for the current stream, in order
	creating []*keyWatch  // creations sent on the current stream, not yet answered, in order
	running  bool         // the sending goroutine runs
	wake     chan struct{}
	done     sync.WaitGroup // the goroutines
}

// keyWatch is one watch of the hub: key (or the keys from key up to end,
// end excluded, if end is set) from revision from on.
type keyWatch struct {
	id  int64
	key string
	end string
	// from is the first revision wanted: the creation's start revision,
	// then the revision after the last event delivered (or after the
	// creation's, for a watch that started at the current revision).
	// Zero means the current revision.
	from int64
	// noPut filters put events out.
	noPut bool
	// owner receives the watch's responses.
	owner watchOwner
	sent  bool // its creation was sent on the current stream
}

// watchOwner is told a keyWatch's responses: its creation, events, and a
// cancellation by the server (which removes the watch). watchResponse runs
// on the hub's receiving goroutine, without the hub's lock, and must not
// block.
type watchOwner interface {
	watchResponse(w *keyWatch, resp *pb.WatchResponse)
}

// hubRequest is a creation (of the watch of ID id, if still registered
// then) or a cancellation to send.
type hubRequest struct {
	id     int64
	cancel bool
}

// hubLinger is how long the hub keeps its stream open once no watch is
// left, for the next one.
const hubLinger = time.Second

// errWatchedThroughWrapper refuses clients whose Watcher is not clientv3's:
// the hub watches through the client's connection, so a wrapped Watcher
// (namespace.NewWatcher) would see other keys than the client's KV writes.
var errWatchedThroughWrapper = errors.New("etcd: the client's Watcher is wrapped (namespace.NewWatcher?) or the client has no connection; give the namespace as Config.Prefix instead")

// plainWatcher is the type of clientv3's own Watcher.
var plainWatcher = reflect.TypeOf(clientv3.NewWatchFromWatchClient(nil, nil))

// checkWatchable returns errWatchedThroughWrapper if the hub cannot watch
// the keys that client writes.
func checkWatchable(client *clientv3.Client) error {
	if client.ActiveConnection() == nil || reflect.TypeOf(client.Watcher) != plainWatcher {
		return errWatchedThroughWrapper
	}
	return nil
}

func newWatchHub(client *clientv3.Client) *watchHub {
	// The require-leader metadata makes the server end the stream when its
	// member loses the leader, and the hub then opens another (possibly to
	// another member), rather than waiting on a member that hears nothing.
	ctx, stop := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	return &watchHub{client: client, ctx: ctx, stop: stop, watches: make(map[int64]*keyWatch), wake: make(chan struct{}, 1)}
}

// add registers w (its key, from, noPut and owner set) and has its
// creation sent; false if the hub is closed.
func (h *watchHub) add(w *keyWatch) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return false
	}
	h.nextID++
	w.id, w.sent = h.nextID, false
	h.watches[w.id] = w
	h.queue = append(h.queue, hubRequest{id: w.id})
	if !h.running {
		h.running = true
		h.done.Add(1)
		go h.run()
	}
	h.signal()
	return true
}

// remove unregisters w, if registered, and cancels it on the server.
func (h *watchHub) remove(w *keyWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watches[w.id] != w {
		return
	}
	delete(h.watches, w.id)
	if w.sent {
		h.queue = append(h.queue, hubRequest{id: w.id, cancel: true})
	}
	h.signal()
}

// signal wakes the sending goroutine; h.mu is held.
func (h *watchHub) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// close stops the hub and waits for its goroutines. Watches still
// registered are not told.
func (h *watchHub) close() {
	h.mu.Lock()
	h.stop()
	h.mu.Unlock()
	h.done.Wait()
}

// run opens the stream, sends the hub's requests and opens it again when
// it fails, until no watch has been left for hubLinger or the hub closes.
func (h *watchHub) run() {
	defer h.done.Done()
	const firstBackoff = 10 * time.Millisecond
	backoff := firstBackoff
	for {
		began := time.Now()
		err := h.serve()
		if err == nil {
			return // idle or closed; running was reset
		}
		if errors.Is(err, errWatchedMeanwhile) {
			continue
		}
		if time.Since(began) > waitRetryMax {
			backoff = firstBackoff // the stream had served: this is a new failure
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-h.ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, waitRetryMax)
		if h.idleOrClosed() {
			return
		}
	}
}

// idleOrClosed reports, and records by clearing running, that the hub has
// no watch left or is closed.
func (h *watchHub) idleOrClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.watches) == 0 || h.ctx.Err() != nil {
		h.running = false
		return true
	}
	return false
}

// serve runs one stream: it (re)creates every registered watch, then sends
// queued requests as they come. It returns nil when the hub is idle or
// closed, or the stream's error.
func (h *watchHub) serve() error {
	if h.client.Ctx().Err() != nil {
		h.mu.Lock()
		h.running = false
		h.mu.Unlock()
		return nil // a closed client: the leases' renewals fail and report it
	}
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	stream, err := pb.NewWatchClient(h.client.ActiveConnection()).Watch(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}

	h.mu.Lock()
	h.queue, h.creating = h.queue[:0], nil
	for id, w := range h.watches {
		w.sent = false
		h.queue = append(h.queue, hubRequest{id: id})
	}
	h.mu.Unlock()

	recvErr := make(chan error, 1)
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		recvErr <- h.receive(stream)
	}()
	linger := time.NewTimer(hubLinger)
	defer linger.Stop()
	var batch []*pb.WatchRequest
	for {
		h.mu.Lock()
		batch = h.takeRequests(batch[:0])
		idle := len(h.watches) == 0
		h.mu.Unlock()
		for _, r := range batch {
			if err := stream.Send(r); err != nil {
				cancel()
				<-recvErr
				return err
			}
		}
		if len(batch) > 0 {
			continue
		}
		if idle {
			linger.Reset(hubLinger)
		} else {
			linger.Stop()
		}
		select {
		case <-h.wake:
			continue
		case err := <-recvErr:
			return err
		case <-h.ctx.Done():
		case <-linger.C:
		}
		if h.idle() {
			// The stream's receiver must be gone before another stream
			// starts: a late answer to it would take that stream's next
			// creation for its own.
			_ = stream.CloseSend()
			cancel()
			<-recvErr
			if h.idleOrClosed() {
				return nil
			}
			return errWatchedMeanwhile
		}
	}
}

// errWatchedMeanwhile is serve's return when a watch was added while it
// closed its idle stream: run opens another at once.
var errWatchedMeanwhile = errors.New("etcd: watch added while the idle stream closed")

// idle reports whether the hub has no watch left or is closed.
func (h *watchHub) idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watches) == 0 || h.ctx.Err() != nil
}

// takeRequests appends the queued requests to batch and empties the queue;
// creations of watches removed meanwhile are dropped. h.mu is held.
func (h *watchHub) takeRequests(batch []*pb.WatchRequest) []*pb.WatchRequest {
	for _, r := range h.queue {
		if r.cancel {
			batch = append(batch, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
				CancelRequest: &pb.WatchCancelRequest{WatchId: r.id}}})
			continue
		}
		w, ok := h.watches[r.id]
		if !ok || w.sent {
			continue
		}
		w.sent = true
		h.creating = append(h.creating, w)
		create := &pb.WatchCreateRequest{Key: []byte(w.key), StartRevision: w.from, WatchId: w.id}
		if w.end != "" {
			create.RangeEnd = []byte(w.end)
		}
		if w.noPut {
			create.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_NOPUT}
		}
		batch = append(batch, &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}})
	}
	clear(h.queue)
	h.queue = h.queue[:0]
	return batch
}

// receive dispatches the stream's responses until it fails.
func (h *watchHub) receive(stream pb.Watch_WatchClient) error {
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := h.dispatch(resp); err != nil {
			return err
		}
	}
}

// dispatch hands resp to its watch; an error ends the stream, and run opens
// another.
func (h *watchHub) dispatch(resp *pb.WatchResponse) (restart error) {
	h.mu.Lock()
	var w *keyWatch
	switch {
	case resp.Created:
		if len(h.creating) == 0 {
			h.mu.Unlock()
			return errors.New("etcd: watch: a creation answered that was not asked for")
		}
		w = h.creating[0]
		h.creating[0] = nil
		h.creating = h.creating[1:]
		if !resp.Canceled && resp.WatchId != w.id {
			h.mu.Unlock()
			return fmt.Errorf("etcd: watch: the server named watch %d %d (an etcd older than 3.4 ignores the watch IDs clients choose)", w.id, resp.WatchId)
		}
		if resp.Canceled && staleToken(resp.CancelReason) {
			// The stream's token expired (or auth changed): the owner
			// watches again, on a new stream, which authenticates anew.
			restart = fmt.Errorf("etcd: watch: %s", resp.CancelReason)
		}
		if h.watches[w.id] != w {
			w = nil // removed meanwhile
		} else if resp.Canceled {
			delete(h.watches, w.id) // refused
		} else if w.from == 0 {
			w.from = resp.Header.GetRevision() + 1
		}
	default:
		w = h.watches[resp.WatchId]
		if w == nil {
			break // removed, and cancelled meanwhile
		}
		if resp.Canceled {
			delete(h.watches, w.id)
		} else if n := len(resp.Events); n > 0 {
			w.from = resp.Events[n-1].Kv.ModRevision + 1
		}
	}
	h.mu.Unlock()
	if w != nil {
		w.owner.watchResponse(w, resp)
	}
	return restart
}

// staleToken reports whether a watch was refused for the stream's auth
// token, which only a new stream renews.
func staleToken(reason string) bool {
	return reason == rpctypes.ErrGRPCInvalidAuthToken.Error() || reason == rpctypes.ErrGRPCAuthOldRevision.Error()
}

// watchMailbox is a watchOwner that keeps a watch's responses for the
// goroutine that waits on them (a waiter, for its predecessor's deletion).
type watchMailbox struct {
	mu    sync.Mutex
	resps []*pb.WatchResponse
	ready chan struct{} // capacity 1: resps is not empty
}

func (m *watchMailbox) watchResponse(_ *keyWatch, resp *pb.WatchResponse) {
	m.mu.Lock()
	m.resps = append(m.resps, resp)
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// take returns the responses kept since the last take.
func (m *watchMailbox) take() []*pb.WatchResponse {
	m.mu.Lock()
	defer m.mu.Unlock()
	resps := m.resps
	m.resps = nil
	return resps
}

// refusals are the gRPC errors a server gives as a watch's cancel reason
// when it refuses it for its auth.
var refusals = []error{rpctypes.ErrGRPCPermissionDenied, rpctypes.ErrGRPCInvalidAuthToken,
	rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrGRPCUserEmpty, rpctypes.ErrGRPCAuthNotEnabled}

// watchCancelError is why the server cancelled a watch, as clientv3's
// WatchResponse.Err tells it: a refusal's reason (permission denied is
// rpctypes.ErrPermissionDenied), or ErrCompacted.
func watchCancelError(resp *pb.WatchResponse) error {
	switch {
	case resp.CancelReason != "":
		// etcd 3.5 and later give the whole gRPC error as the reason
		// ("rpc error: code = PermissionDenied desc = ..."), which
		// rpctypes.Error does not recognise inside another status.
		for _, known := range refusals {
			if resp.CancelReason == known.Error() {
				return rpctypes.Error(known)
			}
		}
		return rpctypes.Error(status.Error(codes.FailedPrecondition, resp.CancelReason))
	case resp.CompactRevision != 0:
		return rpctypes.ErrCompacted
	}
	return errors.New("watch cancelled by the server")
}
