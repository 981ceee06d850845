package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/webhooksdk"
)

// The thin-payload test's sizes: blobs children, each with a status of
// blobBytes, so a composer's observed children (and a rollup's
// descendants) are over thinLimit, the endpoint's request limit (the
// Lambda Event limit).
const (
	blobs     = 12
	blobBytes = 100 << 10
	thinLimit = 1 << 20
)

// blobProvider serves "fat", a composer of blobs children that rolls up
// what it sees, and "blob", a leaf whose status is blobBytes long.
type blobProvider struct {
	kind string
	mu   sync.Mutex
	seen []webhooksdk.Request // fat's requests
}

func (p *blobProvider) Kind() webhooksdk.KindVersion {
	return webhooksdk.KindVersion{Kind: p.kind, Version: 1}
}
func (p *blobProvider) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	if p.kind == "blob" {
		st, _ := json.Marshal(map[string]string{"blob": strings.Repeat("x", blobBytes)})
		return webhooksdk.Outcome{Status: st}, nil
	}
	p.mu.Lock()
	p.seen = append(p.seen, req)
	p.mu.Unlock()
	if req.Reaction == "rollup" {
		full := 0
		for _, d := range req.Descendants {
			if len(d.Status) > blobBytes {
				full++
			}
		}
		st, _ := json.Marshal(map[string]int{"descendants": len(req.Descendants), "full": full})
		return webhooksdk.Outcome{Status: st}, nil
	}
	var spec struct{ Rev int }
	_ = json.Unmarshal(req.Resource.Spec, &spec)
	kids := make([]webhooksdk.Child, blobs)
	for i := range kids {
		kids[i] = webhooksdk.Child{Kind: "blob", KindVersion: 1, Name: fmt.Sprintf("blob-%d", i), Spec: json.RawMessage(`{}`)}
	}
	st, _ := json.Marshal(map[string]int{"rev": spec.Rev, "observed": len(req.Observed)})
	return webhooksdk.Outcome{Children: kids, Status: st}, nil
}

// TestThinPayloadComposite sends a composer whose observed children (and
// rollup descendants) exceed 1 MB to an endpoint limited to 1 MB: the
// deliveries go thin with a payload_url, webhooksdk fetches the rest with
// the callback token, and the provider sees every child's full status.
func TestThinPayloadComposite(t *testing.T) {
	t.Parallel()
	s := startAll(t)
	for kind, reactions := range map[string]string{
		"fat":  `[{"name":"compose","trigger":"specChange","emits":["children","status"]},{"name":"rollup","trigger":"childrenSettled","emits":["status"]}]`,
		"blob": `[{"name":"work","trigger":"specChange","emits":["status"]}]`,
	} {
		if code, body := s.call("PUT", "/kinds/"+kind+"/manifest", map[string]any{"kind": kind, "kind_version": 1,
			"reactions": json.RawMessage(reactions)}); code != 201 {
			t.Fatalf("manifest %s = %d %s", kind, code, body)
		}
	}
	fat := &blobProvider{kind: "fat"}
	var thin, whole, over atomic.Int32
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			var env webhooksdk.Envelope
			if json.Unmarshal(body, &env) == nil && env.Type == webhooksdk.EnvelopeTask && env.Kind == "fat" {
				switch {
				case len(body) > thinLimit:
					over.Add(1)
				case env.PayloadURL != "":
					thin.Add(1)
					if env.Resource != nil || env.Observed != nil || env.Descendants != nil {
						t.Errorf("a thin envelope carries documents: %.200s", body)
					}
				default:
					whole.Add(1)
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		})
	}
	s.serveProviderWith("blobs", endpointExtras{target: map[string]any{"max_request_bytes": thinLimit}}, wrap, fat, &blobProvider{kind: "blob"})

	s.apply("fat", "f", nil, map[string]any{"rev": 1})
	// The rollup sees every descendant with its full status.
	var st struct{ Full int }
	waitFor(t, 60*time.Second, "f rolled up its 1.2 MB of descendants", func() bool {
		d, ok := s.detail("fat/f")
		return ok && json.Unmarshal(d.Status, &st) == nil && st.Full == blobs
	})
	// A new spec composes again, observing every child's full status.
	s.apply("fat", "f", nil, map[string]any{"rev": 2})
	observedAll := func() bool {
		fat.mu.Lock()
		defer fat.mu.Unlock()
		for _, req := range fat.seen {
			if req.Reaction != "compose" || req.Resource.Generation != 2 || len(req.Observed) != blobs {
				continue
			}
			for _, o := range req.Observed {
				if len(o.Status) <= blobBytes {
					t.Errorf("observed %s without its full status (%d bytes)", o.Name, len(o.Status))
				}
			}
			return true
		}
		return false
	}
	waitFor(t, 60*time.Second, "f composed rev 2 observing its children", func() bool {
		d, ok := s.detail("fat/f")
		return ok && d.PhaseOf() == model.PhaseReady && observedAll()
	})
	if thin.Load() < 2 || over.Load() != 0 || whole.Load() == 0 {
		t.Errorf("deliveries of fat: %d thin, %d whole, %d over the limit; want >= 2 thin (rollup, compose), some whole (the first compose), none over",
			thin.Load(), whole.Load(), over.Load())
	}
	resp, err := http.Get(s.base + "/metrics")
	must(t, err)
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `converge_dispatch_payloads_total{result="served"}`) {
		t.Errorf("/metrics lacks the served payloads")
	}
	s.checkInvariants()
}
