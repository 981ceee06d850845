package integration

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
)

// startOps starts a server of role on its own database under ctx (which
// the test may cancel to end its duties), with cfg adjusted by tune.
func startOps(t *testing.T, ctx context.Context, role convergecli.Role, tune func(*convergecli.Config)) (*convergecli.Server, *engine) {
	t.Helper()
	e := newEngine(t, engineOpts{noDrain: true})
	key := func() []byte { b := make([]byte, 32); _, _ = rand.Read(b); return b }
	cfg := convergecli.Config{DatabaseURL: e.db.DSN, Role: role, ListenAddr: "127.0.0.1:0",
		HealthAddr: "127.0.0.1:0", ReaperRetryWindow: 30 * time.Second, MemberID: "ops-" + string(role), Dev: true,
		SecretKey: key(), CallbackKey: key()}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := convergecli.Start(ctx, cfg, e.log)
	must(t, err)
	t.Cleanup(func() { must(t, srv.Stop()) })
	return srv, e
}

// readyz is one answer of /readyz: the status code and, decoded, either
// body (ReadyStatus, or a problem on the API listener).
type readyz struct {
	code    int
	ctype   string
	status  string
	checks  map[string]string
	detail  string
	located map[string]string // problem errors: location -> message
}

func getReadyz(t *testing.T, url string) readyz {
	t.Helper()
	resp, err := http.Get(url) //nolint:noctx // a test's short request
	must(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	must(t, err)
	var body struct {
		Status any               `json:"status"`
		Checks map[string]string `json:"checks"`
		Detail string            `json:"detail"`
		Errors []struct {
			Location, Message string
		} `json:"errors"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatalf("GET %s = %d %q: %v", url, resp.StatusCode, b, err)
	}
	r := readyz{code: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), checks: body.Checks, detail: body.Detail,
		located: map[string]string{}}
	r.status, _ = body.Status.(string)
	for _, e := range body.Errors {
		r.located[e.Location] = e.Message
	}
	return r
}

// failing returns the checks r names as failed: from the body's checks, or
// a problem's errors.
func (r readyz) failing() []string {
	var out []string
	for name, v := range r.checks {
		if v != "ok" {
			out = append(out, name)
		}
	}
	for loc := range r.located {
		out = append(out, strings.TrimPrefix(loc, "checks."))
	}
	return out
}

func (r readyz) names(name string) bool {
	for _, n := range r.failing() {
		if n == name {
			return true
		}
	}
	return false
}

// TestReadyzAPI: on a ROLE=all server /readyz is 200 listing every check as
// ok; a database whose schema is ahead of or behind this binary's
// migrations makes it 503 naming "migrations"; once the duties stop (the
// server's context ended) it is 503 naming each of them. /livez stays 200.
func TestReadyzAPI(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, e := startOps(t, ctx, convergecli.RoleAll, nil)
	url := "http://" + srv.Addr() + "/readyz"

	r := getReadyz(t, url)
	duties := []string{"cluster", "kinds", "drainer", "reaper", "events", "dispatcher", "alerts", "listener"}
	if r.code != http.StatusOK || r.status != "ok" {
		t.Fatalf("readyz on a normal start = %d %+v", r.code, r)
	}
	for _, name := range append([]string{"database", "migrations"}, duties...) {
		if r.checks[name] != "ok" {
			t.Errorf("check %s = %q on a normal start, want ok", name, r.checks[name])
		}
	}

	wantMigrations := func(when string) {
		t.Helper()
		r := getReadyz(t, url)
		if r.code != http.StatusServiceUnavailable || !strings.Contains(r.detail, "migrations") || r.located["checks.migrations"] == "" ||
			!strings.HasPrefix(r.ctype, "application/problem+json") {
			t.Fatalf("readyz with the schema %s = %d %+v, want a 503 problem naming migrations", when, r.code, r)
		}
		if got := r.failing(); len(got) != 1 {
			t.Errorf("readyz with the schema %s names %v, want migrations alone", when, got)
		}
	}
	// Ahead: a newer release migrated the database.
	_, err := e.db.Pool.Exec(t.Context(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`)
	must(t, err)
	wantMigrations("ahead")
	_, err = e.db.Pool.Exec(t.Context(), `DELETE FROM goose_db_version WHERE version_id = 99999`)
	must(t, err)
	if r := getReadyz(t, url); r.code != http.StatusOK {
		t.Fatalf("readyz with the schema current again = %d %+v", r.code, r)
	}
	// Behind: the newest migration is not applied.
	_, err = e.db.Pool.Exec(t.Context(), `UPDATE goose_db_version SET is_applied = false
		WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`)
	must(t, err)
	wantMigrations("behind")
	_, err = e.db.Pool.Exec(t.Context(), `UPDATE goose_db_version SET is_applied = true
		WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`)
	must(t, err)

	cancel() // the duties run under Start's context: they all stop
	waitFor(t, 10*time.Second, "readyz to fail with the duties stopped", func() bool {
		return getReadyz(t, url).code == http.StatusServiceUnavailable
	})
	waitFor(t, 10*time.Second, "readyz to name every stopped duty", func() bool {
		r := getReadyz(t, url)
		for _, name := range duties {
			if r.located["checks."+name] != "stopped" {
				return false
			}
		}
		return !r.names("database") && !r.names("migrations")
	})
	resp, err := http.Get("http://" + srv.Addr() + "/livez") //nolint:noctx // a test's short request
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("livez with the duties stopped = %d, want 200", resp.StatusCode)
	}
}

