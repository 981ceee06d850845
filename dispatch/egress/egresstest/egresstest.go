// Package egresstest helps test code that dials through the egress guard:
// a resolver that answers every name with an address of the test's choosing,
// the way a DNS-rebinding attacker's name server would.
package egresstest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
)

// Resolver returns a pure-Go resolver whose name server, reached over an
// in-memory connection, answers every A query with addr when it is IPv4 and
// every AAAA query with it when it is IPv6 (and every other query with no
// records: an invalid addr resolves no name), and a counter of the queries
// it answered. Use it as egress.ClientConfig.Resolver (or
// dispatch.Config.Resolver).
func Resolver(addr netip.Addr) (*net.Resolver, *atomic.Int32) {
	queries := new(atomic.Int32)
	return &net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go serve(server, addr, queries)
			return client, nil
		},
	}, queries
}

// serve answers length-prefixed (TCP framing) queries on c: a net.Pipe is
// not a PacketConn, so the resolver speaks DNS-over-TCP framing on it.
func serve(c net.Conn, addr netip.Addr, queries *atomic.Int32) {
	defer c.Close()
	for {
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		queries.Add(1)
		resp := answer(q, addr)
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

// answer builds a response to query q: the question echoed and, for an A
// (AAAA) question and an IPv4 (IPv6) addr, one record for addr.
func answer(q []byte, addr netip.Addr) []byte {
	end := 12
	for end < len(q) && q[end] != 0 { // QNAME labels
		end += int(q[end]) + 1
	}
	end += 5 // the root label, QTYPE, QCLASS
	if end > len(q) {
		return q[:min(len(q), 12)]
	}
	qtype := binary.BigEndian.Uint16(q[end-4 : end-2])
	var ancount uint16
	if (qtype == 1 && addr.Is4()) || (qtype == 28 && addr.Is6()) {
		ancount = 1
	}
	resp := append([]byte{}, q[0:2]...)           // ID
	resp = append(resp, 0x81, 0x80)               // a response, recursion desired and available, NOERROR
	resp = binary.BigEndian.AppendUint16(resp, 1) // QDCOUNT
	resp = binary.BigEndian.AppendUint16(resp, ancount)
	resp = append(resp, 0, 0, 0, 0) // NSCOUNT, ARCOUNT
	resp = append(resp, q[12:end]...)
	if ancount == 1 {
		a := addr.AsSlice()
		resp = append(resp, 0xc0, 0x0c)                            // name pointer
		resp = binary.BigEndian.AppendUint16(resp, qtype)          // A or AAAA
		resp = append(resp, 0, 1, 0, 0, 0, 0)                      // IN, TTL 0
		resp = binary.BigEndian.AppendUint16(resp, uint16(len(a))) // RDLENGTH
		resp = append(resp, a...)
	}
	return resp
}
