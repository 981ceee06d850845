package api_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/store"
)

// listedPage is one page of a list, its items kept as raw objects.
type listedPage struct {
	Items      []map[string]json.RawMessage `json:"items"`
	NextCursor string                       `json:"next_cursor"`
}

// pages follows path's next_cursor to the end and returns every page, each
// page's X-Next-Cursor checked against its body.
func (b *testBundle) pages(t *testing.T, path string, q url.Values) []listedPage {
	t.Helper()
	var out []listedPage
	for {
		r := b.do(http.MethodGet, path+"?"+q.Encode(), nil).want(t, http.StatusOK)
		var p listedPage
		r.decode(t, &p)
		if got := r.header.Get("X-Next-Cursor"); got != p.NextCursor {
			t.Fatalf("X-Next-Cursor %q, body next_cursor %q", got, p.NextCursor)
		}
		out = append(out, p)
		if p.NextCursor == "" {
			return out
		}
		if len(out) > 100 {
			t.Fatalf("more than 100 pages of %s", path)
		}
		q.Set("cursor", p.NextCursor)
	}
}

// names lists the items' names (or key) across pages, in order.
func names(t *testing.T, pages []listedPage, key string) []string {
	t.Helper()
	var out []string
	for _, p := range pages {
		for _, it := range p.Items {
			var n string
			if err := json.Unmarshal(it[key], &n); err != nil {
				t.Fatalf("item without a %s: %v", key, err)
			}
			out = append(out, n)
		}
	}
	return out
}

// itemBytes is the size of the named fields of an item as sent.
func itemBytes(it map[string]json.RawMessage, fields ...string) int {
	n := 0
	for _, f := range fields {
		n += len(it[f])
	}
	return n
}

