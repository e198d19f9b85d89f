// Package httpfence carries fencing tokens over HTTP: server middleware that
// admits each write through a fencing.Guard, and a client RoundTripper that
// sends the holder's token with every request.
//
// # Adopting it in a storage service
//
// Serve the requests that change state with Handler: the guard keeps the
// highest token per resource (the URL path by default) where the data
// lives, and the handler gets the guard's store handle, the transaction its
// statements commit in together with the token:
//
//	guard, _ := sqlfence.New(db) // or redisfence.New, etcdfence.New, filefence.New
//	mux.Handle("PUT /docs/", httpfence.Handler(guard, func(w http.ResponseWriter, r *http.Request, tx *sql.Tx) {
//		// write through tx: it commits only if the token is admitted
//	}))
//	mux.HandleFunc("GET /docs/", read) // reads need no token
//
// Middleware is the same for a plain fencing.Guard and a handler that gets
// no handle: fencing.Memory guarding state in the same process, or a
// StoreGuard's Gate, whose handler's effects are then not atomic with the
// check.
//
// A request to a fenced method (anything but GET, HEAD, OPTIONS, TRACE)
// must carry "Fencing-Token: <decimal>". The handler runs inside the
// guard's Do. Its response is buffered and sent after Do returns: a status
// of 400 or above counts as a failed write (the token is not recorded, and
// what the handler did through the handle is rolled back or discarded), and
// a write that fails to commit becomes a 500 instead of a success the client
// would wrongly trust.
//
// Answers the middleware gives itself (text/plain bodies):
//
//	400 Bad Request          malformed token
//	409 Conflict             stale token; header Fencing-Token-Highest names the winner
//	428 Precondition Required no token on a fenced request (unless WithOptionalToken)
//	500 Internal Server Error the write was not committed, or (Fencing-Outcome:
//	                          unknown) the guard cannot know whether it was
//
// Every answer the middleware gives a fenced request carries the header
// Fencing-Outcome with the guard's decision (see fencing.DecisionOf):
// accepted, stale, unknown (the guard lost the answer of its store: the
// write may have landed) or error (it did not land).
//
// # Lost answers and retries
//
// A client can lose the answer to a write that landed (a connection cut, a
// timeout) and send it again, as a retrying client does, and as Go's own
// transport does for a request with an Idempotency-Key header when the
// kept-alive connection it went on breaks. Sent again after a newer
// holder's write, it would be answered 409 for a write that landed. So a
// fenced request with an Idempotency-Key header (one value per write, the
// same on every attempt) is run once: an attempt with the key, resource
// and token of an earlier one gets the earlier answer if that write was
// accepted or its outcome unknown, waits for it if it is still running,
// and runs again if it did not land. The answers are kept in the handler's
// memory for the replay window (WithReplayWindow, default 2 minutes), so a
// retry that reaches another instance behind a load balancer, or comes
// after a restart, runs again and can be answered 409 for a write that
// landed: send a write's retries to the instance that served it, or do not
// retry writes (without an Idempotency-Key Go's transport does not), and
// a lost answer is an unknown outcome to the client (Result).
//
// On the client, Transport adds the header from a held lease (Token:
// lease.Token); Result says what an answer means (nil, a
// *fencing.StaleTokenError, or fencing.ErrOutcomeUnknown for a request
// whose answer never came or whose guard could not know), and StaleError
// turns a 409 back into a *fencing.StaleTokenError. httpfence imports no
// lock client.
package httpfence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/fencing"
)

// DefaultHeader is the request header carrying the token.
const DefaultHeader = "Fencing-Token"

// HighestHeader is the 409 response header naming the token that won.
const HighestHeader = "Fencing-Token-Highest"

// OutcomeHeader is the response header carrying the guard's decision on a
// fenced request (a fencing.Decision: accepted, stale, unknown, error).
const OutcomeHeader = "Fencing-Outcome"

