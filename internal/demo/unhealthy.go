package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/convergeplane/converge/internal/watchview"
)

// parkThenReady is the unhealthy demo's first act. It watches the tree
// until every resource of the kind d.unready is parked and every other child
// is Ready, says why they park, waits d.readyAfter and makes the kind ready
// through the provider's readiness switch at admin. The watch that follows
// sees the parked resources run.
func (d Demo) parkThenReady(ctx context.Context, out io.Writer, src watchview.Source, opts watchview.Options, admin string) error {
	var parked, ready []string
	var why []string
	opts.Until = func(ctx context.Context, s watchview.Snapshot) bool {
		parked, ready, why = nil, nil, nil
		for _, n := range s.Children {
			switch {
			case n.Kind != d.unready && n.Phase == "Ready":
				ready = append(ready, n.Ref())
			case n.Kind != d.unready:
				return false
			default:
				a, err := src.Attempt(ctx, n.Ref())
				if err != nil || a.Parked == "" {
					return false
				}
				parked, why = append(parked, n.Ref()), append(why, a.Parked)
			}
		}
		return len(parked) > 0
	}
	if _, err := watchview.Watch(ctx, src.Snapshot, opts); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%s reports not ready, so its resources park while the rest converges:\n", d.unready)
	for i, ref := range parked {
		fmt.Fprintf(out, "  %s parked: %s\n", ref, why[i])
	}
	fmt.Fprintf(out, "  Ready: %s\n", refList(ready))
	switchURL := admin + "/ready/" + d.unready
	fmt.Fprintf(out, "making %s ready in %s (curl -X POST %s)\n", d.unready, d.readyAfter, switchURL)
	t := time.NewTimer(d.readyAfter)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, switchURL, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("make %s ready: %w", d.unready, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("make %s ready: POST %s: %s", d.unready, switchURL, resp.Status)
	}
	fmt.Fprintf(out, "%s reports ready: its parked resources run (from the next health probe)\n\n", d.unready)
	return nil
}
