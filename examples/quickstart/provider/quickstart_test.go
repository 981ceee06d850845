package provider

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
	"github.com/convergeplane/converge/webhooksdk/sdktest"
)

func TestSiteComposesBucketsAndAWiredCDN(t *testing.T) {
	t.Parallel()
	env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "site", Version: 1})
	req := webhooksdk.NewRequest(&env)
	req.Reaction = "compose"
	req.Resource.Name = "shop"
	req.Resource.Spec = json.RawMessage(`{"buckets":2,"region":"eu-west-1"}`)
	out, err := sdktest.Run(t, site{}, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Children) != 3 {
		t.Fatalf("children = %d, want 2 buckets + 1 cdn", len(out.Children))
	}
	if len(out.Edges) != 1 || out.Edges[0].Dependent.Name != "shop-cdn" || out.Edges[0].Dependency.Name != "shop-bucket-0" ||
		out.Edges[0].Values[0].DependentField != "/origin" {
		t.Errorf("edges = %+v, want cdn <- bucket-0 flowing /origin", out.Edges)
	}
	for _, c := range out.Children {
		if c.KindVersion != 1 {
			t.Errorf("%s has kind_version %d, want explicit 1", c.Name, c.KindVersion)
		}
	}
}

func TestSiteRollup(t *testing.T) {
	t.Parallel()
	env := sdktest.TaskEnvelope(webhooksdk.KindVersion{Kind: "site", Version: 1})
	req := webhooksdk.NewRequest(&env)
	req.Reaction = "rollup"
	req.Descendants = []webhooksdk.Resource{{Kind: "bucket", Name: "a", Phase: "Ready"}, {Kind: "cdn", Name: "b", Phase: "Failed"}}
	out, err := sdktest.Run(t, site{}, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Conditions) != 1 || out.Conditions[0].Status != "False" || out.Conditions[0].Reason != "ChildrenNotReady" {
		t.Errorf("conditions = %+v, want Ready=False/ChildrenNotReady", out.Conditions)
	}
	req.Descendants[1].Phase = "Ready"
	out, _ = sdktest.Run(t, site{}, req)
	if out.Conditions[0].Status != "True" {
		t.Errorf("all Ready: conditions = %+v, want Ready=True", out.Conditions)
	}
}

func TestCDNNeedsAnOrigin(t *testing.T) {
	t.Parallel()
	p := New(0, nil)[1]
	env := sdktest.TaskEnvelope(p.Kind())
	req := webhooksdk.NewRequest(&env)
	req.Resource.Spec = json.RawMessage(`{"ttl_secs":60}`)
	if _, err := sdktest.Run(t, p, req); !webhooksdk.IsTerminal(err) {
		t.Fatalf("err = %v, want terminal", err)
	}
	req.Resource.Spec = json.RawMessage(`{"origin":"bkt-x","ttl_secs":60}`)
	out, err := sdktest.Run(t, p, req)
	if err != nil || !json.Valid(out.Status) {
		t.Fatalf("out = %s, %v", out.Status, err)
	}
}

func TestLeafDelayHonoursCancellation(t *testing.T) {
	t.Parallel()
	p := New(time.Hour, nil)[0]
	env := sdktest.TaskEnvelope(p.Kind())
	req := webhooksdk.NewRequest(&env)
	req.Resource.Spec = json.RawMessage(`{"region":"x"}`)
	req.Deadline = time.Now().Add(20 * time.Millisecond)
	if _, err := sdktest.Run(t, p, req); err == nil {
		t.Fatal("want the deadline to cut the simulated work short")
	}
}

func TestLeafTeardownSucceeds(t *testing.T) {
	t.Parallel()
	for _, p := range New(0, nil)[:2] {
		env := sdktest.TaskEnvelope(p.Kind())
		req := webhooksdk.NewRequest(&env)
		req.TaskType, req.Reaction, req.Trigger = webhooksdk.TaskDelete, "teardown", webhooksdk.TriggerDeleteRequested
		req.Resource.Spec = json.RawMessage(`{}`) // a cdn's work would refuse it terminally
		if _, err := sdktest.Run(t, p, req); err != nil {
			t.Errorf("%s teardown: %v", p.Kind(), err)
		}
	}
}
