package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/convergeplane/converge/control/store"
)

// AlertSinkApply is the body of POST /alert-sinks.
type AlertSinkApply struct {
	Name       string   `json:"name" doc:"Unique, operator-chosen handle." example:"oncall"`
	Type       string   `json:"sink_type" enum:"webhook,eventbridge,sns,sqs" doc:"Where the alerts go."`
	Target     string   `json:"target" doc:"webhook: the URL (the dispatcher's egress policy applies); eventbridge: the event bus name or ARN; sns: the topic ARN; sqs: the queue URL. A target ending in .fifo is a FIFO queue or topic: its messages carry MessageDeduplicationId."`
	EventTypes []string `json:"event_types" doc:"The alert event types to deliver: endpoint.disabled, breaker.opened, breaker.closed, resource.failed, kind.parked."`
	Kinds      []string `json:"kinds,omitempty" doc:"Only events of these kinds; omitted = every kind."`
	Endpoints  []string `json:"endpoints,omitempty" doc:"Only events of these endpoints; omitted = every endpoint."`
	Enabled    *bool    `json:"enabled,omitempty" doc:"A disabled sink gets no new alerts, and those already queued for it wait until it is enabled again. Default true."`
	Secret     string   `json:"secret,omitempty" writeOnly:"true" doc:"webhook only: the signing secret, whsec_ followed by the standard base64 of 24 to 64 bytes. Never echoed back. Omitted = kept, or generated for a new webhook sink and returned once."`
}

type alertSinkApplyBody struct {
	AlertSinkApply
	bindingReadOnly
}

// AlertSinkView is a sink as the API shows it. Secret is present only in
// the answer that generated or replaced a webhook sink's signing secret.
type AlertSinkView struct {
	store.AlertSink
	Secret string `json:"secret,omitempty" doc:"A webhook sink's signing secret, shown only when it was just set. Store it now."`
}

// AlertSinkList is the body of GET /alert-sinks.
type AlertSinkList struct {
	Items []store.AlertSink `json:"items"`
}

// AlertEventList is the body of GET /alert-events.
type AlertEventList struct {
	Items []store.AlertEvent `json:"items"`
}

type listAlertEventsInput struct {
	Limit int `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"At most this many, newest first."`
}

func (s *Server) registerAlertSinks() {
	if s.cfg.Endpoints == nil {
		return
	}
	register(s, huma.Operation{
		OperationID: "apply-alert-sink", Method: http.MethodPost, Path: "/alert-sinks", Tags: []string{"Alerts"},
		Summary: "Apply an alert sink",
		Description: "Creates (201) or updates (200) the sink by name; X-Apply-Result says created, configured or unchanged. " +
			"Every alert event of a selected type (and kind and endpoint, when the sink names any) logged from then on is delivered " +
			"to it at least once, carrying the event's id as its dedup id (docs/operations.md, Paging on alerts).",
		Errors: []int{400, 422},
	}, AlertSinkApply{}, s.applyAlertSink)
	register(s, huma.Operation{
		OperationID: "list-alert-sinks", Method: http.MethodGet, Path: "/alert-sinks", Tags: []string{"Alerts"},
		Summary: "List alert sinks",
	}, nil, s.listAlertSinks)
	register(s, huma.Operation{
		OperationID: "get-alert-sink", Method: http.MethodGet, Path: "/alert-sinks/{name}", Tags: []string{"Alerts"},
		Summary: "Get an alert sink", Errors: []int{404},
	}, nil, s.getAlertSink)
	register(s, huma.Operation{
		OperationID: "delete-alert-sink", Method: http.MethodDelete, Path: "/alert-sinks/{name}", Tags: []string{"Alerts"},
		Summary: "Delete an alert sink and its undelivered alerts", DefaultStatus: http.StatusNoContent, Errors: []int{404},
	}, nil, s.deleteAlertSink)
	register(s, huma.Operation{
		OperationID: "list-alert-events", Method: http.MethodGet, Path: "/alert-events", Tags: []string{"Alerts"},
		Summary: "List the newest alert events",
	}, nil, s.listAlertEvents)
}

// sinkTargetProblem says why target does not fit a sink of type typ, or "".
func (s *Server) sinkTargetProblem(typ, target string) string {
	switch typ {
	case store.SinkWebhook:
		if u, err := url.Parse(target); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "must be an https URL"
		}
		if err := s.cfg.Endpoints.ValidateURL(target); err != nil {
			return err.Error()
		}
	case store.SinkSQS:
		if u, err := url.Parse(target); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return "must be the queue's URL, https://sqs.<region>.amazonaws.com/<account>/<queue>"
		}
	case store.SinkSNS:
		if !strings.HasPrefix(target, "arn:") || !strings.Contains(target, ":sns:") {
			return "must be the topic's ARN, arn:aws:sns:<region>:<account>:<topic>"
		}
	}
	return ""
}

func (s *Server) applyAlertSink(ctx context.Context, in *applyInput) (*applyOutput[AlertSinkView], error) {
	var b alertSinkApplyBody
	if p := decodeBody(in.RawBody, &b); p != nil {
		return nil, p
	}
	noteObject(ctx, "alert-sinks", b.Name)
	if p := checkSecret(b.Secret); p != nil {
		return nil, p
	}
	params := store.PutAlertSinkParams{Name: b.Name, Type: b.Type, Target: b.Target, EventTypes: b.EventTypes,
		Kinds: b.Kinds, Endpoints: b.Endpoints, Enabled: b.Enabled == nil || *b.Enabled, Secret: store.EndpointSecret(b.Secret)}
	echo := problemOpts{value: func(f string) any {
		switch f {
		case "name":
			return b.Name
		case "sink_type":
			return b.Type
		case "target":
			return b.Target
		}
		return nil
	}}
	if msg := s.sinkTargetProblem(b.Type, b.Target); msg != "" && b.Target != "" {
		return nil, s.problemFor(ctx, &store.InvalidError{Location: "target", Message: msg}, echo)
	}
	out, res, secret, err := s.store.PutAlertSink(ctx, s.cfg.Endpoints.Box, params)
	if err != nil {
		return nil, s.problemFor(ctx, err, echo)
	}
	return &applyOutput[AlertSinkView]{Status: applyStatus(res), ApplyResult: res,
		Body: AlertSinkView{AlertSink: out, Secret: secret.Reveal()}}, nil
}

func (s *Server) listAlertSinks(ctx context.Context, _ *struct{}) (*bodyOutput[AlertSinkList], error) {
	out, err := s.store.ListAlertSinks(ctx)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query"})
	}
	return &bodyOutput[AlertSinkList]{Body: AlertSinkList{Items: out}}, nil
}

func (s *Server) getAlertSink(ctx context.Context, in *namePath) (*bodyOutput[store.AlertSink], error) {
	out, err := s.store.GetAlertSink(ctx, in.Name)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return &bodyOutput[store.AlertSink]{Body: out}, nil
}

func (s *Server) deleteAlertSink(ctx context.Context, in *namePath) (*struct{}, error) {
	if err := s.store.DeleteAlertSink(ctx, in.Name); err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path"})
	}
	return nil, nil
}

func (s *Server) listAlertEvents(ctx context.Context, in *listAlertEventsInput) (*bodyOutput[AlertEventList], error) {
	out, err := s.store.ListAlertEvents(ctx, in.Limit)
	if err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "query"})
	}
	return &bodyOutput[AlertEventList]{Body: AlertEventList{Items: out}}, nil
}