// TestReadyzDispatchPod: a ROLE=dispatch pod answers /readyz on HEALTH_ADDR
// with a JSON ReadyStatus: 200 with its checks ok, 503 naming "migrations"
// when the schema is ahead, and 503 naming "dispatcher" once it stopped.
func TestReadyzDispatchPod(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, e := startOps(t, ctx, convergecli.RoleDispatch, nil)
	url := "http://" + srv.HealthAddr() + "/readyz"

	r := getReadyz(t, url)
	if r.code != http.StatusOK || r.status != "ok" || r.ctype != "application/json" {
		t.Fatalf("readyz on a normal start = %d %+v", r.code, r)
	}
	for _, name := range []string{"database", "migrations", "cluster", "kinds", "dispatcher", "alerts", "listener"} {
		if r.checks[name] != "ok" {
			t.Errorf("check %s = %q on a normal start, want ok", name, r.checks[name])
		}
	}
	if _, ok := r.checks["drainer"]; ok {
		t.Error("a dispatch pod reports a drainer it does not run")
	}

	_, err := e.db.Pool.Exec(t.Context(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`)
	must(t, err)
	if r := getReadyz(t, url); r.code != http.StatusServiceUnavailable || r.status != "unavailable" ||
		!strings.Contains(r.checks["migrations"], "99999") || len(r.failing()) != 1 {
		t.Fatalf("readyz with the schema ahead = %d %+v, want 503 naming migrations alone", r.code, r)
	}
	_, err = e.db.Pool.Exec(t.Context(), `DELETE FROM goose_db_version WHERE version_id = 99999`)
	must(t, err)

	cancel()
	waitFor(t, 10*time.Second, "readyz to name the stopped dispatcher", func() bool {
		r := getReadyz(t, url)
		return r.code == http.StatusServiceUnavailable && r.checks["dispatcher"] == "stopped"
	})
}

// TestReadyzOnHealthAddrForEveryRole: every role answers /livez and /readyz
// on HEALTH_ADDR, its own listener, so probes reach a pod whose LISTEN_ADDR
// is flooded: JSON, 200 with its checks.
func TestReadyzOnHealthAddrForEveryRole(t *testing.T) {
	t.Parallel()
	for _, role := range []convergecli.Role{convergecli.RoleAll, convergecli.RoleControl, convergecli.RoleDispatch} {
		t.Run(string(role), func(t *testing.T) {
			t.Parallel()
			srv, _ := startOps(t, t.Context(), role, nil)
			if srv.HealthAddr() == "" {
				t.Fatalf("ROLE=%s serves no HEALTH_ADDR", role)
			}
			r := getReadyz(t, "http://"+srv.HealthAddr()+"/readyz")
			if r.code != http.StatusOK || r.status != "ok" || r.ctype != "application/json" || r.checks["database"] != "ok" {
				t.Fatalf("ROLE=%s: HEALTH_ADDR /readyz = %d %+v", role, r.code, r)
			}
			resp, err := http.Get("http://" + srv.HealthAddr() + "/livez") //nolint:noctx // a test's short request
			must(t, err)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("ROLE=%s: HEALTH_ADDR /livez = %d", role, resp.StatusCode)
			}
		})
	}
}
