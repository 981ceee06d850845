// Package apitest serves the real API in tests: over a loopback listener,
// so a test exercises the whole HTTP stack (fasthttp's body limit included),
// stopped when the test ends.
package apitest

import (
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/api"
)

// Serve runs srv on a loopback listener until the test ends and returns its
// base URL. The test fails if the server does not shut down cleanly.
func Serve(t testing.TB, srv *api.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.App().Listener(ln) }()
	t.Cleanup(func() {
		// The tests' client (http.DefaultClient) may hold a connection it
		// dialed for a request that another connection served: it never sent
		// a request, and fasthttp waits for one until the shutdown times out,
		// however long that timeout is. The client closes its idle
		// connections first.
		http.DefaultClient.CloseIdleConnections()
		if err := srv.App().ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}
