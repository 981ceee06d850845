// Package provider is the quickstart's example provider: three kinds served
// with webhooksdk, the way an external team would write them.
//
//   - bucket/1: a leaf that "creates" a storage bucket and reports its id.
//   - cdn/1: a leaf whose origin flows in from a bucket's status.
//   - both leaves have a teardown (a finalizer): deleting a site deletes the
//     cdn before the bucket it depends on, then the site.
//   - site/1: a composite that fans out N buckets and one cdn (the cdn
//     depends on the first bucket and receives its bucket_id as origin),
//     then rolls its children's readiness up into its own status.
//
// The work is simulated (an optional delay makes convergence watchable);
// everything else — ordering, value flows, rollup — is the control plane's.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/convergeplane/converge/webhooksdk"
)

// New returns the quickstart's providers. delay slows every leaf's work so
// the demo can be watched converging; 0 answers at once. Each kind reports
// the readiness ready holds for it (nil: always ready).
func New(delay time.Duration, ready *Readiness) []webhooksdk.Provider {
	return []webhooksdk.Provider{
		switched{leaf("bucket", delay, bucket), ready},
		switched{leaf("cdn", delay, cdn), ready},
		switched{site{}, ready},
	}
}

// leaf is the provider of a simulated leaf kind: work reconciles it after the delay,
// and its teardown succeeds at once.
func leaf(kind string, delay time.Duration, work func(req webhooksdk.Request) (webhooksdk.Outcome, error)) webhooksdk.Provider {
	return webhooksdk.WorkFunc(kind, 1, func(ctx context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
		if delay > 0 {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return webhooksdk.Outcome{}, ctx.Err()
			}
		}
		if req.TaskType == webhooksdk.TaskDelete {
			// The simulated bucket or cdn is gone; a real provider deletes it
			// and succeeds when it is already gone.
			return webhooksdk.Outcome{}, nil
		}
		return work(req)
	})
}

type bucketSpec struct {
	Region string `json:"region"`
}

func bucket(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec bucketSpec
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("decode bucket spec: %w", err))
	}
	return status(map[string]any{"bucket_id": "bkt-" + req.Resource.Name, "region": spec.Region})
}

type cdnSpec struct {
	Origin  string `json:"origin"`
	TTLSecs int    `json:"ttl_secs"`
}

func cdn(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec cdnSpec
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("decode cdn spec: %w", err))
	}
	if spec.Origin == "" {
		// The engine runs a dependent only after its upstream synced, so
		// this means the edge is missing: retrying will not fix it.
		return webhooksdk.Outcome{}, webhooksdk.Terminal(errors.New("spec.origin is empty: no bucket flowed into this cdn"))
	}
	return status(map[string]any{"distribution_id": "dist-" + req.Resource.Name, "origin": spec.Origin, "ttl_secs": spec.TTLSecs})
}

// SiteSpec is site/1's spec.
type SiteSpec struct {
	Buckets int    `json:"buckets"`
	Region  string `json:"region"`
}

type site struct{}

func (site) Kind() webhooksdk.KindVersion { return webhooksdk.KindVersion{Kind: "site", Version: 1} }

func (site) Work(_ context.Context, req webhooksdk.Request) (webhooksdk.Outcome, error) {
	switch req.Reaction {
	case "compose":
		return compose(req)
	case "rollup":
		return rollup(req)
	}
	return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("site has no reaction %q", req.Reaction))
}

func compose(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	var spec SiteSpec
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return webhooksdk.Outcome{}, webhooksdk.Terminal(fmt.Errorf("decode site spec: %w", err))
	}
	name := req.Resource.Name
	labels := map[string]string{"site": name}
	var out webhooksdk.Outcome
	for i := range spec.Buckets {
		s, _ := json.Marshal(bucketSpec{Region: spec.Region})
		out.Children = append(out.Children, webhooksdk.Child{Kind: "bucket", KindVersion: 1,
			Name: fmt.Sprintf("%s-bucket-%d", name, i), Labels: labels, Spec: s})
	}
	cdnName := name + "-cdn"
	out.Children = append(out.Children, webhooksdk.Child{Kind: "cdn", KindVersion: 1, Name: cdnName, Labels: labels,
		Spec: json.RawMessage(`{"ttl_secs":300}`)})
	if spec.Buckets > 0 {
		out.Edges = append(out.Edges, webhooksdk.Edge{
			Dependent:  webhooksdk.Ref{Kind: "cdn", Name: cdnName},
			Dependency: webhooksdk.Ref{Kind: "bucket", Name: name + "-bucket-0"},
			Values:     []webhooksdk.ValueFlow{{DependentField: "/origin", SourceField: "/bucket_id"}},
		})
	}
	st, err := json.Marshal(map[string]any{"children": len(out.Children)})
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	out.Status = st
	return out, nil
}

func rollup(req webhooksdk.Request) (webhooksdk.Outcome, error) {
	ready := 0
	var notReady []string
	for _, d := range req.Descendants {
		if d.Phase == "Ready" {
			ready++
		} else {
			notReady = append(notReady, d.Kind+"/"+d.Name+" is "+d.Phase)
		}
	}
	out, err := status(map[string]any{"ready": ready, "total": len(req.Descendants), "not_ready": notReady})
	if err != nil {
		return out, err
	}
	cond := webhooksdk.Condition{Type: "Ready", Status: "True", Reason: "AllChildrenReady"}
	if len(notReady) > 0 {
		cond = webhooksdk.Condition{Type: "Ready", Status: "False", Reason: "ChildrenNotReady",
			Message: fmt.Sprintf("%d of %d children ready", ready, len(req.Descendants))}
	}
	out.Conditions = []webhooksdk.Condition{cond}
	return out, nil
}

func status(v any) (webhooksdk.Outcome, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return webhooksdk.Outcome{}, err
	}
	return webhooksdk.Outcome{Status: b}, nil
}

// FromEnv reads the configuration every host of these providers shares from the
// environment: PROVIDER_SECRETS, the endpoint's signing secret(s), whsec_...,
// comma-separated (required), and WORK_DELAY, the simulated work time per leaf
// (default 0, e.g. 500ms).
func FromEnv() (secrets []string, delay time.Duration, err error) {
	secrets = strings.Split(os.Getenv("PROVIDER_SECRETS"), ",")
	if secrets[0] == "" {
		return nil, 0, errors.New("PROVIDER_SECRETS is required: the endpoint's signing secret (whsec_...)")
	}
	if v := os.Getenv("WORK_DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, 0, fmt.Errorf("WORK_DELAY=%q: want a duration like 500ms", v)
		}
		delay = d
	}
	return secrets, delay, nil
}
