package cli

import (
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// auditOutcomes are the outcomes GET /audit filters on.
var auditOutcomes = []string{"ok", "refused", "error"}

type auditOpts struct {
	object, subject, outcome, since, until string
	page                                   pageOpts
}

func (o *auditOpts) query() (url.Values, error) {
	q := url.Values{}
	if o.object != "" {
		// KIND/NAME, KIND/ or NAME alone.
		kind, name, ok := strings.Cut(o.object, "/")
		if !ok {
			kind, name = "", o.object
		}
		if kind == "" && name == "" {
			return nil, usagef("invalid --object %q: want KIND/NAME, KIND/ or NAME", o.object)
		}
		if kind != "" {
			q.Set("kind", kind)
		}
		if name != "" {
			q.Set("name", name)
		}
	}
	if o.subject != "" {
		q.Set("subject", o.subject)
	}
	if o.outcome != "" {
		if !slices.Contains(auditOutcomes, o.outcome) {
			return nil, usagef("invalid --outcome %q: want one of %s", o.outcome, strings.Join(auditOutcomes, ", "))
		}
		q.Set("outcome", o.outcome)
	}
	for _, t := range []struct{ flag, value string }{{"since", o.since}, {"until", o.until}} {
		if t.value == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, t.value); err != nil {
			return nil, usagef("invalid --%s %q: want an RFC 3339 time like 2026-12-01T18:00:00Z", t.flag, t.value)
		}
		q.Set(t.flag, t.value)
	}
	return q, o.page.query(q)
}

func (a *app) auditCommand() *cobra.Command {
	var o auditOpts
	c := &cobra.Command{
		Use:   "audit",
		Short: "List the audit trail, newest first (paged; --all follows every page)",
		Long: `Audit lists the audit trail (GET /audit), newest first: every request that
changed or tried to change something (every method but GET, HEAD and
OPTIONS), whatever its outcome, refusals included. A table of ID, AT,
SUBJECT (who called: token:<name>, an OIDC subject, anonymous, or
unauthenticated for a 401), METHOD, PATH, OBJECT (a resource's KIND/NAME,
else the collection and name), VERSIONS (resource_version before -> after),
STATUS, OUTCOME (ok, refused or error) and DRY_RUN; -o wide adds the
namespace, token name, request id and remote address; -o json or -o yaml
prints the server's answer.`,
		Example: `  conctl audit
  conctl audit --object vpc/sample-vpc
  conctl audit --subject token:admin-0 --outcome refused
  conctl audit --since 2026-12-01T18:00:00Z --until 2026-12-02T00:00:00Z --all -o json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := o.query()
			if err != nil {
				return err
			}
			return a.list(cmd, typeAudit, q, o.page.all)
		},
	}
	f := c.Flags()
	f.StringVar(&o.object, "object", "", "only requests that addressed this object: KIND/NAME, KIND/ (any of a kind or collection) or NAME")
	f.StringVar(&o.subject, "subject", "", "only this caller's requests (token:admin-0, an OIDC subject, anonymous, unauthenticated)")
	f.StringVar(&o.outcome, "outcome", "", "only requests with this outcome: "+strings.Join(auditOutcomes, ", "))
	f.StringVar(&o.since, "since", "", "only requests at or after this RFC 3339 time")
	f.StringVar(&o.until, "until", "", "only requests before this RFC 3339 time")
	o.page.register(c)
	return c
}
