package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// pageOpts are the paging flags of a paged list: --limit, --cursor, --all.
type pageOpts struct {
	limit  int
	cursor string
	all    bool
}

func (o *pageOpts) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&o.limit, "limit", 0, "page size (0: the server's default); a page may hold fewer, at the server's byte budget")
	f.StringVar(&o.cursor, "cursor", "", "start after this cursor (from next_cursor)")
	f.BoolVar(&o.all, "all", false, "follow next_cursor and list every page")
}

// query adds the flags' parameters to q, or refuses a negative --limit.
func (o *pageOpts) query(q url.Values) error {
	if o.limit < 0 {
		return usagef("invalid --limit %d: must be positive (0 lets the server choose)", o.limit)
	}
	if o.limit > 0 {
		q.Set("limit", strconv.Itoa(o.limit))
	}
	if o.cursor != "" {
		q.Set("cursor", o.cursor)
	}
	return nil
}

type listResourcesOpts struct {
	kind     string
	kv       kindVersionOpt
	phases   []string
	phaseSet bool // --phase given, perhaps empty
	selector string
	owner    string
	page     pageOpts
}

func (o *listResourcesOpts) validate() error {
	if err := o.kv.validate(false); err != nil {
		return err
	}
	if o.phaseSet && len(o.phases) == 0 {
		return usagef("empty --phase value")
	}
	for _, p := range o.phases {
		if strings.TrimSpace(p) == "" {
			return usagef("empty --phase value")
		}
	}
	return nil
}

func (o *listResourcesOpts) query() (url.Values, error) {
	q := url.Values{}
	if o.kind != "" {
		q.Set("kind", o.kind)
	}
	if o.kv.set() {
		q.Set("kind_version", o.kv.String())
	}
	for _, p := range o.phases {
		q.Add("phase", strings.TrimSpace(p))
	}
	if o.selector != "" {
		q.Set("label_selector", o.selector)
	}
	if o.owner != "" {
		q.Set("owner", o.owner)
	}
	return q, o.page.query(q)
}

func (a *app) listCommand() *cobra.Command {
	cmd := typeGroup("list", "List objects",
		`List shows the objects of one type, filtered by flags: as a table by
default, or as the server returned them with -o json or -o yaml
({"items": [...]}, plus "next_cursor" when more pages remain); -o wide, name,
jsonpath=… and go-template=… too. With --watch it then prints the items
that change.`)
	cmd.Aliases = []string{"ls"}
	cmd.Example = `  conctl list resources
  conctl list res --kind vpc --kind-version 2 --phase Failed --phase Degraded
  conctl list res -l team=payments,env=prod --all -o json
  conctl list manifests --kind vpc
  conctl list pc --kind vpc --kind-version 1 --default
  conctl list kinds
  conctl list cluster
  conctl list res -o jsonpath='{range .items[*]}{.kind}/{.name}{"\n"}{end}'
  conctl list res --kind vpc --watch
  conctl list res -n team-a
  conctl list res -A
  conctl list namespaces`

	// resources
	{
		var o listResourcesOpts
		c := &cobra.Command{
			Use:     "resource",
			Aliases: typeResource.aliases,
			Short:   "List resources (paged; --all follows every page)",
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				o.phaseSet = cmd.Flags().Changed("phase")
				if err := o.validate(); err != nil {
					return err
				}
				q, err := o.query()
				if err != nil {
					return err
				}
				return a.list(cmd, typeResource, q, o.page.all)
			},
		}
		f := c.Flags()
		f.StringVar(&o.kind, "kind", "", "only this kind")
		o.kv.register(c, "only this kind version (1..32767)")
		f.StringSliceVar(&o.phases, "phase", nil, "only these phases; repeatable or comma-separated (union)")
		f.StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. team=payments,env!=dev or 'team in (a,b),!frozen'")
		f.StringVar(&o.owner, "owner", "", "only resources owned by this owner")
		o.page.register(c)
		cmd.AddCommand(c)
	}
	// manifests
	{
		var kind string
		c := &cobra.Command{
			Use:     "manifest",
			Aliases: without(typeManifest.aliases, "kind", "kinds"),
			Short:   "List kind manifests",
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				q := url.Values{}
				if kind != "" {
					q.Set("kind", kind)
				}
				return a.list(cmd, typeManifest, q, false)
			},
		}
		c.Flags().StringVar(&kind, "kind", "", "only this kind's versions")
		cmd.AddCommand(c)
	}
	// provider configs
	{
		var kind string
		var kv kindVersionOpt
		var def bool
		var page pageOpts
		c := &cobra.Command{
			Use:     "providerconfig",
			Aliases: typeProviderConfig.aliases,
			Short:   "List provider configs (paged; --all follows every page)",
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if err := kv.validate(false); err != nil {
					return err
				}
				q := url.Values{}
				if kind != "" {
					q.Set("kind", kind)
				}
				if kv.set() {
					q.Set("kind_version", kv.String())
				}
				if cmd.Flags().Changed("default") {
					q.Set("default", strconv.FormatBool(def))
				}
				if err := page.query(q); err != nil {
					return err
				}
				return a.list(cmd, typeProviderConfig, q, page.all)
			},
		}
		c.Flags().StringVar(&kind, "kind", "", "only this kind")
		kv.register(c, "only this kind version (1..32767)")
		c.Flags().BoolVar(&def, "default", false, "only defaults (--default=false: only custom configs)")
		page.register(c)
		cmd.AddCommand(c)
	}
	// the rest take no filters
	for _, t := range []*objectType{typeReactorBinding, typeEndpoint, typeKinds, typeClusterMember, typeAlertSink, typeNamespace} {
		short := "List " + t.plural
		switch t {
		case typeKinds:
			short = "List the kinds and their versions"
		case typeClusterMember:
			short = "List the running converge processes: role, shard range, in flight, readiness"
		case typeNamespace:
			short = "List the namespaces and their quotas"
		}
		cmd.AddCommand(&cobra.Command{
			Use:     t.name,
			Aliases: t.aliases,
			Short:   short,
			Args:    noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return a.list(cmd, t, nil, false)
			},
		})
	}
	a.addWatchFlag(cmd)
	a.addAllNamespacesFlag(cmd)
	return cmd
}

