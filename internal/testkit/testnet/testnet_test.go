package testnet

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeAddrIsBindableAndBelowTheEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		addr := FreeAddr(t)
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			t.Fatal(err)
		}
		if host != "127.0.0.1" || p < lo || p >= lo+n {
			t.Fatalf("FreeAddr = %s, want 127.0.0.1 with a port in [%d, %d)", addr, lo, lo+n)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("FreeAddr's %s cannot be bound: %v", addr, err)
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
		seen[addr] = true
	}
	if len(seen) < 2 {
		t.Fatalf("20 draws gave %d distinct addresses; the draw is not random", len(seen))
	}
}

func TestFreeAddrSkipsATakenPort(t *testing.T) {
	// A port something listens on is never returned.
	held := FreeAddr(t)
	ln, err := net.Listen("tcp", held)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range 200 {
		if addr := FreeAddr(t); addr == held {
			t.Fatalf("FreeAddr returned %s, which is listening", held)
		}
	}
}
