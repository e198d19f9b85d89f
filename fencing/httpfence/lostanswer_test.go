//go:build unix

package httpfence_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/filefence"
	"github.com/fencelock/fencelock/fencing/httpfence"
	"github.com/fencelock/fencelock/internal/faultproxy"
)

// client is the client side of a storage service fenced by httpfence: a
// Store whose Do PUTs what its write function stages (the request body) to
// the service, with the token and an Idempotency-Key of its own, and reads
// the answer with httpfence.Result. Its http.Client is Go's, which sends a
// request with an Idempotency-Key again when the kept-alive connection it
// went on breaks before the answer: a client that retries.
type client struct {
	c   *http.Client
	url string
	g   *filefence.Guard // the service's store, read directly
}

func (s client) Do(ctx context.Context, res string, tok fencing.Token, write func(context.Context, *bytes.Buffer) error) error {
	body := &bytes.Buffer{}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.url+"/"+res, body)
	if err != nil {
		return err
	}
	if write == nil {
		req.Header.Set("X-Admit", "1")
	} else if err := write(ctx, body); err != nil {
		return err
	}
	req.ContentLength = int64(body.Len())
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body.Bytes())), nil }
	req.Body, _ = req.GetBody()
	req.Header.Set(httpfence.DefaultHeader, tok.String())
	req.Header.Set(httpfence.IdempotencyKeyHeader, rand.Text())
	resp, err := s.c.Do(req)
	if err == nil {
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return httpfence.Result(resp, err, res, tok)
}

func (s client) Admit(ctx context.Context, res string, tok fencing.Token) error {
	return s.Do(ctx, res, tok, nil)
}

func (s client) Put(_, v string) func(context.Context, *bytes.Buffer) error {
	return func(_ context.Context, b *bytes.Buffer) error {
		b.WriteString(v)
		return nil
	}
}

func (s client) Get(_ context.Context, res string) (string, error) {
	b, _, err := s.g.Read("/" + res)
	return string(b), err
}

// fileService is a storage service: PUT writes the body as the resource's
// new content through filefence (X-Admit: keeps it, raising the token).
func fileService(g *filefence.Guard) http.Handler {
	return httpfence.Handler(g, func(w http.ResponseWriter, r *http.Request, file io.Writer) {
		if r.Header.Get("X-Admit") != "" {
			old, _, err := g.Read(r.URL.Path) // under the flock: the current content
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_, _ = file.Write(old)
			return
		}
		_, _ = io.Copy(file, r.Body)
	})
}

// The suite's lost answer, over HTTP: the service lands the write, the
// proxy drops its answer, Go's transport sends the request again, and the
// service answers it with the first answer (Idempotency-Key) although a
// newer token was admitted meanwhile. The service counts the attempts, so
// that the test knows the client did retry.
func TestLostAnswer(t *testing.T) {
	var mu sync.Mutex
	services := map[*testing.T]*httptest.Server{}
	guards := map[*testing.T]*filefence.Guard{}
	attempts := map[string]int{}
	service := func(t *testing.T) (*httptest.Server, *filefence.Guard) {
		mu.Lock()
		defer mu.Unlock()
		if srv := services[t]; srv != nil {
			return srv, guards[t]
		}
		g, err := filefence.New(t.TempDir())
		require.NoError(t, err)
		files := fileService(g)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			attempts[r.Header.Get(httpfence.IdempotencyKeyHeader)]++
			mu.Unlock()
			files.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		services[t], guards[t] = srv, g
		return srv, g
	}
	fencetest.LostAnswer(t, fencetest.Harness[*bytes.Buffer]{
		Open: func(t *testing.T, _ fencing.Telemetry) fencetest.Store[*bytes.Buffer] {
			srv, g := service(t)
			return client{c: srv.Client(), url: srv.URL, g: g}
		},
		Remote: func(t *testing.T) (fencetest.Store[*bytes.Buffer], fencetest.Link) {
			srv, g := service(t)
			p, err := faultproxy.Start(srv.Listener.Addr().String())
			require.NoError(t, err)
			t.Cleanup(p.Close)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			return client{c: &http.Client{Transport: tr}, url: "http://" + p.Addr(), g: g}, p
		},
	})
	mu.Lock()
	defer mu.Unlock()
	retried := 0
	for _, n := range attempts {
		if n > 1 {
			retried++
		}
	}
	require.Equal(t, 1, retried, "one request was sent again (the write whose answer was lost): %v", attempts)
}
