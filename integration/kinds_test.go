package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/dispatch/inproc"
	"github.com/convergeplane/converge/webhooksdk"
)

// Test kinds: a leaf worker and a composite with a composer and a rollup.
const (
	leafReactions = `[{"name":"work","trigger":"specChange","emits":["status","conditions"]}]`
	compReactions = `[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},
	                  {"name":"rollup","trigger":"childrenSettled","emits":["status","conditions"]}]`
)

// compSpec is the composite's spec: the children to create, each naming the
// siblings it depends on. Flow copies the upstream's status.id into the
// dependent's spec.upstream_id.
type compSpec struct {
	Children []childSpec `json:"children"`
}

type childSpec struct {
	Name  string         `json:"name"`
	After []string       `json:"after,omitempty"`
	Flow  bool           `json:"flow,omitempty"`
	Spec  map[string]any `json:"spec,omitempty"`
}

// faults makes named leaves fail: "terminal" or "transient".
type faults struct {
	mu sync.Mutex
	m  map[string]string
}

func (f *faults) set(name, mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[name] = mode
}

func (f *faults) get(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[name]
}

// leafHandler echoes its spec into status and reports status.id.
func leafHandler(calls *callLog, fl *faults) inproc.Handler {
	return inproc.HandlerFunc(func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		name := req.Resource.Name
		calls.add(name)
		calls.add(fmt.Sprintf("%s@%d", name, req.Resource.Generation))
		if fl != nil {
			switch fl.get(name) {
			case "terminal":
				return webhooksdk.Outcome{}, inproc.Terminal(errors.New("permanently broken"))
			case "transient":
				return webhooksdk.Outcome{}, errors.New("flaky backend")
			}
		}
		var spec map[string]any
		_ = json.Unmarshal(req.Resource.Spec, &spec)
		id := "id-" + name
		if v, ok := spec["v"]; ok {
			id = fmt.Sprintf("id-%s-v%v", name, v)
		}
		st, _ := json.Marshal(map[string]any{"id": id, "spec": spec})
		return webhooksdk.Outcome{Status: st}, nil
	})
}

// compHandler composes children from compSpec and rolls their phases up.
func compHandler(calls *callLog) inproc.Handler {
	return inproc.HandlerFunc(func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		calls.add(req.Resource.Name + ":" + req.Reaction)
		switch req.Reaction {
		case "compose":
			var spec compSpec
			if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
				return webhooksdk.Outcome{}, inproc.Terminal(err)
			}
			var out webhooksdk.Outcome
			for _, c := range spec.Children {
				s, _ := json.Marshal(c.Spec)
				if c.Spec == nil {
					s = []byte(`{}`)
				}
				out.Children = append(out.Children, webhooksdk.Child{Kind: "leaf", KindVersion: 1, Name: c.Name, Spec: s})
				for _, a := range c.After {
					e := webhooksdk.Edge{Dependent: webhooksdk.Ref{Kind: "leaf", Name: c.Name}, Dependency: webhooksdk.Ref{Kind: "leaf", Name: a}}
					if c.Flow {
						e.Values = []webhooksdk.ValueFlow{{DependentField: "/upstream_id", SourceField: "/id"}}
					}
					out.Edges = append(out.Edges, e)
				}
			}
			out.Status = json.RawMessage(fmt.Sprintf(`{"composed":%d}`, len(spec.Children)))
			return out, nil
		case "rollup":
			ready, failed := 0, 0
			for _, d := range req.Descendants {
				switch d.Phase {
				case string(model.PhaseReady):
					ready++
				case string(model.PhaseFailed):
					failed++
				}
			}
			out := webhooksdk.Outcome{Status: json.RawMessage(fmt.Sprintf(`{"ready":%d,"failed":%d,"total":%d}`, ready, failed, len(req.Descendants)))}
			if ready < len(req.Descendants) {
				out.Conditions = []webhooksdk.Condition{{Type: "Ready", Status: "False", Reason: "ChildrenNotReady",
					Message: fmt.Sprintf("%d of %d children ready", ready, len(req.Descendants))}}
			} else {
				out.Conditions = []webhooksdk.Condition{{Type: "Ready", Status: "True", Reason: "AllChildrenReady"}}
			}
			return out, nil
		}
		return webhooksdk.Outcome{}, inproc.Terminal(fmt.Errorf("unknown reaction %q", req.Reaction))
	})
}

func (e *engine) defineKinds(leafPolicy model.Policy) {
	e.manifest("leaf", 1, leafReactions, leafPolicy)
	e.manifest("comp", 1, compReactions, model.Policy{})
}
