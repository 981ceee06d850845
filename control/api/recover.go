package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/model"
	"github.com/convergeplane/converge/control/store"
)

// recoverPath is the bulk reconcile route, a custom method like
// resources:batch (see literalColons).
const recoverPath = "/resources:reconcile"

// ResourceRecover is the body of POST /resources:reconcile.
type ResourceRecover struct {
	Kind          string `json:"kind,omitempty" doc:"Only this kind. Omitted = every kind."`
	LabelSelector string `json:"label_selector,omitempty" doc:"Requirements the labels must all meet, as GET /resources takes them: key=value, key!=value, key in (v1,v2), key notin (v1,v2), key, !key. Omitted = every resource." example:"team=payments"`
	Phase         string `json:"phase,omitempty" enum:"Failed,Degraded" doc:"The phase to recover. Omitted = Failed."`
	Since         string `json:"since" doc:"RFC 3339 time: only resources that entered the phase at or after it (their newest failure, or for Degraded the health flip, at their current generation). Required; send an old time for every one." example:"2026-12-05T01:00:00Z"`
	Limit         int    `json:"limit,omitempty" doc:"The most resources matched and re-driven by one call; more says whether others remain. Omitted (or 0) = 100; at most 1000." minimum:"1" maximum:"1000"`
}

// RecoverResult is the answer of POST /resources:reconcile.
type RecoverResult struct {
	Matched    int                   `json:"matched" doc:"The resources matched, at most limit."`
	Reconciled int                   `json:"reconciled" doc:"Of those, the ones re-driven (on a dry run, the ones that would be). An orphaned resource is matched but not re-driven."`
	More       bool                  `json:"more" doc:"More resources match beyond limit: call again (the ones re-driven no longer match) or raise limit."`
	Items      []store.RecoverTarget `json:"items" doc:"The matched resources, oldest first, each with whether it was re-driven."`
}

type recoverInput struct {
	NamespaceQuery
	RawBody []byte
}

func (s *Server) registerRecover() {
	register(s, huma.Operation{
		OperationID: "reconcile-resources", Method: http.MethodPost, Path: recoverPath, Tags: []string{"Resources"},
		Summary: "Re-drive the resources that failed since a time",
		Description: "Selects the resources of the namespace (?namespace=, default when omitted) in phase (Failed by default) that entered it at or after since, by kind and label " +
			"selector, at most limit of them oldest first, and reconciles each as POST /resources/{kind}/{name}/reconcile does: " +
			"a new claim on its current spec (a terminal failure is lifted and scheduled anew, a queued retry runs now with its " +
			"attempts reset), never a resend of an old request. Each re-driven resource's events get reconcile_requested and recovered (naming the phase and since), one pair per resource. " +
			"A re-driven resource leaves the phase, so a second call re-drives none of them again once their tasks run " +
			"(before then it at most runs the same queued task at once again). ?dry_run=true answers what would be re-driven and changes nothing. " +
			"400 names the field of a bad body and changes nothing.",
		Errors: []int{400, 422},
	}, ResourceRecover{}, s.recoverResources)
}

func (s *Server) recoverResources(ctx context.Context, in *recoverInput) (*bodyOutput[RecoverResult], error) {
	var b ResourceRecover
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	params := store.RecoverParams{Namespace: ns, Kind: b.Kind, Phase: model.Phase(b.Phase), Limit: b.Limit}
	if b.Phase != "" && b.Phase != string(model.PhaseFailed) && b.Phase != string(model.PhaseDegraded) {
		return nil, malformed("body.phase", "must be Failed or Degraded", b.Phase)
	}
	if b.Since == "" {
		return nil, malformed("body.since", "is required: an RFC 3339 time such as 2026-12-05T01:00:00Z", nil)
	}
	since, err := time.Parse(time.RFC3339, b.Since)
	if err != nil {
		return nil, malformed("body.since", "is not an RFC 3339 time such as 2026-12-05T01:00:00Z", b.Since)
	}
	params.Since = since
	if b.Limit < 0 || b.Limit > store.RecoverLimitMax {
		return nil, malformed("body.limit", fmt.Sprintf("must be in 1..%d", store.RecoverLimitMax), b.Limit)
	}
	sel, p := parseSelector(b.LabelSelector)
	if p != nil {
		e := p.Errors[0]
		return nil, malformed("body.label_selector", e.Message, e.Value)
	}
	params.Selector = sel
	res, err := s.store.Recover(ctx, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{value: func(f string) any {
			if f == "label_selector" {
				return b.LabelSelector
			}
			return nil
		}})
	}
	return &bodyOutput[RecoverResult]{Body: RecoverResult{Matched: len(res.Targets),
		Reconciled: res.Reconciled, More: res.More, Items: res.Targets}}, nil
}
