package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/convergeplane/converge/control/api"
)

func TestReactorBindings(t *testing.T) {
	t.Parallel()
	b := setup(t, api.Config{})
	b.putManifest("account", fixture(t, "account.kind.json")).wantApply(t, "created")
	b.putManifest("vpc", fixture(t, "vpc.kind.json")).wantApply(t, "created")
	b.putManifest("statussink", fixture(t, "statussink.kind.json")).wantApply(t, "created")
	post := func(body string) response {
		b.t.Helper()
		return b.do(http.MethodPost, "/api/v1/reactor-bindings", body)
	}

	t.Run("Lifecycle", func(t *testing.T) {
		var got struct {
			Name       string            `json:"name"`
			Enabled    bool              `json:"enabled"`
			LabelMatch map[string]string `json:"label_match"`
			Transition string            `json:"transition"`
		}
		post(`{"name":"vpc-failed","watch_kind":"vpc","transition":"failed","reactor":"statussink"}`).
			wantApply(t, "created").decode(t, &got)
		if !got.Enabled || got.LabelMatch == nil || got.Transition != "failed" {
			t.Fatalf("binding %+v, want enabled with an empty label_match", got)
		}
		post(`{"name":"vpc-failed","watch_kind":"vpc","transition":"failed","reactor":"statussink","enabled":true,"label_match":{}}`).
			wantApply(t, "unchanged")
		post(`{"name":"vpc-failed","watch_kind":"vpc","transition":"failed","reactor":"statussink","enabled":false}`).
			wantApply(t, "configured").decode(t, &got)
		if got.Enabled {
			t.Fatal("binding still enabled")
		}
		b.do(http.MethodGet, "/api/v1/reactor-bindings/vpc-failed", nil).want(t, http.StatusOK)
		var l struct {
			Items []struct {
				Name string `json:"name"`
			} `json:"items"`
		}
		b.do(http.MethodGet, "/api/v1/reactor-bindings?watch_kind=vpc", nil).want(t, http.StatusOK).decode(t, &l)
		if len(l.Items) != 1 {
			t.Fatalf("list %+v", l)
		}
		b.do(http.MethodGet, "/api/v1/reactor-bindings?watch_kind=account", nil).want(t, http.StatusOK).decode(t, &l)
		if len(l.Items) != 0 {
			t.Fatalf("filtered list %+v", l)
		}
		b.do(http.MethodDelete, "/api/v1/reactor-bindings/vpc-failed", nil).want(t, http.StatusNoContent)
		b.do(http.MethodGet, "/api/v1/reactor-bindings/vpc-failed", nil).wantProblem(t, http.StatusNotFound, "")
		b.do(http.MethodDelete, "/api/v1/reactor-bindings/vpc-failed", nil).wantProblem(t, http.StatusNotFound, "")
	})

	t.Run("Refused", func(t *testing.T) {
		for _, tc := range []struct {
			name, body, loc string
			status          int
		}{
			{"UnknownWatchKind", `{"name":"x","watch_kind":"subnet","transition":"synced","reactor":"statussink"}`, "body.watch_kind", 422},
			{"UnknownWatchVersion", `{"name":"x","watch_kind":"vpc","watch_kind_version":3,"transition":"synced","reactor":"statussink"}`, "body.watch_kind", 422},
			{"WatchingAReactor", `{"name":"x","watch_kind":"statussink","transition":"synced","reactor":"statussink"}`, "body.reactor", 422},
			{"ReactorNotAReactor", `{"name":"x","watch_kind":"vpc","transition":"synced","reactor":"account"}`, "body.reactor", 422},
			{"UnknownReactor", `{"name":"x","watch_kind":"vpc","transition":"synced","reactor":"nosink"}`, "body.reactor", 422},
			{"Transition", `{"name":"x","watch_kind":"vpc","transition":"exploded","reactor":"statussink"}`, "body.transition", 422},
			{"BadName", `{"name":"no spaces","watch_kind":"vpc","transition":"synced","reactor":"statussink"}`, "body.name", 422},
			{"NonStringLabelMatch", `{"name":"x","watch_kind":"vpc","transition":"synced","reactor":"statussink","label_match":{"team":1}}`, "body.label_match.team", 400},
			{"Malformed", `{"name":"x",`, "body", 400},
		} {
			t.Run(tc.name, func(t *testing.T) {
				post(tc.body).wantProblem(t, tc.status, tc.loc)
			})
		}
		if n := b.count(`SELECT count(*) FROM reactor_bindings`); n != 0 {
			t.Errorf("%d bindings after refused applies", n)
		}
	})

	t.Run("BlocksDeletingTheKindsItNames", func(t *testing.T) {
		post(`{"name":"acct","watch_kind":"account","transition":"created","reactor":"statussink"}`).wantApply(t, "created")
		p := b.do(http.MethodDelete, "/api/v1/kinds/statussink/versions/1/manifest", nil).wantProblem(t, http.StatusConflict, "")
		if !strings.Contains(p.Detail, "acct") {
			t.Errorf("detail %q does not name the binding", p.Detail)
		}
		b.do(http.MethodDelete, "/api/v1/kinds/account/versions/1/manifest", nil).wantProblem(t, http.StatusConflict, "")
		b.do(http.MethodDelete, "/api/v1/reactor-bindings/acct", nil).want(t, http.StatusNoContent)
		b.do(http.MethodDelete, "/api/v1/kinds/account/versions/1/manifest", nil).want(t, http.StatusNoContent)
	})
}
