package api_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

// TestHeadAnswersLikeGet: HEAD on a read route answered 405. It must answer
// like the GET, status and headers, without a body.
func TestHeadAnswersLikeGet(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{ReadTokens: []string{"reader"}, AdminTokens: []string{"admin"}})
	b.do(http.MethodPut, "/api/v1/kinds/noop/manifest", noopKind, "Authorization: Bearer admin").wantApply(t, "created")
	b.do(http.MethodPost, "/api/v1/resources", `{"kind":"noop","kind_version":1,"name":"n"}`, "Authorization: Bearer admin").
		wantApply(t, "created")

	for _, path := range []string{"/api/v1/resources/noop/n", "/api/v1/resources", "/api/v1/kinds",
		"/api/v1/kinds/noop/versions/1/manifest", "/api/v1/version", "/livez", "/readyz"} {
		t.Run(path, func(t *testing.T) {
			get := b.do(http.MethodGet, path, nil, "Authorization: Bearer reader").want(t, http.StatusOK)
			head := b.do(http.MethodHead, path, nil, "Authorization: Bearer reader").want(t, http.StatusOK)
			if len(head.body) != 0 {
				t.Errorf("HEAD answered a %d-byte body, want none", len(head.body))
			}
			if got, want := head.header.Get("Content-Type"), get.header.Get("Content-Type"); got != want {
				t.Errorf("HEAD Content-Type %q, GET's %q", got, want)
			}
			if got := head.header.Get("Content-Length"); got != strconv.Itoa(len(get.body)) {
				t.Errorf("HEAD Content-Length %q, GET's body is %d bytes", got, len(get.body))
			}
		})
	}
	// A HEAD is a read: it needs a token when tokens are on, and a missing
	// object is a 404 as for GET.
	b.do(http.MethodHead, "/api/v1/resources/noop/n", nil).want(t, http.StatusUnauthorized)
	b.do(http.MethodHead, "/api/v1/resources/noop/missing", nil, "Authorization: Bearer reader").want(t, http.StatusNotFound)
	// Writes still have no HEAD.
	b.do(http.MethodHead, "/api/v1/kinds/noop/manifest", nil, "Authorization: Bearer reader").want(t, http.StatusMethodNotAllowed)
}
