package cli

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// MaxKindVersion is the largest kind_version the API accepts.
const MaxKindVersion = 32767

// kindVersionOpt is the --kind-version flag.
type kindVersionOpt struct {
	v   int
	cmd *cobra.Command
}

func (k *kindVersionOpt) register(cmd *cobra.Command, usage string) {
	k.cmd = cmd
	cmd.Flags().IntVar(&k.v, "kind-version", 0, usage)
}

func (k *kindVersionOpt) set() bool { return k.cmd.Flags().Changed("kind-version") }

// validate checks the flag's range, and its presence when required.
func (k *kindVersionOpt) validate(required bool) error {
	if !k.set() {
		if required {
			return usagef("--kind-version is required: name the exact version (1..%d), e.g. --kind-version 1", MaxKindVersion)
		}
		return nil
	}
	if k.v < 1 || k.v > MaxKindVersion {
		return usagef("invalid --kind-version %d: must be in 1..%d", k.v, MaxKindVersion)
	}
	return nil
}

func (k *kindVersionOpt) String() string { return strconv.Itoa(k.v) }

// resourceRef parses a resource argument: KIND/NAME, or NAME with --kind.
func resourceRef(kindFlag, arg string) (kind, name string, err error) {
	if kindFlag != "" {
		if k, n, ok := strings.Cut(arg, "/"); ok {
			if k != kindFlag {
				return "", "", usagef("resource %q does not match --kind %s", arg, kindFlag)
			}
			arg = n
		}
		kind, name = kindFlag, arg
	} else {
		var ok bool
		kind, name, ok = strings.Cut(arg, "/")
		if !ok {
			return "", "", usagef("resource %q: want KIND/NAME, or NAME with --kind KIND", arg)
		}
	}
	if kind == "" || name == "" {
		return "", "", usagef("resource %q: want KIND/NAME with both parts non-empty", arg)
	}
	return kind, name, nil
}

func (a *app) getCommand() *cobra.Command {
	cmd := typeGroup("get", "Show one object",
		`Get shows one object: as a table by default, or as the server returned it
with -o json or -o yaml; -o wide, name, jsonpath=… and go-template=… too.
With --watch it then prints the object again each time it changes.`)
	cmd.Example = `  conctl get resource vpc/sample-vpc
  conctl get resource --kind vpc sample-vpc -o yaml
  conctl get manifest vpc --kind-version 2
  conctl get providerconfig vpc-v1-payments
  conctl get config vpc --kind-version 2
  conctl get res vpc/sample-vpc -o jsonpath='{.spec.cidr}'
  conctl get res vpc/sample-vpc --watch
  conctl get rolebindings --namespace team-a
  conctl get res vpc/sample-vpc -n team-a
  conctl get namespaces`

	// resource
	{
		var kind string
		c := &cobra.Command{
			Use:     "resource KIND/NAME",
			Aliases: typeResource.aliases,
			Short:   "Show a resource (KIND/NAME, or NAME with --kind)",
			Args:    exactArgs(1, "KIND/NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				k, n, err := resourceRef(kind, args[0])
				if err != nil {
					return err
				}
				return a.getOne(cmd, typeResource, "/resources/"+seg(k)+"/"+seg(n), nil)
			},
		}
		c.Flags().StringVar(&kind, "kind", "", "the resource's kind (then NAME alone)")
		cmd.AddCommand(c)
	}
	// manifest and kindconfig: KIND --kind-version N
	for _, t := range []*objectType{typeManifest, typeKindConfig} {
		var kv kindVersionOpt
		short, suffix := "Show a kind manifest (--kind-version is required)", "/manifest"
		if t == typeKindConfig {
			short, suffix = "Show a kind version's operational config (--kind-version is required)", "/config"
		}
		c := &cobra.Command{
			Use:     t.name + " KIND --kind-version N",
			Aliases: t.aliases,
			Short:   short,
			Args:    exactArgs(1, "KIND"),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := kv.validate(true); err != nil {
					return err
				}
				var fill map[string]string
				if t == typeKindConfig {
					fill = map[string]string{"kind": args[0], "kind_version": kv.String()}
				}
				return a.getOne(cmd, t, "/kinds/"+seg(args[0])+"/versions/"+kv.String()+suffix, fill)
			},
		}
		kv.register(c, "the kind version to show (required)")
		cmd.AddCommand(c)
	}
	// by name
	for _, t := range []*objectType{typeProviderConfig, typeReactorBinding, typeEndpoint, typeAlertSink} {
		cmd.AddCommand(&cobra.Command{
			Use:     t.name + " NAME",
			Aliases: t.aliases,
			Short:   "Show one " + strings.TrimSuffix(t.plural, "s") + " by name",
			Args:    exactArgs(1, "NAME"),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.getOne(cmd, t, collectionPath(t)+"/"+seg(args[0]), nil)
			},
		})
	}
	cmd.AddCommand(a.getRoleBindingsCommand())
	cmd.AddCommand(a.getNamespaceCommand())
	a.addWatchFlag(cmd)
	return cmd
}

// collectionPath is the API path of a type's collection.
func collectionPath(t *objectType) string {
	switch t {
	case typeResource:
		return "/resources"
	case typeManifest:
		return "/manifests"
	case typeProviderConfig:
		return "/providerconfigs"
	case typeReactorBinding:
		return "/reactor-bindings"
	case typeEndpoint:
		return "/endpoints"
	case typeAlertSink:
		return "/alert-sinks"
	case typeRoleBinding:
		return "/role-bindings"
	case typeKinds:
		return "/kinds"
	case typeClusterMember:
		return "/cluster-members"
	case typeDelivery:
		return "/deliveries"
	case typeAudit:
		return "/audit"
	case typeNamespace:
		return "/namespaces"
	}
	panic("conctl: no collection for " + t.name)
}

// getOne fetches and prints one object. fill supplies table cells the server
// may leave out (a kind config does not repeat its kind and version).
func (a *app) getOne(cmd *cobra.Command, t *objectType, path string, fill map[string]string) error {
	a.objectOutput = true
	c, p, err := a.session()
	if err != nil {
		return err
	}
	if _, ok := changeTopics[t]; a.watch && !ok {
		return usagef("--watch: the server announces no changes of %s", t.plural)
	}
	body, err := c.Get(cmd.Context(), path, nil)
	if err != nil {
		return err
	}
	shown := body
	if len(fill) > 0 && p.tabular() {
		shown = withFields(body, fill)
	}
	if err := p.object(t, shown); err != nil || !a.watch {
		return err
	}
	return a.watchOne(cmd, c, p, t, path, body, fill)
}

// withFields adds fields missing from a JSON object.
func withFields(body []byte, fill map[string]string) []byte {
	var o map[string]json.RawMessage
	if json.Unmarshal(body, &o) != nil || o == nil {
		return body
	}
	for k, v := range fill {
		if _, ok := o[k]; !ok {
			o[k], _ = json.Marshal(v)
		}
	}
	out, err := json.Marshal(o)
	if err != nil {
		return body
	}
	return out
}
