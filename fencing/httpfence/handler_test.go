//go:build unix

package httpfence_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencing"
	"github.com/fencelock/fencelock/fencing/filefence"
	"github.com/fencelock/fencelock/fencing/httpfence"
)

// putFile is a fenced write handler over a filefence.Guard: the request body
// becomes the new content through the writer Do hands it.
func putFile(w http.ResponseWriter, r *http.Request, file io.Writer) {
	if _, err := io.Copy(file, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Header.Get("X-Fail") != "" {
		http.Error(w, "refused after writing", http.StatusUnprocessableEntity)
		return
	}
	fmt.Fprintf(w, "stored under token %s", httpfence.TokenFrom(r.Context()))
}

func TestHandlerGetsTheStoreHandle(t *testing.T) {
	g, err := filefence.New(t.TempDir())
	require.NoError(t, err)
	srv := httptest.NewServer(httpfence.Handler(g, putFile))
	defer srv.Close()
	c := srv.Client()
	content := func() (string, fencing.Token) {
		b, tok, err := g.Read("/doc")
		require.NoError(t, err)
		return string(b), tok
	}

	code, body, _ := do(t, c, "PUT", srv.URL+"/doc", "34", "v34")
	assert.Equal(t, 200, code)
	assert.Equal(t, "stored under token 34", body)

	code, _, h := do(t, c, "PUT", srv.URL+"/doc", "33", "v33")
	assert.Equal(t, http.StatusConflict, code)
	assert.Equal(t, "34", h.Get(httpfence.HighestHeader))

	req, _ := http.NewRequest("PUT", srv.URL+"/doc", strings.NewReader("v40, refused"))
	req.Header.Set("Fencing-Token", "40")
	req.Header.Set("X-Fail", "1")
	resp, err := c.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	v, tok := content()
	assert.Equal(t, "v34", v, "what the failed handler wrote through the handle is discarded")
	assert.Equal(t, fencing.Token(34), tok)

	code, _, _ = do(t, c, "GET", srv.URL+"/doc", "", "")
	assert.Equal(t, http.StatusMethodNotAllowed, code, "a Handler serves fenced writes only")
	code, _, _ = do(t, c, "PUT", srv.URL+"/doc", "", "v")
	assert.Equal(t, http.StatusPreconditionRequired, code)

	opt := httptest.NewServer(httpfence.Handler(g, putFile, httpfence.WithOptionalToken()))
	defer opt.Close()
	code, _, _ = do(t, opt.Client(), "PUT", opt.URL+"/doc", "", "unfenced")
	assert.Equal(t, http.StatusPreconditionRequired, code, "WithOptionalToken does not apply to a Handler")
	v, _ = content()
	assert.Equal(t, "v34", v)
}

// A storage service whose writes go through the guard's store handle: the
// file's new content is written only if the token is admitted.
func ExampleHandler() {
	dir, _ := os.MkdirTemp("", "httpfence-example-")
	defer os.RemoveAll(dir)
	guard, _ := filefence.New(dir) // or sqlfence.New(db): the handler then gets a *sql.Tx
	mux := http.NewServeMux()
	mux.Handle("PUT /reports/", httpfence.Handler(guard, func(w http.ResponseWriter, r *http.Request, file io.Writer) {
		_, _ = io.Copy(file, r.Body)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tok := range []fencing.Token{34, 33} { // lease.Token() in real code
		client := &http.Client{Transport: &httpfence.Transport{Token: func() fencing.Token { return tok }}}
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/reports/daily", strings.NewReader("by "+tok.String()))
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(tok, resp.StatusCode, httpfence.StaleError(resp, "/reports/daily", tok))
	}
	content, tok, _ := guard.Read("/reports/daily")
	fmt.Printf("%s (token %d)\n", content, tok)
	// Output:
	// 34 200 <nil>
	// 33 409 fencing: stale token 33 for "/reports/daily": token 34 was already admitted
	// by 34 (token 34)
}
