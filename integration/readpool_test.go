package integration

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// withConnParams adds libpq parameters to dsn, a URL or key=value DSN.
func withConnParams(t *testing.T, dsn string, params map[string]string) string {
	t.Helper()
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		must(t, err)
		q := u.Query()
		for k, v := range params {
			q.Set(k, v)
		}
		u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads a + literally
		return u.String()
	}
	for k, v := range params {
		dsn += " " + k + "='" + v + "'"
	}
	return dsn
}

// startWithReadURL starts a control server on its own database with
// DATABASE_READ_URL set to readURL(its DSN).
func startWithReadURL(t *testing.T, readURL func(primary string) string) *server {
	t.Helper()
	var primary string
	srv, e := startOps(t, t.Context(), convergecli.RoleControl, func(c *convergecli.Config) {
		primary = c.DatabaseURL
		c.DatabaseReadURL = readURL(primary)
	})
	return &server{t: t, db: e.db, base: "http://" + srv.Addr(), engine: e}
}

func (s *server) createWidget(name string) {
	s.t.Helper()
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "widget", "kind_version": 1, "name": name,
		"spec": map[string]any{"n": 1}}); code != 201 {
		s.t.Fatalf("create widget/%s = %d %s", name, code, body)
	}
}

// TestReadURLReadOnly points DATABASE_READ_URL at the same database in
// read-only transactions (what a replica allows): every read route answers
// through it, and writes still work, through DATABASE_URL.
func TestReadURLReadOnly(t *testing.T) {
	t.Parallel()
	s := startWithReadURL(t, func(primary string) string {
		return withConnParams(t, primary, map[string]string{"application_name": "converge-read",
			"options": "-c default_transaction_read_only=on"})
	})
	if code, body := s.call("PUT", "/kinds/widget/manifest", map[string]any{"kind": "widget", "kind_version": 1}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	s.createWidget("a")
	for _, path := range []string{"/resources", "/resources/widget/a", "/resources/widget/a/events", "/resources/widget/a/children",
		"/resources/widget/a/dependencies", "/resources/widget/a/graph", "/resources/widget/a/spec-history", "/resources/widget/a/ops",
		"/kinds", "/manifests", "/kinds/widget/versions/1/manifest", "/endpoints", "/providerconfigs", "/reactor-bindings",
		"/cluster-members"} {
		if code, body := s.call("GET", path, nil); code != 200 {
			t.Errorf("GET %s through the read-only read URL = %d %s", path, code, body)
		}
	}
	if n := s.count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'converge-read'`); n == 0 {
		t.Error("no connection of the read pool: the reads did not go through DATABASE_READ_URL")
	}
	// /metrics shows the read pool beside the primary.
	if m := s.scrape(); m[`pgxpool_acquire_count{pool="read"}`] < 1 || m[`pgxpool_acquire_count{pool="primary"}`] < 1 {
		t.Errorf("pgxpool_acquire_count read %v, primary %v: want both pools' acquires counted",
			m[`pgxpool_acquire_count{pool="read"}`], m[`pgxpool_acquire_count{pool="primary"}`])
	}
	s.createWidget("b") // writes still go to the primary
	if code, body := s.call("DELETE", "/resources/widget/a", nil); code/100 != 2 {
		t.Errorf("DELETE with a read-only read URL = %d %s", code, body)
	}
}

// TestReadURLServesTheReadRoutes points DATABASE_READ_URL at another
// database whose data differs: the read routes answer from it, while
// writes (and a write's own answer) go to DATABASE_URL.
func TestReadURLServesTheReadRoutes(t *testing.T) {
	t.Parallel()
	replica := pgtest.New(t)
	s := startWithReadURL(t, func(string) string { return replica.DSN })
	for _, db := range []*pgtest.Database{s.db, replica} {
		_, err := db.Pool.Exec(t.Context(), `INSERT INTO kind_manifest (kind, kind_version) VALUES ('widget', 1)`)
		must(t, err)
	}
	_, err := replica.Pool.Exec(t.Context(), `INSERT INTO resources (kind, kind_version, name, spec) VALUES ('widget', 1, 'replicated', '{}')`)
	must(t, err)

	s.createWidget("written") // through the primary: the write answers 201
	if n := s.count(`SELECT count(*) FROM resources WHERE name = 'written'`); n != 1 {
		t.Fatal("the write did not reach DATABASE_URL")
	}
	if code, body := s.call("GET", "/resources/widget/written", nil); code != 404 {
		t.Errorf("GET of a resource only on the primary = %d %s, want 404 from the read database", code, body)
	}
	if code, body := s.call("GET", "/resources/widget/replicated", nil); code != 200 {
		t.Errorf("GET of a resource only on the read database = %d %s, want 200", code, body)
	}
	code, body := s.call("GET", "/resources?kind=widget", nil)
	var list struct {
		Items []struct{ Name string } `json:"items"`
	}
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Items) != 1 || list.Items[0].Name != "replicated" {
		t.Errorf("list = %d %s, want the read database's one resource", code, body)
	}
}
