// Package testnet gives tests loopback addresses for processes and
// listeners they start later.
package testnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// The draw stays below Linux's ephemeral range (net.ipv4.ip_local_port_range,
// 32768 and up by default).
const (
	lo = 20000
	n  = 12000
)

// FreeAddr returns a loopback address free now, for a process or listener
// started later. Its port is drawn below the kernel's ephemeral range: a
// port from ":0" comes from that range, and between this check and the bind
// any outbound connection (a database pool's, another process's) may take
// it as its source port. A chaos run lost a dispatcher to "bind: address
// already in use" that way.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(n)))
		if err != nil {
			continue // taken: draw again
		}
		addr := ln.Addr().String()
		if err := ln.Close(); err != nil {
			tb.Fatal(err)
		}
		return addr
	}
	tb.Fatalf("no free port in %d-%d after 100 draws", lo, lo+n-1)
	return ""
}