// TestListPageBytes: a list page of large objects ends early, at the byte
// budget, with a next_cursor that resumes right after its last item; an
// item larger than the budget is listed alone; fields=-spec,-status leaves
// them out (and a page then holds every small item).
func TestListPageBytes(t *testing.T) {
	t.Parallel()

	t.Run("ResourcesAtTheDefaultBudget", func(t *testing.T) {
		t.Parallel()
		// Six widgets of 1.5 MB: before the budget, limit=1000 listed
		// all 9 MB in one answer.
		b := setup(t, api.Config{})
		b.putManifest("widget", widgetKind).wantApply(t, "created")
		var want []string
		for i := range 6 {
			name := fmt.Sprintf("big%d", i)
			want = append(want, name)
			b.apply(fmt.Sprintf(`{"kind":"widget","kind_version":1,"name":%q,"spec":{"image":"x","note":%q}}`,
				name, strings.Repeat(string(rune('a'+i)), 1500_000))).wantApply(t, "created")
		}
		pages := b.pages(t, "/api/v1/resources", url.Values{"limit": {"1000"}})
		if diff := cmp.Diff(want, names(t, pages, "name")); diff != "" {
			t.Fatalf("pages skipped or repeated items (-want +got):\n%s", diff)
		}
		for i, p := range pages {
			if n := itemsBytes(p, "spec", "status"); len(p.Items) > 1 && n > store.ListBytesDefault {
				t.Errorf("page %d holds %d items of %d bytes, over the %d-byte budget", i, len(p.Items), n, store.ListBytesDefault)
			}
		}
		// 1.5 MB items, 4 MiB: two a page.
		if len(pages) != 3 {
			t.Errorf("%d pages, want 3 of two items", len(pages))
		}
		// Without spec and status, one page holds them all.
		pages = b.pages(t, "/api/v1/resources", url.Values{"limit": {"1000"}, "fields": {"-spec,-status"}})
		if len(pages) != 1 || len(pages[0].Items) != 6 {
			t.Fatalf("fields=-spec,-status: %d pages, want one of 6 items", len(pages))
		}
		for _, it := range pages[0].Items {
			if _, ok := it["spec"]; ok {
				t.Fatalf("fields=-spec,-status listed a spec: %v", slices.Sorted(maps.Keys(it)))
			}
			if _, ok := it["name"]; !ok {
				t.Fatalf("item without a name: %v", slices.Sorted(maps.Keys(it)))
			}
		}
	})

	b := setup(t, api.Config{ListPageBytes: 100_000})
	b.putManifest("widget", widgetKind).wantApply(t, "created")
	b.putManifest("noop", noopKind).wantApply(t, "created")
	var root resource
	b.apply(`{"kind":"noop","kind_version":1,"name":"root"}`).wantApply(t, "created").decode(t, &root)
	// Widgets of about 30 kB of spec, some with 30 kB of status, and one
	// of 250 kB, over the whole budget, in the middle.
	var kids []string
	for i := range 10 {
		name := fmt.Sprintf("w%d", i)
		size := 30_000
		if i == 4 {
			size = 250_000
		}
		kids = append(kids, name)
		b.apply(fmt.Sprintf(`{"kind":"widget","kind_version":1,"name":%q,"spec":{"image":"x","note":%q}}`,
			name, strings.Repeat("n", size))).wantApply(t, "created")
		if i%3 == 0 {
			b.exec(`UPDATE resources SET status = jsonb_build_object('log', repeat('s', 30000)) WHERE name = $1`, name)
		}
	}
	b.exec(`UPDATE resources SET owner_id = $1 WHERE kind = 'widget'`, root.ID)

	// checkPages checks that pages hold want in order, each within the
	// budget or alone, some with more than one item.
	checkPages := func(t *testing.T, pages []listedPage, key string, want []string, fields ...string) {
		t.Helper()
		if diff := cmp.Diff(want, names(t, pages, key)); diff != "" {
			t.Fatalf("pages skipped or repeated items (-want +got):\n%s", diff)
		}
		several := false
		for i, p := range pages {
			switch n := itemsBytes(p, fields...); {
			case len(p.Items) == 0:
				t.Errorf("page %d is empty", i)
			case len(p.Items) > 1 && n > 100_000:
				t.Errorf("page %d holds %d items of %d bytes, over the 100,000-byte budget", i, len(p.Items), n)
			case len(p.Items) > 1:
				several = true
			}
		}
		if !several {
			t.Errorf("no page holds two items: %d pages", len(pages))
		}
	}

	t.Run("Resources", func(t *testing.T) {
		t.Parallel()
		pages := b.pages(t, "/api/v1/resources", url.Values{"kind": {"widget"}, "limit": {"1000"}})
		checkPages(t, pages, "name", kids, "spec", "status")
		// The limit still ends a page first when it is smaller.
		pages = b.pages(t, "/api/v1/resources", url.Values{"kind": {"widget"}, "limit": {"1"}})
		if got := names(t, pages, "name"); len(pages) != len(kids) || !slices.Equal(got, kids) {
			t.Errorf("limit=1: %d pages of %v, want %d of one", len(pages), got, len(kids))
		}
	})

	t.Run("Children", func(t *testing.T) {
		t.Parallel()
		pages := b.pages(t, "/api/v1/resources/noop/root/children", url.Values{})
		checkPages(t, pages, "name", kids, "spec", "status")
		pages = b.pages(t, "/api/v1/resources/noop/root/children", url.Values{"fields": {"-spec"}})
		checkPages(t, pages, "name", kids, "spec", "status")
		for _, p := range pages {
			for _, it := range p.Items {
				if _, ok := it["spec"]; ok {
					t.Fatal("fields=-spec listed a spec")
				}
			}
		}
	})

	t.Run("ProviderConfigs", func(t *testing.T) {
		t.Parallel()
		// Random, so TOAST cannot compress them: the database's own cut
		// (by stored bytes) then ends the page, not only the server's.
		var want []string
		for i := range 8 {
			name := fmt.Sprintf("cfg-%d", i)
			want = append(want, name)
			b.do(http.MethodPost, "/api/v1/providerconfigs", fmt.Sprintf(`{"name":%q,"kind":"widget","kind_version":1,"spec":{"k":%q}}`,
				name, rand.Text()+base64.StdEncoding.EncodeToString(randomBytes(t, 30_000)))).want(t, http.StatusCreated)
		}
		pages := b.pages(t, "/api/v1/providerconfigs", url.Values{"limit": {"1000"}})
		checkPages(t, pages, "name", want, "spec", "data")
	})

	t.Run("Operations", func(t *testing.T) {
		t.Parallel()
		b.putManifest("box", `{"kind":"box","kind_version":1,"reactions":[
			{"name":"snap","trigger":"operation","verb":"snapshot","emits":["operationOutput"],
			 "input_schema":{"type":"object","properties":{"label":{"type":"string"}}}}]}`).wantApply(t, "created")
		b.apply(`{"kind":"box","kind_version":1,"name":"b"}`).wantApply(t, "created")
		var ids []string
		for range 8 {
			var op struct {
				ID string `json:"id"`
			}
			b.do(http.MethodPost, "/api/v1/resources/box/b/ops", fmt.Sprintf(`{"verb":"snapshot","input":{"label":%q}}`,
				strings.Repeat("l", 30_000))).want(t, http.StatusAccepted).decode(t, &op)
			ids = append([]string{op.ID}, ids...) // newest first
		}
		checkPages(t, b.pages(t, "/api/v1/resources/box/b/ops", url.Values{"limit": {"1000"}}), "id", ids, "input", "operation_output")
	})

	t.Run("SpecHistory", func(t *testing.T) {
		t.Parallel()
		b.putManifest("doc", `{"kind":"doc","kind_version":1,"reactions":[]}`).wantApply(t, "created")
		var revs []string
		for i := range 8 {
			b.apply(fmt.Sprintf(`{"kind":"doc","kind_version":1,"name":"d","spec":{"text":%q}}`, strings.Repeat(string(rune('a'+i)), 30_000))).
				want(t, map[bool]int{true: http.StatusCreated, false: http.StatusOK}[i == 0])
			revs = append([]string{strconv.Itoa(i + 1)}, revs...) // newest first
		}
		var got []string
		pages := b.pages(t, "/api/v1/resources/doc/d/spec-history", url.Values{})
		for _, p := range pages {
			for _, it := range p.Items {
				got = append(got, string(it["revision"]))
			}
		}
		if diff := cmp.Diff(revs, got); diff != "" {
			t.Fatalf("pages skipped or repeated revisions (-want +got):\n%s", diff)
		}
		for i, p := range pages {
			if n := itemsBytes(p, "spec"); len(p.Items) > 1 && n > 100_000 {
				t.Errorf("page %d holds %d revisions of %d bytes, over the 100,000-byte budget", i, len(p.Items), n)
			}
		}
		if len(pages) < 3 {
			t.Errorf("%d pages of 8 revisions of 30 kB, want at least 3 at 100 kB a page", len(pages))
		}
	})

	t.Run("FieldsRefusesOtherNames", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/api/v1/resources", "/api/v1/resources/noop/root/children"} {
			for _, f := range []string{"-labels", "spec", "-spec,,-status", "-Spec"} {
				b.do(http.MethodGet, path+"?fields="+url.QueryEscape(f), nil).wantProblem(t, http.StatusBadRequest, "query.fields")
			}
		}
	})
}

// itemsBytes is the size of the named fields of a page's items as sent.
func itemsBytes(p listedPage, fields ...string) int {
	n := 0
	for _, it := range p.Items {
		n += itemBytes(it, fields...)
	}
	return n
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
