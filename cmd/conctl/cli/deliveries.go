package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
)

type deliveriesOpts struct {
	endpoint       string
	resource       string
	classification string
	failed         bool
	since          string
	page           pageOpts
}

func (o *deliveriesOpts) query() (url.Values, error) {
	q := url.Values{}
	if o.endpoint != "" {
		q.Set("endpoint", o.endpoint)
	}
	if o.resource != "" {
		kind, name, err := resourceRef("", o.resource)
		if err != nil {
			return nil, usagef("invalid --resource: %v", err)
		}
		q.Set("kind", kind)
		q.Set("name", name)
	}
	if o.classification != "" {
		q.Set("classification", o.classification)
	}
	if o.failed {
		q.Set("failed", "true")
	}
	if o.since != "" {
		if _, err := time.Parse(time.RFC3339Nano, o.since); err != nil {
			return nil, usagef("invalid --since %q: want an RFC 3339 time like 2026-12-01T18:00:00Z", o.since)
		}
		q.Set("since", o.since)
	}
	return q, o.page.query(q)
}

func (a *app) deliveriesCommand() *cobra.Command {
	var o deliveriesOpts
	c := &cobra.Command{
		Use:   "deliveries",
		Short: "List delivery attempts, newest first (paged; --all follows every page)",
		Long: `Deliveries lists the delivery log (GET /deliveries), newest first: every
attempt to deliver a task to an endpoint, success or failure (one per task
of a batch), every 202 and the callback that followed it. A table of ID,
AT, ENDPOINT, RESOURCE, TASK (type, and the verb of an operation), EPOCH
(the claim epoch), ATTEMPT, STATUS (HTTP, 0 when none), LATENCY,
CLASSIFICATION and the start of the EXCERPT; -o json or -o yaml prints the
server's answer. Replay an attempt's task with conctl replay ID.`,
		Example: `  conctl deliveries --failed
  conctl deliveries --endpoint quickstart --limit 20
  conctl deliveries --resource vpc/sample-vpc -o json
  conctl deliveries --classification server_error --since 2026-12-01T18:00:00Z
  conctl deliveries -A --failed`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := o.query()
			if err != nil {
				return err
			}
			return a.list(cmd, typeDelivery, q, o.page.all)
		},
	}
	f := c.Flags()
	f.StringVar(&o.endpoint, "endpoint", "", "only this endpoint's attempts")
	f.StringVar(&o.resource, "resource", "", "only this resource's attempts (KIND/NAME)")
	f.StringVar(&o.classification, "classification", "", "only attempts so classified (ok, task_error, accepted, callback_ok, callback_error, server_error, ...)")
	f.BoolVar(&o.failed, "failed", false, "only failed attempts")
	f.StringVar(&o.since, "since", "", "only attempts at or after this RFC 3339 time")
	o.page.register(c)
	a.allNamespacesFlag(c, typeDelivery)
	return c
}

func (a *app) replayCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "replay DELIVERY-ID",
		Short: "Run a delivery's task again, as a new claim",
		Long: `Replay runs the task of one delivery attempt (see conctl deliveries) again
(POST /deliveries/{id}/replay, answered 202): a reconcile or delete task is
scheduled anew as conctl reconcile does, an operation is invoked again
with the same verb and input. The provider is asked again under a new
claim; the recorded outcome is never re-applied. The resource's events
say "replayed delivery ID". Refused (409) when the resource is gone,
quarantined or orphaned, being deleted (for a reconcile), or the attempt
was a reactor delivery; -o json or -o yaml prints the server's answer.`,
		Example: `  conctl deliveries --resource vpc/sample-vpc --failed
  conctl replay 4711`,
		Args: exactArgs(1, "DELIVERY-ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || id < 1 {
				return usagef("invalid delivery id %q: want a positive integer (the ID column of conctl deliveries)", args[0])
			}
			c, p, err := a.session()
			if err != nil {
				return err
			}
			resp, err := c.Do(cmd.Context(), http.MethodPost, "/deliveries/"+strconv.FormatInt(id, 10)+"/replay", nil, nil)
			if err != nil {
				return err
			}
			return p.answer(resp.Body, func(o obj) string {
				return fmt.Sprintf("delivery %d of %s/%s: %s", id, o.str("delivery", "resource", "kind"),
					o.str("delivery", "resource", "name"), o.str("message"))
			})
		},
	}
}
