package api_test

import (
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/convergeplane/converge/control/api"
	"github.com/convergeplane/converge/control/store"
	"github.com/convergeplane/converge/internal/testkit/pgtest"
)

// builtConsole stands for a `make ui` build: an index naming hashed assets.
var builtConsole = fstest.MapFS{
	"index.html":            {Data: []byte(`<!doctype html><title>Converge</title><script type="module" src="/assets/index-a1b2.js"></script>`)},
	"assets/index-a1b2.js":  {Data: []byte(`console.log("app")`)},
	"assets/index-c3d4.css": {Data: []byte(`body{}`)},
	"favicon.svg":           {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`)},
}

func TestConsole(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Console: builtConsole})
	index := string(builtConsole["index.html"].Data)

	t.Run("ClientRoutesAnswerTheIndex", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/", "/resources", "/resources/vpc/sample-vpc", "/graph/bom/shop", "/kinds/vpc/2",
			"/providerconfigs", "/bindings", "/endpoints/classic", "/cluster", "/deliveries", "/deliveries/42"} {
			r := b.do(http.MethodGet, path, nil).want(t, http.StatusOK)
			if string(r.body) != index {
				t.Errorf("GET %s answered %q, want the index", path, clip(r.body))
			}
			for k, want := range map[string]string{
				"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
			} {
				if got := r.header.Get(k); got != want {
					t.Errorf("GET %s: %s %q, want %q", path, k, got, want)
				}
			}
			if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") ||
				!strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("GET %s: Content-Security-Policy %q does not keep the console to its origin", path, csp)
			}
		}
	})
	t.Run("HeadAnswersLikeGet", func(t *testing.T) {
		t.Parallel()
		r := b.do(http.MethodHead, "/resources", nil).want(t, http.StatusOK)
		if len(r.body) != 0 || r.header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("HEAD: body %q, Content-Type %q", r.body, r.header.Get("Content-Type"))
		}
	})
	t.Run("AssetsHaveTheirTypeAndAreCachedForGood", func(t *testing.T) {
		t.Parallel()
		for path, ct := range map[string]string{
			"/assets/index-a1b2.js":  "text/javascript; charset=utf-8",
			"/assets/index-c3d4.css": "text/css; charset=utf-8",
		} {
			r := b.do(http.MethodGet, path, nil).want(t, http.StatusOK)
			if string(r.body) != string(builtConsole[strings.TrimPrefix(path, "/")].Data) {
				t.Errorf("GET %s answered %q", path, r.body)
			}
			if got := r.header.Get("Content-Type"); got != ct {
				t.Errorf("GET %s: Content-Type %q, want %q", path, got, ct)
			}
			if got := r.header.Get("Cache-Control"); !strings.Contains(got, "immutable") {
				t.Errorf("GET %s: Cache-Control %q, want immutable", path, got)
			}
		}
		r := b.do(http.MethodGet, "/favicon.svg", nil).want(t, http.StatusOK)
		if got := r.header.Get("Content-Type"); got != "image/svg+xml" {
			t.Errorf("favicon: Content-Type %q", got)
		}
	})
	t.Run("OtherPathsKeepTheirProblems", func(t *testing.T) {
		t.Parallel()
		// A missing asset is not the index: a script tag would run HTML.
		b.do(http.MethodGet, "/assets/gone-0000.js", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodGet, "/nope", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodGet, "/api/v1/nope", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodGet, "/resourcesx", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodPost, "/resources", `{}`).wantProblem(t, http.StatusMethodNotAllowed, "")
		// The API beside it is untouched.
		b.do(http.MethodGet, "/api/v1/resources", nil).want(t, http.StatusOK)
	})
}

// TestConsoleNeedsNoTokenButItsAPIDoes: the page loads without a token (it
// holds no data and asks for one); every API call it makes needs one.
func TestConsoleNeedsNoTokenButItsAPIDoes(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Console: builtConsole, ReadTokens: []string{"reader"}})
	b.do(http.MethodGet, "/", nil).want(t, http.StatusOK)
	b.do(http.MethodGet, "/assets/index-a1b2.js", nil).want(t, http.StatusOK)
	b.do(http.MethodGet, "/api/v1/resources", nil).wantProblem(t, http.StatusUnauthorized, "")
	b.do(http.MethodGet, "/api/v1/resources", nil, "Authorization: Bearer reader").want(t, http.StatusOK)
}

// TestConsoleUnbuilt serves the committed placeholder, what a binary built
// without `make ui` embeds: it says how to build the console.
func TestConsoleUnbuilt(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{Console: os.DirFS("../../ui/site/placeholder")})
	for _, path := range []string{"/", "/resources/vpc/x"} {
		r := b.do(http.MethodGet, path, nil).want(t, http.StatusOK)
		if !strings.Contains(string(r.body), "make ui") || r.header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("GET %s answered %q (%s), want the placeholder", path, clip(r.body), r.header.Get("Content-Type"))
		}
	}
	b.do(http.MethodGet, "/assets/index.js", nil).wantProblem(t, http.StatusNotFound, "")
}

func TestNoConsole(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.do(http.MethodGet, "/", nil).wantProblem(t, http.StatusNotFound, "")
	b.do(http.MethodGet, "/resources", nil).wantProblem(t, http.StatusNotFound, "")
}

func TestConsoleWithoutIndexIsRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st := store.New(db.Pool, store.Config{})
	kinds := store.NewKindCache(st, store.KindCacheConfig{}, slog.New(slog.DiscardHandler))
	_, err := api.New(api.Config{Console: fstest.MapFS{"assets/a.js": {Data: []byte("x")}}}, st, kinds, nil)
	if err == nil || !strings.Contains(err.Error(), "index.html") {
		t.Fatalf("New with a console lacking index.html: %v, want an error naming index.html", err)
	}
}
