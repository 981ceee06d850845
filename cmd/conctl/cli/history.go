package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

func (a *app) historyCommand() *cobra.Command {
	var ref resourceArg
	c := &cobra.Command{
		Use:   "history KIND/NAME",
		Short: "List a resource's spec revisions",
		Long: `History lists a resource's spec revisions, newest first
(GET …/spec-history): a table of REVISION, GENERATION, VERSION (the kind
version) and APPLIED_AT, or with -o json or -o yaml the server's answer,
specs and labels included. A root resource records a revision on each apply
that gives it a new generation; composed children record none.`,
		Example: `  conctl history vpc/sample-vpc
  conctl history vpc/sample-vpc -o yaml`,
		Args: exactArgs(1, "KIND/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, c, p, err := a.resourceCall(&ref, args[0])
			if err != nil {
				return err
			}
			// Every page: the server keeps few revisions, but ends a page
			// at its byte budget.
			return a.printList(cmd.Context(), c, p, typeRevision, t.path+"/spec-history", url.Values{}, true)
		},
	}
	ref.register(c)
	return c
}

func (a *app) rollbackCommand() *cobra.Command {
	var (
		ref      resourceArg
		revision int64
	)
	c := &cobra.Command{
		Use:   "rollback KIND/NAME --revision N",
		Short: "Re-apply an earlier spec revision of a resource",
		Long: `Rollback re-applies the spec of an earlier revision (see history) as an
apply would (POST …/rollback): validated against the current schema, a new
generation, recorded as a new revision; the kind version, labels and
provider config stay as they are. It prints the apply result and the new
generation; -o json or -o yaml prints the resource. --revision is required.`,
		Example: `  conctl history vpc/sample-vpc
  conctl rollback vpc/sample-vpc --revision 2`,
		Args: exactArgs(1, "KIND/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("revision") {
				return usagef("--revision is required: name the revision to re-apply (see conctl history)")
			}
			if revision < 1 {
				return usagef("invalid --revision %d: must be 1 or more", revision)
			}
			t, c, p, err := a.resourceCall(&ref, args[0])
			if err != nil {
				return err
			}
			body, err := json.Marshal(map[string]int64{"revision": revision})
			if err != nil {
				return err
			}
			resp, err := c.Do(cmd.Context(), http.MethodPost, t.path+"/rollback", nil, body)
			if err != nil {
				return err
			}
			return p.answer(resp.Body, func(o obj) string {
				return fmt.Sprintf("%s rolled back to revision %d: %s (generation %s)",
					t.id, revision, resp.ApplyResult(), o.str("generation"))
			})
		},
	}
	ref.register(c)
	c.Flags().Int64Var(&revision, "revision", 0, "the revision to re-apply (required)")
	return c
}
