package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// describeRecent is how many events and deliveries describe shows.
const describeRecent = 10

func (a *app) describeCommand() *cobra.Command {
	cmd := typeGroup("describe", "Show an object with its conditions, task, events and deliveries",
		`Describe shows one object and what explains its state, in one view: a
resource with its conditions, current task (claim, attempts, lease, last
error, why it waits), its newest events and its newest delivery attempts;
an endpoint with its newest delivery attempts. -o json or yaml (and
jsonpath=…, go-template=…) print {"resource"|"endpoint": ..., "events": [...],
"deliveries": [...]} as the server answered each.`)
	cmd.Example = `  conctl describe resource vpc/sample-vpc
  conctl describe endpoint quickstart
  conctl describe res vpc/sample-vpc -o json`

	var kind string
	res := &cobra.Command{
		Use:     "resource KIND/NAME",
		Aliases: typeResource.aliases,
		Short:   "Describe a resource (KIND/NAME, or NAME with --kind)",
		Args:    exactArgs(1, "KIND/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, n, err := resourceRef(kind, args[0])
			if err != nil {
				return err
			}
			base := "/resources/" + seg(k) + "/" + seg(n)
			return a.describe(cmd.Context(), typeResource, base, map[string]string{
				"events":     base + "/events",
				"deliveries": "/deliveries?" + url.Values{"kind": {k}, "name": {n}}.Encode(),
			})
		},
	}
	res.Flags().StringVar(&kind, "kind", "", "the resource's kind (then NAME alone)")
	ep := &cobra.Command{
		Use:     "endpoint NAME",
		Aliases: typeEndpoint.aliases,
		Short:   "Describe an endpoint and its newest delivery attempts",
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			base := "/endpoints/" + seg(args[0])
			return a.describe(cmd.Context(), typeEndpoint, base, map[string]string{"deliveries": base + "/deliveries"})
		},
	}
	cmd.AddCommand(res, ep)
	return cmd
}

// describe reads the object at path and the lists of parts (each the
// newest describeRecent items; a 404 of a list, as from a server without
// endpoints, is an empty list), then prints them.
func (a *app) describe(ctx context.Context, t *objectType, path string, parts map[string]string) error {
	a.objectOutput = true
	c, p, err := a.session()
	if err != nil {
		return err
	}
	object, err := c.Get(ctx, path, nil)
	if err != nil {
		return err
	}
	doc := map[string]json.RawMessage{t.name: object}
	lists := map[string][]json.RawMessage{}
	for _, name := range slices.Sorted(maps.Keys(parts)) {
		target := parts[name]
		lp, rawQuery, _ := strings.Cut(target, "?")
		q, _ := url.ParseQuery(rawQuery)
		q.Set("limit", strconv.Itoa(describeRecent))
		page, _, err := c.List(ctx, lp, q, false)
		var ae *APIError
		if errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound {
			err = nil
		}
		if err != nil {
			return err
		}
		items := page.Items
		if items == nil {
			items = []json.RawMessage{}
		}
		lists[name] = items
		if doc[name], err = json.Marshal(items); err != nil {
			return err
		}
	}
	switch p.format {
	case outputName:
		return p.names(t, []json.RawMessage{object})
	case outputJSON, outputYAML, outputJSONPath, outputGoTemplate:
		body, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		return p.object(t, body)
	}
	o, err := decodeObject(object)
	if err != nil {
		return err
	}
	var buf strings.Builder
	if t == typeResource {
		describeResource(&buf, o, lists["events"], a.now())
	} else {
		describeEndpoint(&buf, o)
	}
	if d := lists["deliveries"]; len(d) > 0 {
		fmt.Fprintf(&buf, "\nDeliveries (newest %d):\n", len(d))
		var tbl strings.Builder
		if err := (&printer{format: outputTable, w: &tbl, now: a.now}).table(typeDelivery, d); err != nil {
			return err
		}
		for line := range strings.Lines(tbl.String()) {
			buf.WriteString("  " + line)
		}
	} else {
		fmt.Fprintln(&buf, "\nDeliveries: <none>")
	}
	_, err = io.WriteString(a.stdout, buf.String())
	return err
}

// kv writes aligned "Key: value" lines.
type kv struct{ tw *tabwriter.Writer }

func newKV(w io.Writer) kv { return kv{tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)} }

func (k kv) add(key, value string) { fmt.Fprintf(k.tw, "%s:\t%s\n", key, cell(value)) }

func (k kv) flush() { _ = k.tw.Flush() }

