package watchview

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Source reads a composite's subtree, and its laggards' tasks, from the
// REST API.
type Source struct {
	// Get returns the body of a GET of path, relative to /api/v1.
	Get func(ctx context.Context, path string) ([]byte, error)
	// Kind and Name are the composite's.
	Kind, Name string
	// Now stamps each read.
	Now func() time.Time
}

// Snapshot reads the composite's graph.
func (s Source) Snapshot(ctx context.Context) (Snapshot, error) {
	body, err := s.Get(ctx, resourcePath(s.Kind+"/"+s.Name)+"/graph")
	if err != nil {
		return Snapshot{}, err
	}
	return DecodeGraph(body, s.Kind, s.Name, s.Now())
}

// Attempt reads where the task of the resource ref ("kind/name") stands
// from its detail: queued with the attempts that failed and when the next
// is due, running, or parked; the zero Attempt when it has no task.
func (s Source) Attempt(ctx context.Context, ref string) (Attempt, error) {
	body, err := s.Get(ctx, resourcePath(ref))
	if err != nil {
		return Attempt{}, err
	}
	var d struct {
		Task *struct {
			State     string    `json:"state"`
			Attempts  int       `json:"attempts"`
			NotBefore time.Time `json:"not_before"`
		} `json:"task"`
		Parked string `json:"parked"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return Attempt{}, fmt.Errorf("decode %s: %w", ref, err)
	}
	if d.Task == nil {
		return Attempt{}, nil
	}
	a := Attempt{Failed: d.Task.Attempts, Parked: d.Parked}
	switch d.Task.State {
	case "pending":
		a.Next = d.Task.NotBefore
	case "claimed":
		a.Running = true
	}
	return a, nil
}

// resourcePath is the API path of the resource ref, "kind/name".
func resourcePath(ref string) string {
	kind, name, _ := strings.Cut(ref, "/")
	return "/resources/" + url.PathEscape(kind) + "/" + url.PathEscape(name)
}
