package integration

import (
	"crypto/rand"
	"encoding/base64"
	"net"
	"os/exec"
	"syscall"
	"time"

	"github.com/convergeplane/converge/internal/testkit/logbuf"
)

// startProviderProcess runs cmd, a provider's own process, until the test
// ends, and registers it through the API as the https endpoint name of
// kinds, signing with a fresh secret. cmd gets PROVIDER_SECRETS and
// PROVIDER_ADDR added to its Env. At the end it gets SIGTERM and must exit
// cleanly; its output is logged if the test failed. It returns the
// provider's address and its output so far.
func (s *server) startProviderProcess(name string, cmd *exec.Cmd, kinds []map[string]any) (string, *logbuf.Buffer) {
	t := s.t
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	must(t, ln.Close())
	output := &logbuf.Buffer{}
	cmd.Env = append(cmd.Env, "PROVIDER_SECRETS="+secret, "PROVIDER_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = output, output
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s exited with %v after SIGTERM", name, err)
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, output.String())
		}
	})
	waitFor(t, 15*time.Second, name+" to listen", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	url := "http://" + addr + "/"
	if code, body := s.call("POST", "/endpoints", map[string]any{"name": name, "kinds": kinds, "secret": secret,
		"target": map[string]any{"type": "https", "url": url},
		"health": map[string]any{"url": url, "interval_secs": 1, "healthy_threshold": 1, "unhealthy_threshold": 1}}); code != 201 {
		t.Fatalf("create endpoint %s = %d %s", name, code, body)
	}
	return addr, output
}
