package proxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// TestCut: a proxy copies both ways; a cut closes the live connection and
// refuses new ones until it ends, then the path works again.
func TestCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						_ = c.Close()
						return
					}
					_, _ = c.Write([]byte(line))
				}
			}()
		}
	}()
	p, err := Start(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func(c net.Conn) error {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && line != "ping\n" {
			t.Fatalf("echo = %q", line)
		}
		return err
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := echo(c); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Cut(300 * time.Millisecond)
	if !p.Cutting() {
		t.Error("Cutting() = false during a cut")
	}
	if err := echo(c); err == nil {
		t.Error("a live connection survived the cut")
	}
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		if echo(c2) == nil {
			t.Error("a new connection got through during the cut")
		}
		_ = c2.Close()
	}
	time.Sleep(400 * time.Millisecond)
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := echo(c3); err != nil {
		t.Errorf("after the cut: %v", err)
	}
}
