package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

// roleBindingFilters are the flags of `get rolebindings`: where, and which.
type roleBindingFilters struct {
	namespace, role, user, group string
	allNamespaces                bool
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
			if f.allNamespaces && f.namespace != "" {
				return usagef("--namespace and --all-namespaces are exclusive")
			}
			if len(args) == 1 {
				if f.role != "" || f.user != "" || f.group != "" || f.allNamespaces {
					return usagef("--role, --user, --group and --all-namespaces filter a list: give no NAME")
				}
				return a.getOne(cmd, typeRoleBinding, collectionPath(typeRoleBinding)+"/"+seg(args[0]), nil)
			}
			q := url.Values{}
			for k, v := range map[string]string{"namespace": f.namespace, "role": f.role, "user": f.user, "group": f.group} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if f.allNamespaces {
				q.Set("namespace", "*")
			}
			return a.list(cmd, typeRoleBinding, q, false)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.namespace, "namespace", "", "list the bindings that grant a role in this namespace (its own and the cluster-wide ones; default: default)")
	fl.BoolVar(&f.allNamespaces, "all-namespaces", false, "list every binding (needs a cluster-wide role)")
	fl.StringVar(&f.role, "role", "", "only bindings of this role (viewer, editor, operator, admin)")
	fl.StringVar(&f.user, "user", "", "only bindings of this user")
	fl.StringVar(&f.group, "group", "", "only bindings of this group")
	return c
}

// createCommand is `create rolebinding NAME --role R (--user U | --group
// G) [--namespace N | --cluster]`: PUT /role-bindings/NAME.
func (a *app) createCommand() *cobra.Command {
	cmd := typeGroup("create", "Create or replace an object from flags",
		`Create writes an object described by flags rather than a file.`)
	cmd.Example = `  conctl create rolebinding alice-edits --role editor --user alice --namespace team-a
  conctl create rolebinding platform-admins --role admin --group platform --cluster`
	var (
		role, user, group, namespace string
		cluster                      bool
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
			case cluster && namespace != "":
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
			var q url.Values
			if namespace != "" {
				q = url.Values{"namespace": {namespace}}
			}
			cl, p, err := a.session()
			if err != nil {
				return err
			}
			resp, err := cl.Do(cmd.Context(), http.MethodPut, collectionPath(typeRoleBinding)+"/"+seg(args[0]), q, body)
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
	fl.StringVar(&namespace, "namespace", "", "the namespace it is granted in (default: default)")
	fl.BoolVar(&cluster, "cluster", false, "grant it in every namespace and over the cluster-wide objects")
	cmd.AddCommand(c)
	return cmd
}
