package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// namespaceAll is the value of the query parameter namespace that lists
// every namespace (what -A sends).
const namespaceAll = "*"

// namespaceName is the form of a namespace's name, as the server checks it.
var namespaceName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// namespacedCollections are the first path segments of the API's
// namespaced objects: every request under them carries the namespace.
var namespacedCollections = []string{"resources", "providerconfigs", "reactor-bindings", "endpoints", "deliveries", "role-bindings"}

// namespacedPath says whether path (relative to /api/v1) addresses
// namespaced objects: a resource (and its operations, history, graph), a
// provider config, reactor binding, endpoint or delivery, or one of their
// collections (and /resources:batch).
func namespacedPath(path string) bool {
	first, _, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	first, _, _ = strings.Cut(first, ":")
	for _, c := range namespacedCollections {
		if first == c {
			return true
		}
	}
	return false
}

// checkNamespace refuses a name the server would refuse, before asking it;
// from says where the name came from.
func checkNamespace(name, from string) error {
	if name == namespaceAll {
		return usagef("invalid %s %q: pass -A (--all-namespaces) to list every namespace", from, name)
	}
	if !namespaceName.MatchString(name) {
		return usagef("invalid %s %q: a namespace name is 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit", from, name)
	}
	return nil
}

// resolveNamespace says which namespace the commands address: -n, else
// $CONVERGE_NAMESPACE, else the context's namespace (ctxFrom names it
// for messages), else "default". explicit names -n or the variable when
// one of them chose it ("" when the context or the default did): a
// manifest's namespace must then agree with it.
func (a *app) resolveNamespace(ctx *Context, ctxFrom string) (ns, explicit string, err error) {
	switch {
	case a.namespace != "":
		ns, explicit = a.namespace, "--namespace"
	case a.getenv(EnvNamespace) != "":
		ns, explicit = a.getenv(EnvNamespace), "$"+EnvNamespace
	case ctx.Namespace != "":
		ns = ctx.Namespace
		if err := checkNamespace(ns, ctxFrom); err != nil {
			return "", "", err
		}
		return ns, "", nil
	default:
		return NamespaceDefault, "", nil
	}
	return ns, explicit, checkNamespace(ns, explicit)
}

// namespaceQuery is the value of the namespace parameter of a list: "*"
// under -A, else the client's namespace.
func (a *app) namespaceQuery(c *Client) string {
	if a.allNamespaces {
		return namespaceAll
	}
	return c.namespace
}

// addAllNamespacesFlag gives list's subcommands of namespaced types -A.
func (a *app) addAllNamespacesFlag(group *cobra.Command) {
	for _, c := range group.Commands() {
		if t, ok := lookupType(c.Name()); ok && t.namespaced {
			a.allNamespacesFlag(c, t)
		}
	}
}

// allNamespacesFlag gives cmd, which lists objects of type t, -A.
func (a *app) allNamespacesFlag(cmd *cobra.Command, t *objectType) {
	cmd.Flags().BoolVarP(&a.allNamespaces, "all-namespaces", "A", false,
		"list the "+t.plural+" of every namespace (a NAMESPACE column leads the table); -n is then ignored")
}

