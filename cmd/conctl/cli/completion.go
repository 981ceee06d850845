package cli

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completionTimeout bounds the API calls of a shell completion: a slow or
// unreachable server must not hang the user's Tab.
const completionTimeout = 2 * time.Second

// completionLimit is how many names a completion asks for.
const completionLimit = 200

// addCompletions gives every command under root whose arguments name
// objects a completion of them from the server (for bash, zsh, fish and
// powershell through cobra's completion command): KIND/NAME arguments
// complete kinds, then the kind's resource names; KIND arguments and
// --kind flags complete kinds; NAME arguments of provider configs, reactor
// bindings and endpoints their names, of get and delete namespace and of
// -n the namespaces, and of config's context commands the contexts. A
// completion that fails (no server, no token) offers
// nothing and prints nothing.
func (a *app) addCompletions(root *cobra.Command) {
	_ = root.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return a.completeNamespaces(cmd, toComplete)
	})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Flags().Lookup("kind") != nil {
			_ = c.RegisterFlagCompletionFunc("kind", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				return a.completeKinds(cmd, toComplete, ""), cobra.ShellCompDirectiveNoFileComp
			})
		}
		if c.ValidArgsFunction != nil {
			return
		}
		fields := strings.Fields(c.Use)
		if len(fields) < 2 {
			return
		}
		arg, many := strings.CutSuffix(fields[1], "...")
		var complete func(cmd *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective)
		switch {
		case arg == "KIND/NAME":
			complete = a.completeResource
		case arg == "KIND":
			complete = func(cmd *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective) {
				return a.completeKinds(cmd, toComplete, ""), cobra.ShellCompDirectiveNoFileComp
			}
		case c.Name() == typeNamespace.name && c.Parent() != nil && c.Parent().Name() != "create":
			complete = a.completeNamespaces
		case arg == "NAME" && c.Parent() != nil && c.Parent().Name() == "config":
			complete = a.completeContexts
		case arg == "NAME":
			t, ok := lookupType(c.Name())
			if !ok || (t != typeProviderConfig && t != typeReactorBinding && t != typeEndpoint && t != typeAlertSink) {
				return
			}
			complete = func(cmd *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective) {
				var q url.Values
				if t == typeProviderConfig {
					q = url.Values{"limit": {strconv.Itoa(completionLimit)}}
				}
				return a.completeNames(cmd, collectionPath(t), q, "", toComplete), cobra.ShellCompDirectiveNoFileComp
			}
		default:
			return
		}
		c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 && !many {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return complete(cmd, toComplete)
		}
	}
	walk(root)
}

// completionClient is the API client with the completion's short timeout
// and no retries; nil when it cannot be built.
func (a *app) completionClient(cmd *cobra.Command) *Client {
	if !cmd.Flags().Changed("timeout") {
		a.timeout = completionTimeout
	}
	a.retries = 0
	c, err := a.api()
	if err != nil {
		return nil
	}
	return c
}

// completeResource completes KIND/NAME: the kinds (with their slash, and
// no space after) until a slash is typed, then the kind's resources whose
// names start with what follows it.
func (a *app) completeResource(cmd *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective) {
	kind, prefix, ok := strings.Cut(toComplete, "/")
	if !ok {
		if k, _ := cmd.Flags().GetString("kind"); k != "" {
			return a.completeNames(cmd, "/resources", url.Values{"kind": {k}, "fields": {"-spec,-status"}, "limit": {strconv.Itoa(completionLimit)}}, "", toComplete), cobra.ShellCompDirectiveNoFileComp
		}
		return a.completeKinds(cmd, toComplete, "/"), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	}
	q := url.Values{"kind": {kind}, "fields": {"-spec,-status"}, "limit": {strconv.Itoa(completionLimit)}}
	if prefix != "" {
		q.Set("name_prefix", prefix)
	}
	return a.completeNames(cmd, "/resources", q, kind+"/", prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeKinds lists the kinds starting with prefix, each followed by
// suffix.
func (a *app) completeKinds(cmd *cobra.Command, prefix, suffix string) []string {
	c := a.completionClient(cmd)
	if c == nil {
		return nil
	}
	page, _, err := c.List(cmd.Context(), "/kinds", nil, false)
	if err != nil {
		return nil
	}
	var out []string
	for _, raw := range page.Items {
		o, err := decodeObject(raw)
		if err != nil {
			continue
		}
		if k := o.str("kind"); strings.HasPrefix(k, prefix) {
			out = append(out, k+suffix)
		}
	}
	return out
}

// completeNames lists the names of the items of path (its first page, of
// query q) starting with prefix, each after before.
func (a *app) completeNames(cmd *cobra.Command, path string, q url.Values, before, prefix string) []string {
	c := a.completionClient(cmd)
	if c == nil {
		return nil
	}
	page, _, err := c.List(cmd.Context(), path, q, false)
	if err != nil {
		return nil
	}
	var out []string
	for _, raw := range page.Items {
		o, err := decodeObject(raw)
		if err != nil {
			continue
		}
		if n := o.str("name"); strings.HasPrefix(n, prefix) {
			out = append(out, before+n)
		}
	}
	slices.Sort(out)
	return out
}

// completeContexts lists the config file's contexts.
func (a *app) completeContexts(_ *cobra.Command, toComplete string) ([]string, cobra.ShellCompDirective) {
	f, err := loadConfig(a.getenv)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, c := range f.cfg.Contexts {
		if strings.HasPrefix(c.Name, toComplete) {
			out = append(out, c.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
