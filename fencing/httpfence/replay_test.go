package httpfence_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
)

// send PUTs body to url with token, and with an Idempotency-Key if key is
// not empty, and returns the answer's status, body and Result.
func send(t *testing.T, c *http.Client, url, token, key, body string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(httpfence.DefaultHeader, token)
	if key != "" {
		req.Header.Set(httpfence.IdempotencyKeyHeader, key)
	}
	tok, _ := fencing.ParseToken(token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", httpfence.Result(nil, err, "/doc", tok)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), httpfence.Result(resp, nil, "/doc", tok)
}

// counting is the docs service, counting the requests it runs.
type counting struct {
	docs
	runs atomic.Int64
}

func (c *counting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.runs.Add(1)
	c.docs.ServeHTTP(w, r)
}

// A write sent again with its Idempotency-Key gets the first answer, and
// runs once, even after a newer token was admitted; without the key, or
// with another token, it runs again; an attempt that did not land (stale,
// refused) is run again.
func TestIdempotencyKeyReplaysTheAnswer(t *testing.T) {
	guard := fencing.NewMemory()
	svc := &counting{docs: docs{data: map[string]string{}}}
	srv := httptest.NewServer(httpfence.Middleware(guard, svc))
	defer srv.Close()
	c := srv.Client()

	code, body, err := send(t, c, srv.URL+"/doc", "5", "k1", "v5")
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.NoError(t, fencing.Admit(context.Background(), guard, "/doc", 6)) // a newer holder
	code2, body2, err2 := send(t, c, srv.URL+"/doc", "5", "k1", "v5")
	require.NoError(t, err2, "the retry gets the first answer, not a 409")
	assert.Equal(t, code, code2)
	assert.Equal(t, body, body2)
	assert.Equal(t, int64(1), svc.runs.Load(), "the write ran once")

	code, _, err = send(t, c, srv.URL+"/doc", "5", "", "v5")
	assert.Equal(t, http.StatusConflict, code, "without a key, it runs again: stale now")
	assert.ErrorIs(t, err, fencing.ErrStaleToken)
	code, _, err = send(t, c, srv.URL+"/doc", "4", "k1", "v4")
	assert.Equal(t, http.StatusConflict, code, "the same key with another token is another write")
	assert.ErrorIs(t, err, fencing.ErrStaleToken)
	_, _, err = send(t, c, srv.URL+"/doc", "4", "k1", "v4")
	assert.ErrorIs(t, err, fencing.ErrStaleToken, "a stale attempt did not land: it is run again")

	code, _, err = send(t, c, srv.URL+"/doc", "7", "k2", "bad")
	require.Equal(t, http.StatusUnprocessableEntity, code)
	require.Error(t, err)
	assert.NotErrorIs(t, err, fencing.ErrStaleToken)
	assert.NotErrorIs(t, err, fencing.ErrOutcomeUnknown, "the handler refused it: it did not land")
	runs := svc.runs.Load()
	code, _, _ = send(t, c, srv.URL+"/doc", "7", "k2", "bad")
	assert.Equal(t, http.StatusUnprocessableEntity, code)
	assert.Equal(t, runs+1, svc.runs.Load(), "a refused attempt is run again")

	off := httptest.NewServer(httpfence.Middleware(guard, svc, httpfence.WithReplayWindow(0)))
	defer off.Close()
	require.NoError(t, errOf(send(t, off.Client(), off.URL+"/doc", "8", "k3", "v8")))
	require.NoError(t, fencing.Admit(context.Background(), guard, "/doc", 9))
	_, _, err = send(t, off.Client(), off.URL+"/doc", "8", "k3", "v8")
	assert.ErrorIs(t, err, fencing.ErrStaleToken, "WithReplayWindow(0): every attempt runs")
}

func errOf(_ int, _ string, err error) error { return err }

// An attempt that comes while the first one runs waits for its answer.
func TestIdempotencyKeyWaitsForTheRunningAttempt(t *testing.T) {
	guard := fencing.NewMemory()
	release := make(chan struct{})
	var arrived, runs atomic.Int64
	fenced := httpfence.Middleware(guard, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		<-release
		_, _ = io.WriteString(w, "stored")
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		fenced.ServeHTTP(w, r)
	}))
	defer srv.Close()
	answers := make(chan string, 2)
	attempt := func() {
		code, body, err := send(t, srv.Client(), srv.URL+"/doc", "5", "k", "v")
		if err != nil {
			body = err.Error()
		}
		answers <- http.StatusText(code) + " " + body
	}
	go attempt()
	waitUntil(t, answers, func() bool { return runs.Load() == 1 })
	go attempt() // while the first runs
	waitUntil(t, answers, func() bool { return arrived.Load() == 2 })
	close(release)
	assert.Equal(t, "OK stored", <-answers)
	assert.Equal(t, "OK stored", <-answers)
	assert.Equal(t, int64(1), runs.Load(), "the second attempt waited for the first's answer")
}