// IdempotencyKeyHeader is the request header naming one write across the
// attempts to send it: a fenced request that carries it is run once within
// the replay window (see the package doc).
const IdempotencyKeyHeader = "Idempotency-Key"

// DefaultReplayWindow is how long Middleware and Handler keep the answers
// of fenced requests with an Idempotency-Key, unless WithReplayWindow says
// otherwise.
const DefaultReplayWindow = 2 * time.Minute

type config struct {
	header   string
	resource func(*http.Request) string
	fenced   func(*http.Request) bool
	optional bool
	window   time.Duration
	ins      *fencing.Instruments
}

// Option configures Middleware and Handler.
type Option func(*config)

// WithHeader sets the token header name (default DefaultHeader).
func WithHeader(name string) Option { return func(c *config) { c.header = name } }

// WithResource maps a request to the guarded resource (default: the URL path).
func WithResource(f func(*http.Request) string) Option { return func(c *config) { c.resource = f } }

// WithFenced chooses which requests are fenced (default: all but GET, HEAD,
// OPTIONS and TRACE).
func WithFenced(f func(*http.Request) bool) Option { return func(c *config) { c.fenced = f } }

// WithOptionalToken lets fenced requests without a token through unchecked
// (for a migration period); a token that is present is still checked.
// Middleware only: a Handler cannot run without its guard's store handle,
// so it keeps answering 428.
func WithOptionalToken() Option { return func(c *config) { c.optional = true } }

// WithReplayWindow sets how long Middleware and Handler keep the answer of
// a fenced request that carried an Idempotency-Key header and was accepted
// (or whose outcome is unknown), to give it to a retry of the same write
// (the same key, resource and token) instead of running the write again
// (default DefaultReplayWindow; 0 or less: no request is replayed). The
// cost is memory: each kept answer, its buffered body included, for the
// window.
func WithReplayWindow(d time.Duration) Option { return func(c *config) { c.window = d } }

// WithTelemetry makes Middleware and Handler report the decision on every
// fenced request, with its duration and a span (kind "http"; see
// fencing.Telemetry) around the guard's Do and the handler (default: the
// zero Telemetry, off). Accepted is a response sent with a status below
// 400; stale is the 409; error is everything else: the handler's own
// error status, a missing (428) or malformed (400) token, a failed commit.
// Requests that are not fenced, and those WithOptionalToken lets through
// without a token, are not counted, nor is a retry answered with an earlier
// attempt's answer (see WithReplayWindow). The guard's own telemetry, if it
// has any, records its Do separately (as a child span).
func WithTelemetry(t fencing.Telemetry) Option {
	return func(c *config) { c.ins = t.Instruments("http") }
}

type tokenKey struct{}

// TokenFrom returns the admitted token of the request whose context is ctx
// (zero outside a fenced request).
func TokenFrom(ctx context.Context) fencing.Token {
	t, _ := ctx.Value(tokenKey{}).(fencing.Token)
	return t
}

// Middleware returns a handler that admits every fenced request's token
// through guard and runs next inside the guard's Do; requests that are not
// fenced go to next directly. next gets no store handle: use Middleware
// with fencing.Memory, or with a StoreGuard's Gate when next's effects
// need no atomicity with the check, and Handler otherwise.
func Middleware(guard fencing.Guard, next http.Handler, opts ...Option) http.Handler {
	c := newConfig(opts)
	return &handler{next: next, c: c, replays: newReplays(c.window), do: func(r *http.Request, resource string, tok fencing.Token) (rec *recorder, err error) {
		err = guard.Do(r.Context(), resource, tok, func(ctx context.Context) error {
			rec = newRecorder()
			next.ServeHTTP(rec, r.WithContext(context.WithValue(ctx, tokenKey{}, tok)))
			return rec.err()
		})
		return rec, err
	}}
}