func describeResource(w io.Writer, o obj, events []json.RawMessage, now time.Time) {
	k := newKV(w)
	k.add("Name", o.str("kind")+"/"+o.str("name"))
	k.add("Namespace", o.str("namespace"))
	k.add("Kind version", o.str("kind_version"))
	k.add("Phase", o.str("phase"))
	k.add("Generation", o.str("generation")+" (synced "+o.str("synced_gen")+")")
	k.add("Labels", labels(o.get("labels")))
	k.add("Owner", o.str("owner_id"))
	k.add("Provider config", o.str("provider_config_ref"))
	k.add("Resource version", o.str("resource_version"))
	k.add("Created", timestamp(o.str("created_at"))+" ("+age(o.str("created_at"), now)+" ago)")
	k.add("Updated", timestamp(o.str("updated_at")))
	if e := o.str("last_error"); e != "" {
		k.add("Last error", e)
	}
	if why := o.str("parked"); why != "" {
		k.add("Parked", why)
	}
	k.flush()
	writeJSONBlock(w, "Spec", o.get("spec"))
	writeJSONBlock(w, "Status", o.get("status"))

	conds, _ := o.get("conditions").([]any)
	if len(conds) == 0 {
		fmt.Fprintln(w, "\nConditions: <none>")
	} else {
		fmt.Fprintln(w, "\nConditions:")
		tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
		fmt.Fprintln(tw, "  TYPE\tSTATUS\tREASON\tLAST_TRANSITION\tMESSAGE")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			c := obj(m)
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", cell(c.str("type")), cell(c.str("status")), cell(c.str("reason")),
				cell(timestamp(c.str("last_transition_time"))), cell(c.str("message")))
		}
		_ = tw.Flush()
	}

	if task, ok := o.get("task").(map[string]any); ok {
		t := obj(task)
		fmt.Fprintln(w, "\nTask:")
		k := newKV(w)
		k.add("  ID", t.str("task_id"))
		k.add("  Type", t.str("task_type"))
		k.add("  State", t.str("state"))
		trigger := t.str("trigger")
		if r := t.str("reaction"); r != "" {
			trigger += " (" + r + ")"
		}
		k.add("  Trigger", trigger)
		k.add("  Generation", t.str("generation"))
		k.add("  Attempts", t.str("attempts"))
		k.add("  Claim epoch", t.str("claim_epoch"))
		if by := t.str("claimed_by"); by != "" {
			k.add("  Claimed by", by+" at "+timestamp(t.str("claimed_at")))
			k.add("  Lease until", timestamp(t.str("lease_until")))
		}
		k.add("  Not before", timestamp(t.str("not_before")))
		if e := t.str("last_error"); e != "" {
			k.add("  Last error", e)
		}
		k.flush()
	} else {
		fmt.Fprintln(w, "\nTask: <none>")
	}

	if len(events) == 0 {
		fmt.Fprintln(w, "\nEvents: <none>")
		return
	}
	fmt.Fprintf(w, "\nEvents (newest %d):\n", len(events))
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "  AT\tTYPE\tGEN\tBY\tMESSAGE")
	for _, raw := range events {
		e, err := decodeObject(raw)
		if err != nil {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", timestamp(e.str("at")), cell(e.str("type")), cell(e.str("generation")), cell(e.str("actor")),
			cell(truncate(e.str("message"), 100)))
	}
	_ = tw.Flush()
}

func describeEndpoint(w io.Writer, o obj) {
	k := newKV(w)
	k.add("Name", o.str("name"))
	k.add("Namespace", o.str("namespace"))
	k.add("Type", o.str("target", "type"))
	k.add("Target", endpointTarget(o))
	k.add("Kinds", kindVersions(o.get("kinds")))
	k.add("Enabled", o.str("enabled"))
	if rate := o.str("rate_limit"); rate != "" {
		k.add("Rate limit", rate+"/s, burst "+o.str("burst")+adaptiveText(o))
		k.add("Effective rate", o.str("rate_state", "effective_rate")+"/s")
		k.add("Waited", o.str("rate_state", "waited")+" requests (sent after the shared bucket ran dry)")
		k.add("Throttles", o.str("rate_state", "throttles")+" (429s and Lambda throttles)")
	}
	k.add("Created", timestamp(o.str("created_at")))
	k.add("Updated", timestamp(o.str("updated_at")))
	k.flush()
}

// adaptiveText marks an adaptive rate limit.
func adaptiveText(o obj) string {
	if o.str("rate_adaptive") == "true" {
		return ", adaptive"
	}
	return ""
}

// writeJSONBlock writes "Title:" and v as indented JSON, or "Title: <none>".
func writeJSONBlock(w io.Writer, title string, v any) {
	if v == nil {
		fmt.Fprintf(w, "\n%s: <none>\n", title)
		return
	}
	b, err := json.MarshalIndent(v, "  ", "  ")
	if err != nil {
		return
	}
	fmt.Fprintf(w, "\n%s:\n  %s\n", title, b)
}
