package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

// recoverFlags are reconcile's flags for many resources at once (POST
// /resources:reconcile).
type recoverFlags struct {
	selector string
	kind     string
	since    string
	phase    string
	limit    int
	dryRun   bool
}

func (r *recoverFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.StringVarP(&r.selector, "selector", "l", "", "with --failed-since: only resources whose labels meet this selector (key=value, key!=value, key in (a,b), ...)")
	f.StringVar(&r.since, "failed-since", "", "re-drive every resource that entered --phase at or after this RFC 3339 time, instead of one KIND/NAME")
	f.StringVar(&r.phase, "phase", "", "with --failed-since: the phase to recover, Failed (the default) or Degraded")
	f.IntVar(&r.limit, "limit", 0, "with --failed-since: the most resources one call re-drives (server default 100, at most 1000)")
	f.BoolVar(&r.dryRun, "dry-run", false, "with --failed-since: only count and list what would be re-driven")
}

// set says whether a bulk-only flag was given.
func (r *recoverFlags) set(c *cobra.Command) bool {
	for _, n := range []string{"selector", "phase", "limit", "dry-run"} {
		if c.Flags().Changed(n) {
			return true
		}
	}
	return false
}

// body is the request the flags make; a bad --failed-since is a usage
// error before anything is sent.
func (r *recoverFlags) body() ([]byte, error) {
	if _, err := time.Parse(time.RFC3339, r.since); err != nil {
		return nil, usagef("invalid --failed-since %q: want an RFC 3339 time such as 2026-12-05T01:00:00Z", r.since)
	}
	b := map[string]any{"since": r.since}
	if r.selector != "" {
		b["label_selector"] = r.selector
	}
	if r.kind != "" {
		b["kind"] = r.kind
	}
	if r.phase != "" {
		b["phase"] = r.phase
	}
	if r.limit != 0 {
		b["limit"] = r.limit
	}
	return json.Marshal(b)
}

// recoverMany posts the flags' request and prints its counts.
func (a *app) recoverMany(cmd *cobra.Command, r *recoverFlags) error {
	body, err := r.body()
	if err != nil {
		return err
	}
	c, p, err := a.session()
	if err != nil {
		return err
	}
	var q url.Values
	if r.dryRun {
		q = url.Values{"dry_run": {"true"}}
	}
	resp, err := c.Do(cmd.Context(), http.MethodPost, "/resources:reconcile", q, body)
	if err != nil {
		return err
	}
	return p.answer(resp.Body, func(o obj) string {
		more := ""
		if o.get("more") == true {
			more = " (more match: run it again)"
		}
		if r.dryRun {
			return fmt.Sprintf("%s matched, %s would be re-driven (server dry run)%s", o.str("matched"), o.str("reconciled"), more)
		}
		return fmt.Sprintf("%s matched, %s re-driven%s", o.str("matched"), o.str("reconciled"), more)
	})
}