// Handler returns a handler that admits every fenced request's token
// through guard and runs write inside the guard's Do with its store handle
// s (a *sql.Tx, *redisfence.Batch, *etcdfence.Txn or io.Writer): what write
// does through s lands only if the token is admitted and write answers with
// a status below 400. A request that is not fenced (see WithFenced) is
// answered 405 Method Not Allowed, because there is no handle to give it:
// route reads to another handler. WithOptionalToken has no effect.
func Handler[S any](guard fencing.StoreGuard[S], write func(w http.ResponseWriter, r *http.Request, s S), opts ...Option) http.Handler {
	c := newConfig(opts)
	c.optional = false
	refuse := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, fmt.Sprintf("httpfence: %s is not a fenced write, and only fenced writes are served here", r.Method), http.StatusMethodNotAllowed)
	})
	return &handler{next: refuse, c: c, replays: newReplays(c.window), do: func(r *http.Request, resource string, tok fencing.Token) (rec *recorder, err error) {
		err = guard.Do(r.Context(), resource, tok, func(ctx context.Context, s S) error {
			rec = newRecorder()
			write(rec, r.WithContext(context.WithValue(ctx, tokenKey{}, tok)), s)
			return rec.err()
		})
		return rec, err
	}}
}

func newConfig(opts []Option) config {
	c := config{header: DefaultHeader, resource: func(r *http.Request) string { return r.URL.Path }, fenced: unsafeMethod,
		window: DefaultReplayWindow}
	for _, o := range opts {
		o(&c)
	}
	return c
}