// watchKey tells a watched list's items apart: by their name, and under
// -A by their namespace too (the same name may live in several).
func (a *app) watchKey(t *objectType, raw json.RawMessage) string {
	name := objectNameOf(t, raw)
	if !a.allNamespaces {
		return name
	}
	var o struct {
		Namespace string `json:"namespace"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Namespace + "/" + name
}

// documentNamespace is the namespace of the document d of type t: the
// one it names, else the client's; "" for a cluster-wide type. A document
// that names its namespace is applied there, unless -n or
// $CONVERGE_NAMESPACE names another: that is an error.
func (a *app) documentNamespace(c *Client, t *objectType, d document) (string, error) {
	if !t.namespaced {
		return "", nil
	}
	ns := stringField(d.fields, "namespace")
	switch {
	case ns == "":
		return c.namespace, nil
	case a.nsExplicit != "" && ns != c.namespace:
		return "", fmt.Errorf("its namespace %q disagrees with %s %q: drop one, or make them agree", ns, a.nsExplicit, c.namespace)
	}
	return ns, nil
}

// documentQuery is the query of a write of the document d of type t (and
// of the read of its live object): base in the document's namespace
// (documentNamespace; see queryIn).
func (a *app) documentQuery(c *Client, t *objectType, d document, base url.Values) (url.Values, error) {
	ns, err := a.documentNamespace(c, t, d)
	if err != nil || ns == "" {
		return base, err
	}
	return c.queryIn(base, ns), nil
}

// queryIn is base addressing the namespace ns: as it is when ns is the
// client's (Client.Do adds that one), else a copy naming ns, even
// "default", which Do would otherwise replace with the client's.
func (c *Client) queryIn(base url.Values, ns string) url.Values {
	if ns == c.namespace {
		return base
	}
	return withParam(base, "namespace", ns)
}

// namespaceBody is the body of PUT /namespaces/{name}: its labels and
// quotas, each only when given.
type namespaceBody struct {
	Labels      map[string]string `json:"labels,omitempty"`
	MaxObjects  *int              `json:"max_objects,omitempty"`
	MaxInFlight *int              `json:"max_in_flight,omitempty"`
}

func (a *app) createCommand() *cobra.Command {
	cmd := typeGroup("create", "Create objects that no file describes",
		`Create makes an object from its flags alone: a namespace or a role binding.`)
	cmd.Example = `  conctl create namespace team-a
  conctl create namespace team-b --max-objects 5000 --max-in-flight 50 --label owner=payments
  conctl create rolebinding alice-edits --role editor --user alice -n team-a
  conctl create rolebinding platform-admins --role admin --group platform --cluster`
	cmd.AddCommand(a.createRoleBindingCommand())

	var (
		maxObjects, maxInFlight int
		labelPairs              []string
	)
	c := &cobra.Command{
		Use:     "namespace NAME",
		Aliases: typeNamespace.aliases,
		Short:   "Create a namespace, with its quotas of objects and tasks in flight",
		Long: `Create namespace makes the namespace NAME; it fails if NAME exists.
--max-objects caps how many resources it may hold, --max-in-flight how
many of its tasks may be in flight at once; without them it has no quota.`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkNamespace(name, "namespace name"); err != nil {
				return err
			}
			var body namespaceBody
			fl := cmd.Flags()
			for _, q := range []struct {
				flag string
				v    int
				dst  **int
			}{{"max-objects", maxObjects, &body.MaxObjects}, {"max-in-flight", maxInFlight, &body.MaxInFlight}} {
				if !fl.Changed(q.flag) {
					continue
				}
				if q.v < 0 {
					return usagef("invalid --%s %d: must not be negative", q.flag, q.v)
				}
				*q.dst = &q.v
			}
			for _, kv := range labelPairs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usagef("invalid --label %q: want KEY=VALUE", kv)
				}
				if body.Labels == nil {
					body.Labels = map[string]string{}
				}
				body.Labels[k] = v
			}
			c, p, err := a.session()
			if err != nil {
				return err
			}
			path := collectionPath(typeNamespace) + "/" + seg(name)
			var ae *APIError
			switch _, err := c.Get(consistent(cmd.Context()), path, nil); {
			case err == nil:
				return fmt.Errorf("namespace %q already exists", name)
			case !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound:
				return err
			}
			data, err := json.Marshal(body)
			if err != nil {
				return err
			}
			resp, err := c.Do(cmd.Context(), http.MethodPut, path, nil, data)
			if err != nil {
				return err
			}
			return p.answer(resp.Body, func(obj) string { return typeNamespace.name + "/" + name + " created" })
		},
	}
	c.Flags().IntVar(&maxObjects, "max-objects", 0, "how many resources it may hold (default: no quota)")
	c.Flags().IntVar(&maxInFlight, "max-in-flight", 0, "how many of its tasks may be in flight at once (default: no quota)")
	c.Flags().StringArrayVar(&labelPairs, "label", nil, "a label KEY=VALUE; repeatable")
	cmd.AddCommand(c)
	return cmd
}

// getNamespaceCommand is `get namespace [NAME]`: one namespace, or with no
// NAME every one (as `list namespaces`).
func (a *app) getNamespaceCommand() *cobra.Command {
	return &cobra.Command{
		Use:     typeNamespace.name + " [NAME]",
		Aliases: typeNamespace.aliases,
		Short:   "Show a namespace, or every namespace when no NAME is given",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("too many arguments %q: want at most NAME", args[1:])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return a.list(cmd, typeNamespace, url.Values{}, true)
			}
			return a.getOne(cmd, typeNamespace, collectionPath(typeNamespace)+"/"+seg(args[0]), nil)
		},
	}
}

// completeNamespaces lists the namespaces whose names start with prefix.
func (a *app) completeNamespaces(cmd *cobra.Command, prefix string) ([]string, cobra.ShellCompDirective) {
	return a.completeNames(cmd, collectionPath(typeNamespace), nil, "", prefix), cobra.ShellCompDirectiveNoFileComp
}
