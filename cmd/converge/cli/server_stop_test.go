package cli

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

// TestStopBeforeServeClosesTheListener: a Stop that comes before the API's
// Serve goroutine has registered its listener must still close it, or that
// Serve accepts forever once it starts (fasthttp's Shutdown returns at once
// when it knows no listener yet).
func TestStopBeforeServeClosesTheListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{app: fiber.New(fiber.Config{DisableStartupMessage: true}), ln: ln}
	if err := s.stopAPI(context.Background()); err != nil {
		t.Fatalf("stopAPI before Serve = %v", err)
	}
	// fasthttp's Serve returns nil for a listener closed under it: only
	// whether it returns counts.
	served := make(chan struct{})
	go func() {
		_ = s.app.Listener(ln)
		close(served)
	}()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		_ = ln.Close() // let the goroutine end before the leak check
		<-served
		t.Fatal("Serve started after Stop was still accepting 5 s later: the listener was left open")
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the stopped server's address still accepts connections")
	}
}
