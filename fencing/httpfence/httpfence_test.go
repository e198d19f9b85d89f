package httpfence_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/httpfence"
)

// docs is a tiny storage service: PUT stores the body under the path.
type docs struct {
	mu   sync.Mutex
	data map[string]string
}

func (d *docs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		fmt.Fprint(w, d.data[r.URL.Path])
	case http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		if string(b) == "bad" {
			http.Error(w, "refused", http.StatusUnprocessableEntity)
			return
		}
		d.data[r.URL.Path] = string(b)
		fmt.Fprintf(w, "stored under token %s", httpfence.TokenFrom(r.Context()))
	}
}

func do(t *testing.T, c *http.Client, method, url, token, body string) (int, string, http.Header) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Fencing-Token", token)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestMiddleware(t *testing.T) {
	guard := fencing.NewMemory()
	store := &docs{data: map[string]string{}}
	srv := httptest.NewServer(httpfence.Middleware(guard, store))
	defer srv.Close()
	c := srv.Client()

	code, body, _ := do(t, c, "PUT", srv.URL+"/doc", "34", "v34")
	assert.Equal(t, 200, code)
	assert.Equal(t, "stored under token 34", body)

	code, body, h := do(t, c, "PUT", srv.URL+"/doc", "33", "v33")
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, body, "fencing: stale token 33 for \"/doc\": token 34 was already admitted")
	assert.Equal(t, "34", h.Get(httpfence.HighestHeader))

	code, body, _ = do(t, c, "PUT", srv.URL+"/doc", "x1", "v")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "invalid token")
	code, _, _ = do(t, c, "PUT", srv.URL+"/doc", "", "v")
	assert.Equal(t, http.StatusPreconditionRequired, code)

	code, body, _ = do(t, c, "PUT", srv.URL+"/doc", "50", "bad")
	assert.Equal(t, http.StatusUnprocessableEntity, code, "the handler's own error is passed on")
	assert.Contains(t, body, "refused")
	assert.Equal(t, fencing.Token(34), guard.Highest("/doc"), "a failed write does not raise the token")

	code, body, _ = do(t, c, "GET", srv.URL+"/doc", "", "")
	assert.Equal(t, 200, code, "reads are not fenced")
	assert.Equal(t, "v34", body)
}

func TestMiddlewareOptions(t *testing.T) {
	guard := fencing.NewMemory()
	store := &docs{data: map[string]string{}}
	srv := httptest.NewServer(httpfence.Middleware(guard, store,
		httpfence.WithHeader("X-Token"), httpfence.WithOptionalToken(),
		httpfence.WithResource(func(*http.Request) string { return "all" })))
	defer srv.Close()
	code, _, _ := do(t, srv.Client(), "PUT", srv.URL+"/a", "", "unfenced")
	assert.Equal(t, 200, code)
	req, _ := http.NewRequest("PUT", srv.URL+"/b", strings.NewReader("v"))
	req.Header.Set("X-Token", "9")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, fencing.Token(9), guard.Highest("all"))
}

func TestTransport(t *testing.T) {
	guard := fencing.NewMemory()
	store := &docs{data: map[string]string{}}
	srv := httptest.NewServer(httpfence.Middleware(guard, store))
	defer srv.Close()
	var tok fencing.Token = 7
	client := &http.Client{Transport: &httpfence.Transport{Base: srv.Client().Transport, Token: func() fencing.Token { return tok }}}
	req, _ := http.NewRequest("PUT", srv.URL+"/doc", strings.NewReader("v7"))
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Empty(t, req.Header.Get("Fencing-Token"), "the caller's request is not modified")

	require.NoError(t, fencing.Admit(context.Background(), guard, "/doc", 8))
	resp, err = client.Post(srv.URL+"/doc", "text/plain", strings.NewReader("v7 again"))
	require.NoError(t, err)
	resp.Body.Close()
	err = httpfence.StaleError(resp, "/doc", tok)
	require.ErrorIs(t, err, fencing.ErrStaleToken)
	assert.Equal(t, `fencing: stale token 7 for "/doc": token 8 was already admitted`, err.Error())

	tok = 0
	_, err = client.Post(srv.URL+"/doc", "text/plain", strings.NewReader("x"))
	assert.ErrorIs(t, err, fencing.ErrInvalidToken, "no token: nothing is sent")
}

// A storage service fences its writes; a client sends its lease's token.
func Example() {
	store := &docs{data: map[string]string{}}
	srv := httptest.NewServer(httpfence.Middleware(fencing.NewMemory(), store))
	defer srv.Close()

	put := func(token fencing.Token, body string) {
		client := &http.Client{Transport: &httpfence.Transport{Token: func() fencing.Token { return token }}}
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/report", strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		first, _, _ := strings.Cut(string(msg), "\n")
		fmt.Println(resp.StatusCode, first)
	}
	put(34, "by the current holder") // lease.Token in real code
	put(33, "by a paused former holder")
	// Output:
	// 200 stored under token 34
	// 409 fencing: stale token 33 for "/report": token 34 was already admitted
}