func (a *app) list(cmd *cobra.Command, t *objectType, q url.Values, all bool) error {
	a.objectOutput = true
	c, p, err := a.session()
	if err != nil {
		return err
	}
	if a.allNamespaces {
		if q == nil {
			q = url.Values{}
		}
		q.Set("namespace", namespaceAll)
	}
	if t == typeResource && p.tabular() {
		// The table shows neither: left out, they are not even read, and a
		// page holds --limit resources however large their documents are.
		q.Set("fields", "-spec,-status")
	}
	if !a.watch {
		return a.printList(cmd.Context(), c, p, t, collectionPath(t), q, all)
	}
	if _, ok := changeTopics[t]; !ok {
		return usagef("--watch: the server announces no changes of %s", t.plural)
	}
	items, err := a.listAndPrint(cmd.Context(), c, p, t, collectionPath(t), q, all)
	if err != nil {
		return err
	}
	return a.watchList(cmd, c, p, t, collectionPath(t), q, all, items)
}

// printList prints the list answer of path: one page, with a hint on
// stderr when there are more, or with all every page, merged.
func (a *app) printList(ctx context.Context, c *Client, p *printer, t *objectType, path string, q url.Values, all bool) error {
	_, err := a.listAndPrint(ctx, c, p, t, path, q, all)
	return err
}

// listAndPrint is printList, returning the items it printed.
func (a *app) listAndPrint(ctx context.Context, c *Client, p *printer, t *objectType, path string, q url.Values, all bool) ([]json.RawMessage, error) {
	page, raw, err := c.List(ctx, path, q, all)
	if err != nil {
		return nil, err
	}
	body := raw
	if all {
		items := page.Items
		if items == nil {
			items = []json.RawMessage{}
		}
		if body, err = json.Marshal(map[string]any{"items": items}); err != nil {
			return nil, err
		}
	}
	if !p.tabular() {
		return page.Items, p.list(t, page.Items, body)
	}
	if len(page.Items) == 0 {
		fmt.Fprintf(a.stderr, "No %s found.\n", t.plural)
		return page.Items, nil
	}
	if err := p.list(t, page.Items, body); err != nil {
		return nil, err
	}
	if !all && page.NextCursor != "" {
		fmt.Fprintf(a.stderr, "More %s available: rerun with --all, or with --cursor %s for the next page.\n",
			t.plural, page.NextCursor)
	}
	return page.Items, nil
}
