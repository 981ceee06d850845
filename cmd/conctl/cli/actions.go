package cli

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"
)

// resourceArg is a command's one resource argument: KIND/NAME, or NAME
// with --kind.
type resourceArg struct{ kind string }

func (r *resourceArg) register(c *cobra.Command) {
	c.Flags().StringVar(&r.kind, "kind", "", "the resource's kind (then NAME alone)")
}

func (r *resourceArg) parse(arg string) (target, error) {
	t, err := resourceTargets(r.kind, []string{arg})
	if err != nil {
		return target{}, err
	}
	return t[0], nil
}

// resourceCall parses a command's resource argument and returns it with the
// client and printer the call on it needs.
func (a *app) resourceCall(ref *resourceArg, arg string) (target, *Client, *printer, error) {
	t, err := ref.parse(arg)
	if err != nil {
		return target{}, nil, nil, err
	}
	c, err := a.api()
	if err != nil {
		return target{}, nil, nil, err
	}
	p, err := a.printer()
	if err != nil {
		return target{}, nil, nil, err
	}
	return t, c, p, nil
}

// resourceAction is a POST to one resource's path+suffix with no body;
// line renders the table-format result line from the answer.
func (a *app) resourceAction(use, short, long, example, suffix string, line func(id string, o obj) string) *cobra.Command {
	var ref resourceArg
	c := &cobra.Command{
		Use:     use + " KIND/NAME",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    exactArgs(1, "KIND/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, c, p, err := a.resourceCall(&ref, args[0])
			if err != nil {
				return err
			}
			resp, err := c.Do(cmd.Context(), http.MethodPost, t.path+suffix, nil, nil)
			if err != nil {
				return err
			}
			return p.answer(resp.Body, func(o obj) string { return line(t.id, o) })
		},
	}
	ref.register(c)
	return c
}

func (a *app) quarantineCommands() []*cobra.Command {
	phase := func(verb string) func(string, obj) string {
		return func(id string, o obj) string { return fmt.Sprintf("%s %s: phase %s", id, verb, o.str("phase")) }
	}
	return []*cobra.Command{
		a.resourceAction("quarantine", "Set a resource aside (phase Quarantined)",
			`Quarantine sets a resource aside (POST …/quarantine): no scheduler or
value flow touches it until it is unquarantined. It prints the resulting
phase; -o json or -o yaml prints the resource. A resource being deleted
cannot be quarantined (409).`,
			`  conctl quarantine vpc/sample-vpc
  conctl quarantine --kind vpc sample-vpc -o json`,
			"/quarantine", phase("quarantined")),
		a.resourceAction("unquarantine", "Release a quarantined resource",
			`Unquarantine releases a quarantined resource (POST …/unquarantine); it then
reconciles to its latest spec. It prints the resulting phase; -o json or
-o yaml prints the resource.`,
			`  conctl unquarantine vpc/sample-vpc`,
			"/unquarantine", phase("unquarantined")),
	}
}

func (a *app) reconcileCommand() *cobra.Command {
	c := a.resourceAction("reconcile", "Run a resource's reaction again now, or every one failed since a time",
		`Reconcile asks the server to run a resource's reaction again now
(POST …/reconcile, answered 202): a queued task runs at once with its
attempts reset, a terminal failure is retried, a settled resource re-runs
without a new generation, and a resource being deleted retries its
teardown. An orphaned or quarantined resource is refused (409).

With --failed-since instead of KIND/NAME it re-drives, the same way, every
resource (of --kind, meeting --selector) in phase Failed (or --phase
Degraded) since that time, at most --limit of them (POST
/resources:reconcile), and prints how many matched and were re-driven, and
whether more remain. --dry-run only counts.`,
		`  conctl reconcile vpc/sample-vpc
  conctl reconcile --selector team=payments --failed-since 2026-12-05T01:00:00Z --dry-run
  conctl reconcile --kind vpc --failed-since 2026-12-05T01:00:00Z --limit 500`,
		"/reconcile", func(id string, o obj) string { return id + " " + o.str("message") })
	var r recoverFlags
	r.register(c)
	one := c.RunE
	c.Use = "reconcile (KIND/NAME | --failed-since TIME)"
	c.Args = cobra.MaximumNArgs(1)
	c.RunE = func(cmd *cobra.Command, args []string) error {
		switch {
		case r.since == "" && r.set(cmd):
			return usagef("--selector, --phase, --limit and --dry-run need --failed-since")
		case r.since == "":
			if err := exactArgs(1, "KIND/NAME")(cmd, args); err != nil {
				return err
			}
			return one(cmd, args)
		case len(args) > 0:
			return usagef("unexpected argument %q: --failed-since re-drives many resources, not one KIND/NAME", args[0])
		}
		r.kind, _ = cmd.Flags().GetString("kind")
		return a.recoverMany(cmd, &r)
	}
	return c
}
