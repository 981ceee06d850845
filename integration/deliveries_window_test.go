package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
)

// TestDeliveryFiltersByKindAndWindow reads the delivery log through the
// API with the filters the console's Deliveries page sends: a kind alone
// (no name), and a time window since..until, whose bounds are inclusive
// and exclusive; a window that ends before it starts is refused naming
// until.
func TestDeliveryFiltersByKindAndWindow(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.leafManifest("windowed")
	s.leafManifest("elsewhere")
	s.serveProvider("two-kinds", &runProvider{kind: "windowed"}, &runProvider{kind: "elsewhere"})
	for _, r := range [][2]string{{"windowed", "w1"}, {"windowed", "w2"}, {"elsewhere", "e1"}} {
		s.applyLeaf(r[0], r[1])
		s.waitPhase(r[0], r[1], string(model.PhaseReady), 30*time.Second)
	}
	var all deliveryPage
	waitFor(t, 10*time.Second, "three deliveries in the log", func() bool {
		all = s.deliveries("endpoint=two-kinds")
		return len(all.Items) >= 3
	})

	byKind := s.deliveries("kind=windowed")
	got := map[string]bool{}
	for _, d := range byKind.Items {
		if d.Resource.Kind != "windowed" {
			t.Errorf("kind=windowed lists %s/%s", d.Resource.Kind, d.Resource.Name)
		}
		got[d.Resource.Name] = true
	}
	if !got["w1"] || !got["w2"] {
		t.Errorf("kind=windowed lists %v, want w1 and w2", got)
	}

	// The window: one attempt's own time, since inclusive, until exclusive.
	var at struct {
		At time.Time `json:"at"`
	}
	code, body := s.call("GET", fmt.Sprintf("/deliveries/%d", all.Items[0].ID), nil)
	if code != 200 || json.Unmarshal(body, &at) != nil {
		t.Fatalf("GET delivery = %d %s", code, body)
	}
	q := func(since, until time.Time) string {
		return "endpoint=two-kinds&since=" + url.QueryEscape(since.Format(time.RFC3339Nano)) + "&until=" + url.QueryEscape(until.Format(time.RFC3339Nano))
	}
	in := s.deliveries(q(at.At, at.At.Add(time.Microsecond)))
	if len(in.Items) == 0 || in.Items[0].ID != all.Items[0].ID {
		t.Errorf("the window [at, at+1µs) lists %+v, want delivery %d", in.Items, all.Items[0].ID)
	}
	for _, d := range s.deliveries(q(at.At.Add(-time.Hour), at.At)).Items {
		if d.ID == all.Items[0].ID {
			t.Errorf("until=at lists the attempt made at at: until must be exclusive")
		}
	}
	if code, body := s.call("GET", "/deliveries?"+q(at.At, at.At), nil); !names(code, body, 422, "query.until") {
		t.Errorf("an empty window = %d %s, want 422 naming query.until", code, body)
	}
}

// TestTestDelivery sends test deliveries through the API: to a provider
// served by the SDK (its health request, signed, answered 200 with its
// kinds' readiness), to an endpoint that refuses it (the round trip shows
// the status, its class and the answer's excerpt, still a 200), to an
// endpoint with no health target (409) and to no endpoint (404). A test
// delivery is not written to the delivery log.
func TestTestDelivery(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	s.leafManifest("pinged")
	var healthSeen atomic.Int32
	s.serveProviderWith("pinged", endpointExtras{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("webhook-signature") != "" {
				healthSeen.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}, &runProvider{kind: "pinged"})

	type roundTrip struct {
		Endpoint       string          `json:"endpoint"`
		HTTPStatus     int             `json:"http_status"`
		LatencyMS      int             `json:"latency_ms"`
		Classification string          `json:"classification"`
		Ready          map[string]bool `json:"ready"`
		Excerpt        string          `json:"excerpt"`
		Error          string          `json:"error"`
	}
	send := func(name string) (int, roundTrip, []byte) {
		t.Helper()
		code, body := s.call("POST", "/endpoints/"+name+"/test-delivery", nil)
		var rt roundTrip
		if code == 200 {
			must(t, json.Unmarshal(body, &rt))
		}
		return code, rt, body
	}

	before := healthSeen.Load()
	code, rt, body := send("pinged")
	if code != 200 || rt.Classification != "ok" || rt.HTTPStatus != 200 || !rt.Ready["pinged/1"] || rt.Error != "" || rt.LatencyMS < 0 {
		t.Errorf("test delivery to an SDK provider = %d %s, want 200 ok with pinged/1 ready", code, body)
	}
	if healthSeen.Load() == before {
		t.Error("the provider received no signed request from the test delivery")
	}

	// An endpoint whose health URL refuses every request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	refuser := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "signature does not verify", http.StatusUnauthorized)
	})}
	go func() { _ = refuser.Serve(ln) }()
	t.Cleanup(func() { _ = refuser.Close() })
	u := "http://" + ln.Addr().String() + "/"
	s.stdPost("/endpoints", map[string]any{"name": "refusing", "kinds": []map[string]any{{"kind": "pinged", "kind_version": 1}},
		"target": map[string]any{"type": "https", "url": u}, "health": map[string]any{"url": u, "interval_secs": 3600}, "enabled": false}, 201)
	code, rt, body = send("refusing")
	if code != 200 || rt.Classification != "client_error" || rt.HTTPStatus != 401 || !strings.Contains(rt.Excerpt, "signature does not verify") ||
		!strings.Contains(rt.Error, "401") {
		t.Errorf("test delivery to a refusing endpoint = %d %s, want 200 client_error 401 with the excerpt", code, body)
	}
	if n := s.count(`SELECT count(*) FROM endpoint_deliveries WHERE endpoint = 'refusing'`); n != 0 {
		t.Errorf("the test delivery wrote %d rows to the delivery log", n)
	}

	s.stdPost("/endpoints", map[string]any{"name": "unprobed", "kinds": []map[string]any{{"kind": "pinged", "kind_version": 1}},
		"target": map[string]any{"type": "https", "url": u}, "enabled": false}, 201)
	if code, _, body := send("unprobed"); !names(code, body, 409, "") {
		t.Errorf("test delivery without a health target = %d %s, want 409", code, body)
	}
	if code, _, body := send("nowhere"); !names(code, body, 404, "") {
		t.Errorf("test delivery to no endpoint = %d %s, want 404", code, body)
	}
}