func unsafeMethod(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

type handler struct {
	next    http.Handler // requests that are not fenced, and unfenced ones under WithOptionalToken
	c       config
	replays *replays // nil: none
	// do runs the fenced request inside the guard's Do, buffered.
	do func(r *http.Request, resource string, tok fencing.Token) (*recorder, error)
}

// handlerFailed carries a handler's own error response out of Do.
type handlerFailed struct{ rec *recorder }

func (f handlerFailed) Error() string {
	return fmt.Sprintf("httpfence: handler answered with status %d", f.rec.status)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.c.fenced(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	raw, present := r.Header[http.CanonicalHeaderKey(h.c.header)]
	if !present && h.c.optional {
		h.next.ServeHTTP(w, r)
		return
	}
	resource := h.c.resource(r)
	var tok fencing.Token
	var err error
	if present {
		tok, err = fencing.ParseToken(strings.Join(raw, ","))
	}
	if key := r.Header.Get(IdempotencyKeyHeader); key != "" && present && err == nil && h.replays != nil {
		h.once(w, r, replayKey{key: key, resource: resource, token: tok})
		return
	}
	h.observed(w, r, resource, tok, present, err)
}

// observed serves a fenced request (see serve) in its observation, and
// returns what serve returns.
func (h *handler) observed(w http.ResponseWriter, r *http.Request, resource string, tok fencing.Token, present bool, perr error) error {
	ctx, obs := h.c.ins.Start(r.Context(), resource, tok)
	if h.c.ins != nil {
		r = r.WithContext(ctx)
	}
	err := h.serve(w, r, resource, tok, present, perr)
	obs.End(err)
	return err
}

// once serves a fenced request carrying an Idempotency-Key: the first
// attempt of the write k runs, and a later one gets its answer if it was
// accepted or of unknown outcome, waits for it while it runs, and runs
// again if it did not land.
func (h *handler) once(w http.ResponseWriter, r *http.Request, k replayKey) {
	for {
		e, first := h.replays.begin(k)
		if first {
			var rec *recorder
			defer func() { h.replays.finish(k, e, rec) }() // a panic forgets the attempt
			answer := newRecorder()
			err := h.observed(answer, r, k.resource, k.token, true, nil)
			answer.flush(w)
			if err == nil || errors.Is(err, fencing.ErrOutcomeUnknown) {
				rec = answer
			}
			return
		}
		select {
		case <-e.done:
		case <-r.Context().Done():
			http.Error(w, "request cancelled while an earlier attempt of the same write (Idempotency-Key) ran", http.StatusServiceUnavailable)
			return
		}
		if e.answer != nil {
			e.answer.flush(w)
			return
		}
	}
}

// serve answers a fenced request, whose token is tok (or the error parsing
// it, or not present), and returns what failed: nil for a response below
// 400.
func (h *handler) serve(w http.ResponseWriter, r *http.Request, resource string, tok fencing.Token, present bool, err error) error {
	if !present {
		w.Header().Set(OutcomeHeader, string(fencing.DecisionError))
		http.Error(w, fmt.Sprintf("fencing: this request needs a %s header with the lock's fencing token", h.c.header), http.StatusPreconditionRequired)
		return errNoToken
	}
	if err != nil {
		w.Header().Set(OutcomeHeader, string(fencing.DecisionError))
		http.Error(w, fmt.Sprintf("%s header: %v", h.c.header, err), http.StatusBadRequest)
		return err
	}
	rec, err := h.do(r, resource, tok)
	w.Header().Set(OutcomeHeader, string(fencing.DecisionOf(err)))
	var stale *fencing.StaleTokenError
	var failed handlerFailed
	switch {
	case err == nil:
		rec.flush(w)
	case errors.As(err, &failed):
		failed.rec.flush(w)
	case errors.As(err, &stale):
		w.Header().Set(HighestHeader, stale.Highest.String())
		http.Error(w, fmt.Sprintf("%v\nthe lock was granted to a newer holder: this writer must stop (reacquire the lock before writing again)", err), http.StatusConflict)
	case errors.Is(err, fencing.ErrInvalidToken):
		http.Error(w, fmt.Sprintf("%s header: %v", h.c.header, err), http.StatusBadRequest)
	case errors.Is(err, fencing.ErrOutcomeUnknown):
		http.Error(w, "fencing: the write may or may not have been committed (read it back): "+err.Error(), http.StatusInternalServerError)
	case r.Context().Err() != nil:
		http.Error(w, "request cancelled: "+err.Error(), http.StatusServiceUnavailable)
	default:
		http.Error(w, "fencing: the write was not committed: "+err.Error(), http.StatusInternalServerError)
	}
	return err
}

// errNoToken is the error a fenced request without a token is observed
// with.
var errNoToken = errors.New("httpfence: no token on a fenced request")

// recorder buffers a response until the guard's Do has returned.
type recorder struct {
	header http.Header
	body   bytes.Buffer
	status int
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

// err makes an error status fail the guard's write.
func (r *recorder) err() error {
	if r.status >= 400 {
		return handlerFailed{r}
	}
	return nil
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// flush writes the buffered response to w. It does not change r: a kept
// answer is flushed again, by concurrent retries.
func (r *recorder) flush(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = slices.Clone(v)
	}
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = w.Write(r.body.Bytes())
}

// replayKey is one write: its Idempotency-Key, resource and token.
type replayKey struct {
	key, resource string
	token         fencing.Token
}

// replay is one write's first attempt: running until done is closed, then
// its answer if kept.
type replay struct {
	done    chan struct{}
	answer  *recorder // set before done is closed; nil: run the write again
	expires time.Time
}

// replays are the writes whose answers a handler keeps, for the window.
type replays struct {
	window  time.Duration
	mu      sync.Mutex
	entries map[replayKey]*replay
	kept    []replayKey // the kept entries, oldest first
}

func newReplays(window time.Duration) *replays {
	if window <= 0 {
		return nil
	}
	return &replays{window: window, entries: make(map[replayKey]*replay)}
}

// begin returns the entry of k and whether this attempt is the first,
// which runs the write; the answers kept longer than the window are
// forgotten first.
func (rs *replays) begin(k replayKey) (*replay, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	now := time.Now()
	for len(rs.kept) > 0 && !rs.entries[rs.kept[0]].expires.After(now) {
		delete(rs.entries, rs.kept[0])
		rs.kept = rs.kept[1:]
	}
	if e := rs.entries[k]; e != nil {
		return e, false
	}
	e := &replay{done: make(chan struct{})}
	rs.entries[k] = e
	return e, true
}

// finish ends the first attempt of k: its answer is kept for the window,
// or, for nil, forgotten, so that the next attempt runs the write.
func (rs *replays) finish(k replayKey, e *replay, answer *recorder) {
	rs.mu.Lock()
	if answer != nil {
		e.answer, e.expires = answer, time.Now().Add(rs.window)
		rs.kept = append(rs.kept, k)
	} else {
		delete(rs.entries, k)
	}
	rs.mu.Unlock()
	close(e.done)
}

// Transport is an http.RoundTripper that sets the token header on every
// request from Token, typically a held lease's method value (lease.Token).
type Transport struct {
	// Base sends the requests (nil: http.DefaultTransport).
	Base http.RoundTripper
	// Token returns the token to send. A zero token fails the request
	// instead of sending it unfenced.
	Token func() fencing.Token
	// Header is the header name (default DefaultHeader).
	Header string
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var tok fencing.Token
	if t.Token != nil {
		tok = t.Token()
	}
	if tok == 0 {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("httpfence: %w: no token to send with %s %s", fencing.ErrInvalidToken, req.Method, req.URL)
	}
	name := t.Header
	if name == "" {
		name = DefaultHeader
	}
	req = req.Clone(req.Context())
	req.Header.Set(name, tok.String())
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(req)
}

// StaleError returns a *fencing.StaleTokenError if resp is the middleware's
// 409 for a stale token, and nil otherwise. sent is the token of the request,
// resource the name to put in the error.
func StaleError(resp *http.Response, resource string, sent fencing.Token) error {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	highest, err := fencing.ParseToken(resp.Header.Get(HighestHeader))
	if err != nil {
		return nil
	}
	return &fencing.StaleTokenError{Resource: resource, Token: sent, Highest: highest}
}

// Result says what the answer to a fenced write means for the client that
// sent it with token sent for resource, given what the http.Client's Do
// (or a RoundTrip) returned: nil if the write was accepted; a
// *fencing.StaleTokenError if a newer token had been admitted (the write
// did not land); an *fencing.OutcomeUnknownError (errors.Is(err,
// fencing.ErrOutcomeUnknown)) if the write may have landed: no answer came
// (err is not nil: the request may have been sent, and a client that
// retries may have sent it more than once), the server's guard could not
// know (Fencing-Outcome: unknown), or a server error came from something
// other than httpfence (a gateway's 502, 503 or 504 after the request
// went through); any other error answer means the write did not land and
// is returned as an error naming the status. Transport's refusal to send a
// request without a token (fencing.ErrInvalidToken) is returned as it is.
// Result neither reads nor closes resp.Body.
func Result(resp *http.Response, err error, resource string, sent fencing.Token) error {
	if err != nil {
		if errors.Is(err, fencing.ErrInvalidToken) {
			return err
		}
		return &fencing.OutcomeUnknownError{Resource: resource, Token: sent, Err: err}
	}
	outcome := fencing.Decision(resp.Header.Get(OutcomeHeader))
	switch {
	case outcome == fencing.DecisionAccepted, outcome == "" && resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case outcome == fencing.DecisionUnknown:
		return &fencing.OutcomeUnknownError{Resource: resource, Token: sent,
			Err: fmt.Errorf("httpfence: the server answered %s: its guard could not know whether the write landed", resp.Status)}
	}
	if stale := StaleError(resp, resource, sent); stale != nil {
		return stale
	}
	if outcome == "" && resp.StatusCode >= 500 {
		return &fencing.OutcomeUnknownError{Resource: resource, Token: sent,
			Err: fmt.Errorf("httpfence: %s, not from httpfence (no %s header): the request may have reached the service", resp.Status, OutcomeHeader)}
	}
	return fmt.Errorf("httpfence: the write of token %d for %q was refused: %s", sent, resource, resp.Status)
}
