package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

// roleBindingFilters are the flags of `get rolebindings`: which (where is
// -n or -A).
type roleBindingFilters struct {
	role, user, group string
}

// getRoleBindingsCommand is `get rolebinding [NAME]`: one binding by name,
// or without NAME the bindings that grant a role in a namespace.
func (a *app) getRoleBindingsCommand() *cobra.Command {
	var f roleBindingFilters
	c := &cobra.Command{
		Use:     typeRoleBinding.name + " [NAME]",
		Aliases: typeRoleBinding.aliases,
		Short:   "Show a role binding by name, or list those that grant a role in a namespace",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("too many arguments %q: want at most NAME", args[1:])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if f.role != "" || f.user != "" || f.group != "" || a.allNamespaces {
					return usagef("--role, --user, --group and --all-namespaces filter a list: give no NAME")
				}
				return a.getOne(cmd, typeRoleBinding, collectionPath(typeRoleBinding)+"/"+seg(args[0]), nil)
			}
			q := url.Values{}
			for k, v := range map[string]string{"role": f.role, "user": f.user, "group": f.group} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if a.allNamespaces {
				q.Set("namespace", namespaceAll)
			}
			return a.list(cmd, typeRoleBinding, q, false)
		},
	}
	fl := c.Flags()
	a.allNamespacesFlag(c, typeRoleBinding)
	fl.StringVar(&f.role, "role", "", "only bindings of this role (viewer, editor, operator, admin)")
	fl.StringVar(&f.user, "user", "", "only bindings of this user")
	fl.StringVar(&f.group, "group", "", "only bindings of this group")
	return c
}

// createRoleBindingCommand is `create rolebinding NAME --role R (--user U
// | --group G) [-n N | --cluster]`: PUT /role-bindings/NAME in the
// namespace of -n (Client.Do adds it), or cluster-wide.
func (a *app) createRoleBindingCommand() *cobra.Command {
	var (
		role, user, group string
		cluster           bool
	)
	c := &cobra.Command{
		Use:     typeRoleBinding.name + " NAME",
		Aliases: typeRoleBinding.aliases,
		Short:   "Grant a role to a user or a group in a namespace, or cluster-wide",
		Args:    exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case role == "":
				return usagef("--role is required: viewer, editor, operator or admin")
			case (user == "") == (group == ""):
				return usagef("give exactly one of --user and --group")
			case cluster && cmd.Flags().Changed("namespace"):
				return usagef("--namespace and --cluster are exclusive")
			}
			body, err := json.Marshal(struct {
				Role        string `json:"role"`
				User        string `json:"user,omitempty"`
				Group       string `json:"group,omitempty"`
				ClusterWide bool   `json:"cluster_wide,omitempty"`
			}{role, user, group, cluster})
			if err != nil {
				return err
			}
			cl, p, err := a.session()
			if err != nil {
				return err
			}
			resp, err := cl.Do(cmd.Context(), http.MethodPut, collectionPath(typeRoleBinding)+"/"+seg(args[0]), nil, body)
			if err != nil {
				return err
			}
			if p.format == outputTable {
				_, err = fmt.Fprintf(a.stdout, "%s/%s %s\n", typeRoleBinding.name, args[0], resp.ApplyResult())
				return err
			}
			return p.stream(resp.Body, true)
		},
	}
	fl := c.Flags()
	fl.StringVar(&role, "role", "", "the role granted: viewer, editor, operator or admin (required)")
	fl.StringVar(&user, "user", "", "the user granted it (an OIDC subject)")
	fl.StringVar(&group, "group", "", "the group granted it (from the groups claim)")
	fl.BoolVar(&cluster, "cluster", false, "grant it in every namespace and over the cluster-wide objects (not with -n)")
	return c
}
