package integration

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	convergecli "github.com/convergeplane/converge/cmd/converge/cli"
	"github.com/convergeplane/converge/internal/embeddedpg"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// getWith sends a GET of the API with headers, and returns its status and
// body.
func (s *server) getWith(path string, headers map[string]string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), http.MethodGet, s.base+"/api/v1"+path, nil)
	must(s.t, err)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	must(s.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	must(s.t, err)
	return resp.StatusCode, data
}

func (s *server) createWidget(name string) {
	s.t.Helper()
	if code, body := s.call("POST", "/resources", map[string]any{"kind": "widget", "kind_version": 1, "name": name,
		"spec": map[string]any{"n": 1}}); code != 201 {
		s.t.Fatalf("create widget/%s = %d %s", name, code, body)
	}
}

// TestReadURLReadOnly points DATABASE_READ_URL at the same database in
// read-only transactions (part of what a replica allows; TestReadURLHotStandby
// runs on a real one where the machine has PostgreSQL's binaries): every
// read route answers through it, and writes still work, through
// DATABASE_URL.
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
	for _, path := range readRoutes {
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

// TestReadURLConsistentRead: a GET with Consistent-Read: true reads from
// DATABASE_URL although DATABASE_READ_URL is set (here a database whose data
// differs), one with false or none from the read URL, and a value that is
// not a boolean is refused; conctl's waits and watch send it, so they see a
// write made right before them.
func TestReadURLConsistentRead(t *testing.T) {
	t.Parallel()
	replica := pgtest.New(t)
	s := startWithReadURL(t, func(string) string { return replica.DSN })
	for _, db := range []*pgtest.Database{s.db, replica} {
		_, err := db.Pool.Exec(t.Context(), `INSERT INTO kind_manifest (kind, kind_version) VALUES ('widget', 1)`)
		must(t, err)
	}
	s.createWidget("written")
	for _, tc := range []struct {
		header string
		want   int
	}{{"", 404}, {"false", 404}, {"true", 200}, {"TRUE", 200}, {"yes", 400}} {
		h := map[string]string{}
		if tc.header != "" {
			h["Consistent-Read"] = tc.header
		}
		code, body := s.getWith("/resources/widget/written", h)
		if code != tc.want {
			t.Errorf("GET of a resource only on the primary with Consistent-Read %q = %d %s, want %d", tc.header, code, body, tc.want)
		}
		if code == 400 && !strings.Contains(string(body), "header.Consistent-Read") {
			t.Errorf("the 400 does not name header.Consistent-Read: %s", body)
		}
	}
	if code, body := s.getWith("/resources?kind=widget", map[string]string{"Consistent-Read": "true"}); code != 200 || !strings.Contains(string(body), `"written"`) {
		t.Errorf("consistent list = %d %s, want the primary's resource", code, body)
	}
	// The resource is on the primary only (and Ready, its kind having no
	// reactions): a wait reading the read URL would stop at its 404.
	code, out, errs := s.conctl("wait", "resource", "widget/written", "--for=ready", "--timeout", "30s")
	if code != 0 || !strings.Contains(out, "widget/written ready") {
		t.Errorf("conctl wait on a resource the read URL lacks: exit %d\nstdout: %s\nstderr: %s\nwant it ready, read from the primary", code, out, errs)
	}
	code, out, errs = s.conctl("watch", "resource", "widget/written", "--timeout", "30s")
	if code != 0 {
		t.Errorf("conctl watch of a resource the read URL lacks: exit %d\nstdout: %s\nstderr: %s\nwant it ready, read from the primary", code, out, errs)
	}
}

// startReplicated starts a PostgreSQL cluster of its own with a hot
// standby streaming from it, and returns the standby and the DSNs of
// database converge on each.
func startReplicated(t *testing.T) (standby *embeddedpg.Server, primaryDSN, standbyDSN string) {
	t.Helper()
	p, err := embeddedpg.Start(t.Context(), embeddedpg.Config{})
	if errors.Is(err, embeddedpg.ErrNoBinaries) {
		t.Skip("a hot standby needs PostgreSQL's server binaries on this machine:", err)
	}
	must(t, err)
	t.Cleanup(func() { must(t, p.Stop(context.Background())) })
	conn, err := pgx.Connect(t.Context(), p.DSN("postgres"))
	must(t, err)
	_, err = conn.Exec(t.Context(), `CREATE DATABASE converge`)
	must(t, conn.Close(t.Context()))
	must(t, err)
	sb, err := embeddedpg.Start(t.Context(), embeddedpg.Config{StandbyOf: p.DSN("postgres")})
	must(t, err)
	t.Cleanup(func() { must(t, sb.Stop(context.Background())) })
	return sb, p.DSN("converge"), sb.DSN("converge")
}

// readRoutes are GETs of every kind of object the API reads, for a server
// with kind widget and resource widget/a.
var readRoutes = []string{"/resources", "/resources/widget/a", "/resources/widget/a/events", "/resources/widget/a/children",
	"/resources/widget/a/dependencies", "/resources/widget/a/graph", "/resources/widget/a/spec-history", "/resources/widget/a/ops",
	"/kinds", "/manifests", "/kinds/widget/versions/1/manifest", "/endpoints", "/providerconfigs", "/reactor-bindings",
	"/cluster-members", "/deliveries"}

// TestReadURLHotStandby points DATABASE_READ_URL at a real hot standby (a
// streaming replica, which refuses every write and every read of an
// UNLOGGED table such as the work queue): every read route answers through
// it and writes go to the primary. Once the standby is down, reads fall
// back to the primary, counted in converge_api_read_fallbacks_total, and
// /readyz stays ready, saying read_database does not answer.
func TestReadURLHotStandby(t *testing.T) {
	t.Parallel()
	standby, primaryDSN, standbyDSN := startReplicated(t)
	srv, e := startOps(t, t.Context(), convergecli.RoleControl, func(c *convergecli.Config) {
		c.DatabaseURL = primaryDSN
		c.DatabaseReadURL = withConnParams(t, standbyDSN, map[string]string{"application_name": "converge-read"})
	})
	s := &server{t: t, db: e.db, base: "http://" + srv.Addr(), engine: e}
	if code, body := s.call("PUT", "/kinds/widget/manifest", map[string]any{"kind": "widget", "kind_version": 1}); code != 201 {
		t.Fatalf("manifest = %d %s", code, body)
	}
	s.createWidget("a")
	replica, err := pgxpool.New(t.Context(), standbyDSN)
	must(t, err)
	defer replica.Close()
	count := func(sql string) (n int) {
		must(t, replica.QueryRow(t.Context(), sql).Scan(&n))
		return n
	}
	waitFor(t, 30*time.Second, "the standby to replay widget/a", func() bool {
		return count(`SELECT count(*) FROM resources WHERE name = 'a'`) == 1
	})
	for _, path := range readRoutes {
		if code, body := s.getWith(path, nil); code != 200 {
			t.Errorf("GET %s through the hot standby = %d %s", path, code, body)
		}
	}
	if n := count(`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'converge-read'`); n == 0 {
		t.Error("no connection of the read pool on the standby: the reads did not go through DATABASE_READ_URL")
	}
	s.createWidget("b") // writes go to the primary
	if code, body := s.call("DELETE", "/resources/widget/a", nil); code/100 != 2 {
		t.Errorf("DELETE with a hot standby as the read URL = %d %s", code, body)
	}
	if r := getReadyz(t, s.base+"/readyz"); r.code != 200 || r.checks["read_database"] != "ok" {
		t.Errorf("/readyz with the standby up = %d %v, want 200 with read_database ok", r.code, r.checks)
	}
	const fallbacks = "converge_api_read_fallbacks_total"
	if n := s.scrape()[fallbacks]; n != 0 {
		t.Errorf("%s = %v with the standby up, want 0", fallbacks, n)
	}

	must(t, standby.Stop(t.Context()))
	for _, path := range []string{"/resources/widget/b", "/resources", "/kinds"} {
		if code, body := s.getWith(path, nil); code != 200 {
			t.Errorf("GET %s with the standby down = %d %s, want 200 from the primary", path, code, body)
		}
	}
	r := getReadyz(t, s.base+"/readyz")
	if r.code != 200 || r.checks["read_database"] == "ok" || r.checks["read_database"] == "" {
		t.Errorf("/readyz with the standby down = %d %v, want 200 naming read_database as not answering", r.code, r.checks)
	}
	if n := s.scrape()[fallbacks]; n < 3 {
		t.Errorf("%s = %v after three reads with the standby down, want at least 3", fallbacks, n)
	}
}
