package server

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestHealthReportsFailure: /health answers 200 while Options.Health
// returns nil and 503 with the error once it fails.
func TestHealthReportsFailure(t *testing.T) {
	var failed atomic.Bool
	ts := newTestServer(t, serverOpts{health: func() error {
		if failed.Load() {
			return errors.New("rank 1 timed out")
		}
		return nil
	}})
	check := func(wantCode int, wantBody string) {
		t.Helper()
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantCode || !strings.Contains(string(body), wantBody) {
			t.Fatalf("/health = %d %s, want %d with %q", resp.StatusCode, body, wantCode, wantBody)
		}
	}
	check(http.StatusOK, "")
	failed.Store(true)
	check(http.StatusServiceUnavailable, `"code":"unhealthy"`)
	check(http.StatusServiceUnavailable, "rank 1 timed out")
}