// waitUntil polls cond, failing if an answer comes first.
func waitUntil(t *testing.T, answers <-chan string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case a := <-answers:
			t.Fatalf("an attempt was answered too early: %s", a)
		case <-time.After(time.Millisecond):
		}
	}
}

// lossy is a guard whose store loses the answer of every write: the write
// runs (on a Memory) and Do says its outcome is unknown, as sqlfence does
// for a COMMIT whose answer is lost.
type lossy struct{ m *fencing.Memory }

func (l lossy) Do(ctx context.Context, res string, tok fencing.Token, write func(context.Context) error) error {
	if err := l.m.Do(ctx, res, tok, write); err != nil {
		return err
	}
	return &fencing.OutcomeUnknownError{Resource: res, Token: tok, Err: io.ErrUnexpectedEOF}
}

// A guard's unknown outcome is answered as such, never as "not
// committed", and a retry of it gets that answer rather than a 409.
func TestUnknownOutcomeIsAnsweredAsSuch(t *testing.T) {
	m := fencing.NewMemory()
	svc := &counting{docs: docs{data: map[string]string{}}}
	srv := httptest.NewServer(httpfence.Middleware(lossy{m}, svc))
	defer srv.Close()
	code, body, err := send(t, srv.Client(), srv.URL+"/doc", "5", "k", "v5")
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Contains(t, body, "may or may not have been committed")
	require.ErrorIs(t, err, fencing.ErrOutcomeUnknown)
	require.NoError(t, fencing.Admit(context.Background(), m, "/doc", 6))
	_, _, err = send(t, srv.Client(), srv.URL+"/doc", "5", "k", "v5")
	require.ErrorIs(t, err, fencing.ErrOutcomeUnknown, "the retry gets the unknown answer, not a 409")
	assert.Equal(t, int64(1), svc.runs.Load())
}

// Result reads every kind of answer: a transport error is unknown (the
// request may have been sent), a server error from something other than
// httpfence too, a refused write is an error that is neither stale nor
// unknown, and a request Transport would not send is ErrInvalidToken.
func TestResult(t *testing.T) {
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream went away", http.StatusBadGateway)
	}))
	defer gateway.Close()
	code, _, err := send(t, gateway.Client(), gateway.URL+"/doc", "5", "", "v")
	require.Equal(t, http.StatusBadGateway, code)
	assert.ErrorIs(t, err, fencing.ErrOutcomeUnknown, "a gateway's 502")

	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // the write itself, admitted by the middleware
	})
	srv := httptest.NewServer(httpfence.Middleware(fencing.NewMemory(), store))
	url := srv.URL
	srv.Close()
	_, _, err = send(t, http.DefaultClient, url+"/doc", "5", "", "v")
	var unknown *fencing.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown, "no answer")
	assert.Equal(t, fencing.OutcomeUnknownError{Resource: "/doc", Token: 5, Err: unknown.Err}, *unknown)

	client := &http.Client{Transport: &httpfence.Transport{Token: func() fencing.Token { return 0 }}}
	_, err = client.Post(url+"/doc", "text/plain", strings.NewReader("x"))
	err = httpfence.Result(nil, err, "/doc", 0)
	assert.ErrorIs(t, err, fencing.ErrInvalidToken)
	assert.False(t, errors.Is(err, fencing.ErrOutcomeUnknown), "nothing was sent")
}

// A client's fenced write: one Idempotency-Key per write, the same on
// every attempt (Go's transport sends such a request again when its kept-
// alive connection breaks before the answer), and Result to read the
// answer: nil, stale (the write did not land), or an unknown outcome (it
// may have: read it back).
func ExampleResult() {
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // the write itself, admitted by the middleware
	})
	srv := httptest.NewServer(httpfence.Middleware(fencing.NewMemory(), store))
	defer srv.Close()

	write := func(token fencing.Token, body string) error {
		client := &http.Client{Transport: &httpfence.Transport{Token: func() fencing.Token { return token }}}
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/report", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set(httpfence.IdempotencyKeyHeader, rand.Text())
		resp, err := client.Do(req)
		if err == nil {
			defer resp.Body.Close()
		}
		return httpfence.Result(resp, err, "/report", token)
	}
	for _, tok := range []fencing.Token{34, 33} { // lease.Token() in real code
		err := write(tok, "by "+tok.String())
		switch {
		case err == nil:
			fmt.Println(tok, "written")
		case errors.Is(err, fencing.ErrStaleToken):
			fmt.Println(tok, "not written:", err)
		case errors.Is(err, fencing.ErrOutcomeUnknown):
			fmt.Println(tok, "may have been written: read it back")
		}
	}
	// Output:
	// 34 written
	// 33 not written: fencing: stale token 33 for "/report": token 34 was already admitted
}
