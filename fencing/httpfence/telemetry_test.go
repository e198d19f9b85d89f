//go:build unix

package httpfence_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/fencetest"
	"github.com/fencelock/fencelock/fencing/filefence"
	"github.com/fencelock/fencelock/fencing/httpfence"
)

// Handler reports one decision per fenced request, by its answer, with a
// span around the guard's: the guard's own span (here filefence's) is its
// child. Requests that are not fenced are not counted.
func TestHandlerTelemetry(t *testing.T) {
	rec := fencetest.NewRecorder(t)
	g, err := filefence.New(t.TempDir(), filefence.WithTelemetry(rec.Telemetry(false)))
	require.NoError(t, err)
	srv := httptest.NewServer(httpfence.Handler(g, putFile, httpfence.WithTelemetry(rec.Telemetry(false))))
	defer srv.Close()
	c := srv.Client()

	for _, r := range []struct {
		token string
		fail  bool
		code  int
	}{
		{"5", false, http.StatusOK},
		{"4", false, http.StatusConflict},
		{"6", true, http.StatusUnprocessableEntity},
		{"", false, http.StatusPreconditionRequired},
		{"x", false, http.StatusBadRequest},
	} {
		req, err := http.NewRequest("PUT", srv.URL+"/doc", strings.NewReader("v"+r.token))
		require.NoError(t, err)
		if r.token != "" {
			req.Header.Set(httpfence.DefaultHeader, r.token)
		}
		if r.fail {
			req.Header.Set("X-Fail", "1")
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, r.code, resp.StatusCode, "token %q", r.token)
	}
	code, _, _ := do(t, c, "GET", srv.URL+"/doc", "", "")
	require.Equal(t, http.StatusMethodNotAllowed, code)

	rec.Expect(t, "http",
		fencetest.Observed{Decision: fencing.DecisionAccepted, Token: 5},
		fencetest.Observed{Decision: fencing.DecisionStale, Token: 4},
		fencetest.Observed{Decision: fencing.DecisionError, Token: 6},
		fencetest.Observed{Decision: fencing.DecisionError},
		fencetest.Observed{Decision: fencing.DecisionError})
	rec.Expect(t, "file",
		fencetest.Observed{Decision: fencing.DecisionAccepted, Token: 5},
		fencetest.Observed{Decision: fencing.DecisionStale, Token: 4},
		fencetest.Observed{Decision: fencing.DecisionError, Token: 6})
	for i, s := range rec.Spans("file") {
		assert.Equal(t, rec.Spans("http")[i].SpanContext(), s.Parent(), "the guard's span %d is the request's child", i)
	}
}

// Middleware over a Memory: the request's resource is an attribute when
// asked for, and a request WithOptionalToken lets through without a token
// is not counted.
func TestMiddlewareTelemetry(t *testing.T) {
	rec := fencetest.NewRecorder(t)
	srv := httptest.NewServer(httpfence.Middleware(fencing.NewMemory(), &docs{data: map[string]string{}},
		httpfence.WithOptionalToken(), httpfence.WithTelemetry(rec.Telemetry(true))))
	defer srv.Close()
	c := srv.Client()
	for _, r := range []struct {
		token, body string
		code        int
	}{{"3", "a", http.StatusOK}, {"", "unfenced", http.StatusOK}, {"2", "b", http.StatusConflict}, {"3", "bad", http.StatusUnprocessableEntity}} {
		code, _, _ := do(t, c, "PUT", srv.URL+"/doc", r.token, r.body)
		require.Equal(t, r.code, code, "token %q", r.token)
	}
	rec.Expect(t, "http",
		fencetest.Observed{Decision: fencing.DecisionAccepted, Token: 3, Resource: "/doc"},
		fencetest.Observed{Decision: fencing.DecisionStale, Token: 2, Resource: "/doc"},
		fencetest.Observed{Decision: fencing.DecisionError, Token: 3, Resource: "/doc"})
}
