package integration

import (
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
)

// TestDevModeEndpointsReachLoopbackOnly registers endpoints through the API
// of a dev-mode server: plain-http loopback is accepted, and the metadata
// service, private and unique-local networks, metadata.google.internal and
// 0.0.0.0 are refused with a 422 problem naming body.target.url.
func TestDevModeEndpointsReachLoopbackOnly(t *testing.T) {
	t.Parallel()
	e := newEngine(t, engineOpts{noDrain: true})
	key := func() []byte { b := make([]byte, 32); _, _ = rand.Read(b); return b }
	cfg := convergecli.Config{DatabaseURL: e.db.DSN, Role: convergecli.RoleAll, ListenAddr: "127.0.0.1:0",
		HealthAddr: "127.0.0.1:0", ReaperRetryWindow: 30 * time.Second, MemberID: "devmode", Dev: true,
		SecretKey: key(), CallbackKey: key()}
	srv, err := convergecli.Start(t.Context(), cfg, e.log)
	must(t, err)
	t.Cleanup(func() { must(t, srv.Stop()) })
	s := &server{t: t, db: e.db, base: "http://" + srv.Addr(), engine: e}

	endpoint := func(name, url string) map[string]any {
		return map[string]any{"name": name, "kinds": []map[string]any{{"kind": "echo", "kind_version": 1}},
			"target": map[string]any{"type": "https", "url": url}}
	}
	for i, url := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.5/",
		"http://192.168.1.1/",
		"http://[fd00:ec2::254]/",
		"http://metadata.google.internal/computeMetadata/v1/",
		"http://0.0.0.0:8080/",
	} {
		code, body := s.call("POST", "/endpoints", endpoint("bad"+string(rune('a'+i)), url))
		var p struct {
			Status int `json:"status"`
			Errors []struct {
				Location string `json:"location"`
			} `json:"errors"`
		}
		if err := json.Unmarshal(body, &p); err != nil || code != 422 || len(p.Errors) != 1 || p.Errors[0].Location != "body.target.url" {
			t.Errorf("register %s in dev mode = %d %s; want a 422 problem naming body.target.url", url, code, body)
		}
	}
	if code, body := s.call("POST", "/endpoints", endpoint("local", "http://127.0.0.1:9/hook")); code != 201 {
		t.Errorf("register a plain-http loopback endpoint in dev mode = %d %s, want 201", code, body)
	}
}
