package api_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/store"
)

// auditTrail pages through GET /audit with q (limit=1000 unless q says)
// and returns every entry, newest first.
func (b *testBundle) auditTrail(t *testing.T, q url.Values, hdr ...string) []store.AuditEntry {
	t.Helper()
	if !q.Has("limit") {
		q.Set("limit", "1000")
	}
	var out []store.AuditEntry
	for {
		var page api.AuditList
		b.do(http.MethodGet, "/api/v1/audit?"+q.Encode(), nil, hdr...).want(t, http.StatusOK).decode(t, &page)
		out = append(out, page.Items...)
		if page.NextCursor == "" {
			return out
		}
		q.Set("cursor", page.NextCursor)
	}
}

// TestAudit is the audit trail over HTTP: every request that is not a read
// is recorded with its caller, route, object, versions, request id, status
// and outcome, refusals and dry runs included; reads are not; the author of
// a write appears on the resource's events and spec revisions; GET /audit
// filters and pages.
func TestAudit(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{ReadTokens: []string{"reader-token"}, AdminTokens: []string{"admin-token"}})
	const (
		admin = "Authorization: Bearer admin-token"
		read  = "Authorization: Bearer reader-token"
	)
	all := url.Values{"namespace": {"*"}}
	newest := func(t *testing.T) store.AuditEntry {
		t.Helper()
		es := b.auditTrail(t, url.Values{"namespace": {"*"}, "limit": {"1"}}, admin)
		if len(es) == 0 {
			t.Fatal("the audit trail is empty")
		}
		return es[0]
	}
	// one asserts the request added exactly one entry, and returns it.
	one := func(t *testing.T, before int) store.AuditEntry {
		t.Helper()
		if n := b.count(`SELECT count(*) FROM audit_log`); n != before+1 {
			t.Fatalf("%d audit entries after the request, want %d", n, before+1)
		}
		return newest(t)
	}
	entries := func() int { return b.count(`SELECT count(*) FROM audit_log`) }
	apply := func(image string, hdr ...string) response {
		return b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"`+image+`"}}`, hdr...)
	}
	b.do(http.MethodPut, "/api/v1/kinds/widget/manifest", widgetKind, admin).wantApply(t, "created")
	var v1, v2 int64

	t.Run("an apply names its caller, route, object, new version and request id", func(t *testing.T) {
		n := entries()
		r := apply("a:1", admin, "X-Request-Id: apply-1")
		r.wantApply(t, "created")
		v1 = r.version(t)
		if got := r.header.Get("X-Request-Id"); got != "apply-1" {
			t.Fatalf("X-Request-Id %q, want the client's echoed", got)
		}
		e := one(t, n)
		if e.Subject != "token:admin-0" || e.TokenName != "admin-0" || e.Method != "POST" || e.Route != "/api/v1/resources" ||
			e.Path != "/api/v1/resources" || e.Namespace != "default" || e.ObjectKind != "widget" || e.ObjectName != "w" ||
			e.VersionBefore != nil || e.VersionAfter == nil || *e.VersionAfter != v1 || e.RequestID != "apply-1" ||
			e.Status != http.StatusCreated || e.Outcome != "ok" || e.DryRun || e.RemoteAddr == "" || time.Since(e.At) > time.Minute {
			t.Fatalf("entry %+v", e)
		}
	})
	t.Run("an update records the versions before and after", func(t *testing.T) {
		n := entries()
		r := apply("a:2", admin)
		r.wantApply(t, "configured")
		v2 = r.version(t)
		e := one(t, n)
		if e.VersionBefore == nil || *e.VersionBefore != v1 || e.VersionAfter == nil || *e.VersionAfter != v2 || e.Status != http.StatusOK {
			t.Fatalf("entry %+v, want v%d -> v%d", e, v1, v2)
		}
		if len(e.RequestID) < 16 {
			t.Fatalf("request id %q: the server should make one when the client sends none", e.RequestID)
		}
	})
	t.Run("a dry run is recorded as one, with no version after", func(t *testing.T) {
		n := entries()
		b.do(http.MethodPost, "/api/v1/resources?dry_run=true", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a:3"}}`, admin).
			wantApply(t, "configured")
		e := one(t, n)
		if !e.DryRun || e.VersionBefore == nil || *e.VersionBefore != v2 || e.VersionAfter != nil || e.Outcome != "ok" {
			t.Fatalf("entry %+v", e)
		}
		if v := b.do(http.MethodGet, "/api/v1/resources/widget/w", nil, admin).want(t, http.StatusOK).version(t); v != v2 {
			t.Fatalf("the dry run moved the resource to v%d", v)
		}
	})
	t.Run("a 422 is recorded as an error", func(t *testing.T) {
		n := entries()
		b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a","replicas":99}}`, admin).
			want(t, http.StatusBadRequest)
		b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"BAD NAME","spec":{"image":"a"}}`, admin).
			want(t, http.StatusUnprocessableEntity)
		e := one(t, n+1)
		if e.Status != http.StatusUnprocessableEntity || e.Outcome != "error" || e.ObjectKind != "widget" || e.ObjectName != "BAD NAME" ||
			e.VersionAfter != nil || e.Subject != "token:admin-0" {
			t.Fatalf("entry %+v", e)
		}
	})
	t.Run("refusals are recorded, without the token", func(t *testing.T) {
		n := entries()
		apply("a:9", "Authorization: Bearer guess-token", "X-Request-Id: bad token!").want(t, http.StatusUnauthorized)
		e := one(t, n)
		if e.Subject != "unauthenticated" || e.Status != http.StatusUnauthorized || e.Outcome != "refused" || e.TokenName != "" ||
			e.ObjectKind != "widget" && e.ObjectKind != "resources" {
			t.Fatalf("entry %+v", e)
		}
		if e.RequestID == "bad token!" || e.RequestID == "" {
			t.Fatalf("request id %q: an id unfit to log must be replaced", e.RequestID)
		}
		if n := b.count(`SELECT count(*) FROM audit_log WHERE row_to_json(audit_log)::text LIKE '%guess-token%'`); n != 0 {
			t.Fatal("the audit trail holds the refused token")
		}
		b.do(http.MethodDelete, "/api/v1/resources/widget/w", nil, read).want(t, http.StatusForbidden)
		e = one(t, n+1)
		if e.Status != http.StatusForbidden || e.Outcome != "refused" || e.ObjectKind != "widget" || e.ObjectName != "w" {
			t.Fatalf("entry %+v", e)
		}
	})
	t.Run("reads are not recorded", func(t *testing.T) {
		n := entries()
		b.do(http.MethodGet, "/api/v1/resources/widget/w", nil, admin).want(t, http.StatusOK)
		b.do(http.MethodHead, "/api/v1/resources/widget/w", nil, admin).want(t, http.StatusOK)
		b.do(http.MethodGet, "/api/v1/resources/widget/w", nil).want(t, http.StatusUnauthorized)
		if m := entries(); m != n {
			t.Fatalf("%d reads recorded", m-n)
		}
	})
	t.Run("events and spec revisions name their author", func(t *testing.T) {
		var evs struct{ Items []store.Event }
		b.do(http.MethodGet, "/api/v1/resources/widget/w/events", nil, admin).want(t, http.StatusOK).decode(t, &evs)
		applied := 0
		for _, e := range evs.Items {
			if e.Type == "applied" {
				applied++
				if e.Actor != "token:admin-0" {
					t.Fatalf("applied event %+v, want actor token:admin-0", e)
				}
			}
		}
		if applied != 2 {
			t.Fatalf("%d applied events, want 2 (the dry run's rolled back)", applied)
		}
		var h struct{ Items []store.SpecRevision }
		b.do(http.MethodGet, "/api/v1/resources/widget/w/spec-history", nil, admin).want(t, http.StatusOK).decode(t, &h)
		if len(h.Items) != 2 || h.Items[0].Author != "token:admin-0" || h.Items[1].Author != "token:admin-0" {
			t.Fatalf("spec history %+v, want two revisions by token:admin-0", h.Items)
		}
		// A row no request wrote (the engine's) has no actor: system.
		b.exec(`INSERT INTO resource_events (resource_id, type, message) SELECT id, 'succeeded', 'engine' FROM resources WHERE name = 'w'`)
		b.do(http.MethodGet, "/api/v1/resources/widget/w/events?limit=1", nil, admin).want(t, http.StatusOK).decode(t, &evs)
		if len(evs.Items) != 1 || evs.Items[0].Actor != "system" {
			t.Fatalf("events %+v, want the engine's by system", evs.Items)
		}
	})
	t.Run("a rollback records the versions before and after", func(t *testing.T) {
		n := entries()
		r := b.do(http.MethodPost, "/api/v1/resources/widget/w/rollback", `{"revision":1}`, admin).want(t, http.StatusOK)
		var back struct {
			ResourceVersion int64 `json:"resource_version"`
		}
		r.decode(t, &back)
		e := one(t, n)
		if e.Route != "/api/v1/resources/{kind}/{name}/rollback" || e.ObjectKind != "widget" || e.ObjectName != "w" ||
			e.VersionBefore == nil || *e.VersionBefore != v2 || e.VersionAfter == nil || *e.VersionAfter != back.ResourceVersion || back.ResourceVersion <= v2 {
			t.Fatalf("entry %+v, want v%d -> v%d", e, v2, back.ResourceVersion)
		}
		v2 = back.ResourceVersion
	})
	t.Run("a delete records the version it marked", func(t *testing.T) {
		n := entries()
		r := b.do(http.MethodDelete, "/api/v1/resources/widget/w", nil, admin).want(t, http.StatusAccepted)
		e := one(t, n)
		after := r.version(t)
		if e.Method != "DELETE" || e.Route != "/api/v1/resources/{kind}/{name}" || e.ObjectKind != "widget" || e.ObjectName != "w" ||
			e.VersionBefore == nil || *e.VersionBefore != v2 || e.VersionAfter == nil || *e.VersionAfter != after || e.Status != http.StatusAccepted {
			t.Fatalf("entry %+v, want v%d -> v%d", e, v2, after)
		}
		var evs struct{ Items []store.Event }
		b.do(http.MethodGet, "/api/v1/resources/widget/w/events?limit=1", nil, admin).want(t, http.StatusOK).decode(t, &evs)
		if len(evs.Items) != 1 || evs.Items[0].Type != "deletion_requested" || evs.Items[0].Actor != "token:admin-0" {
			t.Fatalf("events %+v, want deletion_requested by token:admin-0", evs.Items)
		}
	})
	t.Run("filters", func(t *testing.T) {
		total := entries()
		if es := b.auditTrail(t, all, admin); len(es) != total {
			t.Fatalf("namespace=* lists %d of %d", len(es), total)
		}
		if es := b.auditTrail(t, url.Values{}, admin); len(es) != total {
			t.Fatalf("the default namespace lists %d of %d", len(es), total)
		}
		if es := b.auditTrail(t, url.Values{"namespace": {"team-a"}}, admin); len(es) != 0 {
			t.Fatalf("namespace team-a lists %d", len(es))
		}
		cases := []struct {
			q    url.Values
			want func(store.AuditEntry) bool
		}{
			{url.Values{"kind": {"widget"}, "name": {"w"}}, func(e store.AuditEntry) bool { return e.ObjectKind == "widget" && e.ObjectName == "w" }},
			{url.Values{"kind": {"kinds"}}, func(e store.AuditEntry) bool { return e.ObjectKind == "kinds" && e.ObjectName == "widget" }},
			{url.Values{"name": {"BAD NAME"}}, func(e store.AuditEntry) bool { return e.ObjectName == "BAD NAME" }},
			{url.Values{"subject": {"unauthenticated"}}, func(e store.AuditEntry) bool { return e.Subject == "unauthenticated" }},
			{url.Values{"outcome": {"refused"}}, func(e store.AuditEntry) bool { return e.Outcome == "refused" }},
			{url.Values{"outcome": {"error"}}, func(e store.AuditEntry) bool { return e.Outcome == "error" }},
		}
		everything := b.auditTrail(t, all, admin)
		for _, c := range cases {
			c.q.Set("namespace", "*")
			got := b.auditTrail(t, c.q, admin)
			want := 0
			for _, e := range everything {
				if c.want(e) {
					want++
				}
			}
			if len(got) != want || want == 0 {
				t.Fatalf("%s: %d entries, want %d (and some)", c.q.Encode(), len(got), want)
			}
			for _, e := range got {
				if !c.want(e) {
					t.Fatalf("%s: entry %+v", c.q.Encode(), e)
				}
			}
		}
		mid := everything[len(everything)/2]
		since := url.Values{"namespace": {"*"}, "since": {mid.At.Format(time.RFC3339Nano)}}
		for _, e := range b.auditTrail(t, since, admin) {
			if e.At.Before(mid.At) {
				t.Fatalf("since %s listed %+v", mid.At, e)
			}
		}
		until := url.Values{"namespace": {"*"}, "until": {mid.At.Format(time.RFC3339Nano)}}
		for _, e := range b.auditTrail(t, until, admin) {
			if !e.At.Before(mid.At) {
				t.Fatalf("until %s listed %+v", mid.At, e)
			}
		}
		b.do(http.MethodGet, "/api/v1/audit?outcome=maybe", nil, admin).wantProblem(t, http.StatusUnprocessableEntity, "query.outcome")
		b.do(http.MethodGet, "/api/v1/audit?cursor=nope", nil, admin).wantProblem(t, http.StatusBadRequest, "query.cursor")
		b.do(http.MethodGet, "/api/v1/audit", nil).want(t, http.StatusUnauthorized)
	})
	t.Run("pages", func(t *testing.T) {
		everything := b.auditTrail(t, url.Values{"namespace": {"*"}}, admin)
		paged := b.auditTrail(t, url.Values{"namespace": {"*"}, "limit": {"2"}}, admin)
		if fmt.Sprint(ids(paged)) != fmt.Sprint(ids(everything)) {
			t.Fatalf("pages of 2 list %v, one page %v", ids(paged), ids(everything))
		}
		for i := 1; i < len(paged); i++ {
			if paged[i].ID >= paged[i-1].ID {
				t.Fatalf("not newest first: %v", ids(paged))
			}
		}
	})
	t.Run("no route changes the trail", func(t *testing.T) {
		n := entries()
		for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost} {
			if r := b.do(m, "/api/v1/audit", `{}`, admin); r.status < 400 || strings.Contains(string(r.body), `"items"`) {
				t.Fatalf("%s /api/v1/audit answered %d", m, r.status)
			}
		}
		if m := entries(); m != n+4 {
			t.Fatalf("%d entries after 4 refused writes to the trail, want %d (each recorded, none removed)", m, n+4)
		}
	})
}

// TestAuditWriteFailure: an audit row that cannot be written leaves the
// request's answer as it was, and is counted.
func TestAuditWriteFailure(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, api.Config{MetricsRegistry: reg})
	failures := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "converge_audit_write_failures_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("no converge_audit_write_failures_total")
		return 0
	}
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	if n := failures(); n != 0 {
		t.Fatalf("%v failures before any", n)
	}
	// Every insert into the trail now fails.
	b.exec(`ALTER TABLE audit_log ADD CONSTRAINT refuse_all CHECK (false) NOT VALID`)
	b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"w","spec":{"image":"a"}}`).wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/resources", `{"kind":"widget","kind_version":1,"name":"BAD NAME","spec":{"image":"a"}}`).
		want(t, http.StatusUnprocessableEntity)
	if n := failures(); n != 2 {
		t.Fatalf("%v failures counted, want 2", n)
	}
	if n := b.count(`SELECT count(*) FROM resources WHERE name = 'w'`); n != 1 {
		t.Fatalf("the apply whose audit row failed left %d resources", n)
	}
}

func ids(es []store.AuditEntry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}
