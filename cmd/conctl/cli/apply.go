package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

type applyOpts struct {
	files  []string
	typ    string
	force  bool
	dryRun string // dryRunNone or dryRunServer
}

// The values of apply's --dry-run.
const (
	dryRunNone   = "none"
	dryRunServer = "server"
)

// query is the query every write of the apply sends: dry_run=true for
// --dry-run=server, else none.
func (o *applyOpts) query() url.Values {
	if o.dryRun == dryRunServer {
		return url.Values{"dry_run": {"true"}}
	}
	return nil
}

// resultSuffix follows each object's result in the table output.
func (o *applyOpts) resultSuffix() string {
	if o.dryRun == dryRunServer {
		return " (server dry run)"
	}
	return ""
}

func (o *applyOpts) validate() error {
	if len(o.files) == 0 {
		return usagef("no input: pass -f FILE (or -f - for stdin)")
	}
	for _, f := range o.files {
		if strings.TrimSpace(f) == "" {
			return usagef("empty -f value")
		}
	}
	switch o.dryRun {
	case dryRunNone, dryRunServer:
	case "client":
		return usagef("--dry-run=client is not supported: --dry-run=server runs every check the server makes and changes nothing")
	default:
		return usagef("invalid --dry-run %q: want none or server", o.dryRun)
	}
	if n := countOf(o.files, "-"); n > 1 {
		return usagef("stdin (-f -) given %d times; give it once", n)
	}
	if o.typ != "" {
		if _, ok := lookupType(o.typ); !ok {
			return usagef("unknown --type %q; want one of %s", o.typ, typeNames(applyTypes))
		}
	}
	return nil
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func (a *app) applyCommand() *cobra.Command {
	var o applyOpts
	cmd := &cobra.Command{
		Use:   "apply -f FILE [-f FILE ...] [--type TYPE]",
		Short: "Create or update objects from JSON or YAML files",
		Long: `Apply creates or updates every object in the given files and prints, per
object, "<type>/<name> created|configured|unchanged".

A file may be JSON (one object, an array of objects, or several objects one
after another) or YAML (documents separated by "---" lines; a document may
also be a list). "-f -" reads stdin; "-f DIR" reads DIR's *.json, *.yaml and
*.yml files in name order.

Each object's type comes from --type or from a top-level "type" field, which
is removed before the object is sent. Types and their aliases:

  resource        res, resources
  manifest        crd, manifests, kind, kinds
  providerconfig  pc, providerconfigs
  reactorbinding  rb, reactorbindings, binding
  endpoint        ep, endpoints
  kindconfig      config, configs (per-version operational config; the
                  object names its kind and kind_version)
  alertsink       sink, sinks, alertsinks

Several resources in a row (a JSON array, a JSON or NDJSON stream, YAML
documents) are sent together through POST /api/v1/resources:batch, 1,000 per
request (halved while the server answers 413), with one line per resource and
a summary line "N resources: N created, N configured, N unchanged, N
invalid". A single resource, and every other type, is applied on its own.

An object that carries a resource_version (one from "conctl get -o yaml",
say) is applied only if it is still at that version: when someone changed it
since, the apply is refused (409) and changes nothing, so no one's change is
silently lost. Get it again and redo the change, or pass --force to
overwrite it whatever its version (the resource_version is then not sent).

An object that fails is reported and the rest are still applied; the exit
status is then 1. When an endpoint is created, its signing secret is printed
once; store it, it cannot be shown again.

--dry-run=server sends every object with ?dry_run=true: the server checks and
runs each write as it would (schemas, the schema-stability gate of a
manifest, a resource's provider config, versions) and answers what it would
have done, "created", "configured" or "unchanged", followed by "(server dry
run)", but changes nothing. A dry run shows no endpoint secret. "conctl diff"
shows what would change, field by field.`,
		Example: `  conctl apply --type manifest -f vpc.kind.json
  conctl apply -f kinds.yaml -f resources.yaml
  cat resource.json | conctl apply --type res -f -
  conctl apply --type res -f - < resources.ndjson
  conctl apply --type pc -f providerconfig-vpc-v1-default.json -o json
  conctl apply -f resources.yaml --dry-run=server`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return a.apply(cmd.Context(), cmd, &o)
		},
	}
	cmd.Flags().StringArrayVarP(&o.files, "filename", "f", nil, "file, directory or - (stdin) to apply; repeatable")
	cmd.Flags().StringVar(&o.typ, "type", "", "type of every object: "+typeNames(applyTypes)+" (or an alias)")
	cmd.Flags().BoolVar(&o.force, "force", false, "apply whatever version each object is at now: drop the resource_version the documents carry")
	cmd.Flags().StringVar(&o.dryRun, "dry-run", dryRunNone, "server: have the server check and answer each write without making it (none: apply)")
	cmd.Flags().Lookup("dry-run").NoOptDefVal = dryRunServer
	return cmd
}

func (a *app) apply(ctx context.Context, cmd *cobra.Command, o *applyOpts) error {
	c, p, err := a.session()
	if err != nil {
		return err
	}
	var def *objectType
	if o.typ != "" {
		def, _ = lookupType(o.typ)
	}
	docs := readInputs(o.files, cmd.InOrStdin())
	if o.force {
		for _, d := range docs {
			delete(d.fields, "resource_version")
		}
	}
	types := make([]*objectType, len(docs))
	typeErrs := make([]error, len(docs))
	nss := make([]string, len(docs))
	for i, d := range docs {
		if d.err == nil {
			types[i], typeErrs[i] = documentType(def, d.fields)
		}
		if d.err == nil && typeErrs[i] == nil {
			nss[i], _ = a.documentNamespace(c, types[i], d) // "" when refused: applied alone, which reports why
		}
	}
	failed := 0
	for i := 0; i < len(docs); i++ {
		// A run of several resources goes to the batch endpoint.
		if run := resourceRun(docs[i:], types[i:], nss[i:]); run > 1 {
			f, err := a.applyResources(ctx, c, p, o, nss[i], docs[i:i+run], i == 0)
			failed += f
			if err != nil {
				// The server is unreachable; every other object would
				// fail the same way.
				failed += len(docs) - i - run
				break
			}
			i += run - 1
			continue
		}
		d := docs[i]
		if typeErrs[i] != nil {
			failed++
			writeError(a.stderr, d.source, typeErrs[i])
			continue
		}
		id, resp, err := a.applyDocument(ctx, c, types[i], d, o.query())
		if err != nil {
			failed++
			what := d.source
			if id != "" {
				what = id + " from " + d.source
			}
			writeError(a.stderr, what, err)
			var ce *ConnError
			if errors.As(err, &ce) || ctx.Err() != nil {
				// The server is unreachable; every other object would fail
				// the same way.
				failed += len(docs) - i - 1
				break
			}
			continue
		}
		if p.format == outputTable {
			fmt.Fprintf(a.stdout, "%s %s%s\n", id, resp.ApplyResult(), o.resultSuffix())
		} else if len(resp.Body) > 0 {
			if err := p.stream(resp.Body, i == 0); err != nil {
				return err
			}
		}
		if strings.HasPrefix(id, typeEndpoint.name+"/") || strings.HasPrefix(id, typeAlertSink.name+"/") {
			a.showSecret(p, id, resp.Body)
		}
	}
	if failed > 0 {
		if len(docs) > 1 {
			fmt.Fprintf(a.stderr, "Error: %d of %d objects failed\n", failed, len(docs))
		}
		return &reportedError{fmt.Errorf("%d of %d objects failed", failed, len(docs))}
	}
	return nil
}

// applyTarget is where a document is applied, and where its object is read.
type applyTarget struct {
	id     string // names the object for output ("resource/vpc/sample-vpc")
	method string // of the apply
	path   string // of the apply
	get    string // the object's GET path
}

// targetOf says where the document d of type t is applied, or why it cannot
// be (the target's id is set all the same, for the message).
func targetOf(t *objectType, d document) (applyTarget, error) {
	kind := stringField(d.fields, "kind")
	name := cmpOrText(stringField(d.fields, "name"), "<unnamed>")
	version := cmpOrText(versionField(d.fields), "?")
	var to applyTarget
	to.method = http.MethodPost
	switch t {
	case typeResource:
		to.id = t.name + "/" + cmpOrText(kind, "<no kind>") + "/" + name
		to.path, to.get = "/resources", "/resources/"+seg(kind)+"/"+seg(name)
	case typeManifest:
		to.id = t.name + "/" + cmpOrText(kind, "<no kind>") + "/v" + version
		if kind == "" {
			return to, errors.New(`manifest has no "kind"`)
		}
		to.method, to.path = http.MethodPut, "/kinds/"+seg(kind)+"/manifest"
		to.get = "/kinds/" + seg(kind) + "/versions/" + seg(version) + "/manifest"
	case typeKindConfig:
		to.id = t.name + "/" + cmpOrText(kind, "<no kind>") + "/v" + version
		if kind == "" || version == "?" {
			return to, errors.New(`kind config needs "kind" and "kind_version" (they name the config to set)`)
		}
		to.method, to.path = http.MethodPut, "/kinds/"+seg(kind)+"/versions/"+seg(version)+"/config"
		to.get = to.path
	case typeProviderConfig:
		to.id, to.path, to.get = t.name+"/"+name, "/providerconfigs", "/providerconfigs/"+seg(name)
	case typeReactorBinding:
		to.id, to.path, to.get = t.name+"/"+name, "/reactor-bindings", "/reactor-bindings/"+seg(name)
	case typeEndpoint:
		to.id, to.path, to.get = t.name+"/"+name, "/endpoints", "/endpoints/"+seg(name)
	case typeAlertSink:
		to.id, to.path, to.get = t.name+"/"+name, "/alert-sinks", "/alert-sinks/"+seg(name)
	}
	return to, nil
}

// applyDocument sends one document of type t (nil when d could not be
// read) to the API, with query (dry_run) and its namespace (documentQuery).
// id names the object for output ("resource/vpc/sample-vpc").
func (a *app) applyDocument(ctx context.Context, c *Client, t *objectType, d document, query url.Values) (id string, resp *Response, err error) {
	if d.err != nil {
		return "", nil, d.err
	}
	to, err := targetOf(t, d)
	if err != nil {
		return to.id, nil, err
	}
	fields := d.fields
	if t == typeKindConfig {
		// The path names the config.
		fields = maps.Clone(fields)
		delete(fields, "kind")
		delete(fields, "kind_version")
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return to.id, nil, fmt.Errorf("cannot encode object: %w", err)
	}
	if query, err = a.documentQuery(c, t, d, query); err != nil {
		return to.id, nil, err
	}
	resp, err = c.Do(ctx, to.method, to.path, query, body)
	return to.id, resp, err
}

// documentType resolves a document's type from its "type" field and the
// --type default, removing the field.
func documentType(def *objectType, fields map[string]json.RawMessage) (*objectType, error) {
	raw, ok := fields["type"]
	if !ok {
		if def == nil {
			return nil, errors.New(`no type: add a top-level "type" field or pass --type`)
		}
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, errors.New(`top-level "type" field must be a string`)
	}
	t, ok := lookupType(s)
	if !ok {
		return nil, fmt.Errorf(`unknown type %q in the "type" field; want one of %s`, s, typeNames(applyTypes))
	}
	if def != nil && def != t {
		return nil, fmt.Errorf(`the "type" field says %s but --type says %s`, t.name, def.name)
	}
	delete(fields, "type")
	return t, nil
}

// stringField returns a string field, or "" when it is absent or not a string.
func stringField(fields map[string]json.RawMessage, key string) string {
	var s string
	if json.Unmarshal(fields[key], &s) != nil {
		return ""
	}
	return s
}

// versionField returns kind_version as written when it is a plain number.
func versionField(fields map[string]json.RawMessage) string {
	var n json.Number
	if json.Unmarshal(fields["kind_version"], &n) != nil {
		return ""
	}
	return n.String()
}

// showSecret prints an endpoint's one-time signing secret, if the answer
// holds one, with a warning that it will not be shown again.
func (a *app) showSecret(p *printer, id string, body []byte) {
	var v struct {
		Secret string `json:"secret"`
	}
	if json.Unmarshal(body, &v) != nil || v.Secret == "" {
		return
	}
	if p.format == outputTable {
		fmt.Fprintf(a.stdout, "\n  signing secret: %s\n\n", v.Secret)
	}
	fmt.Fprintf(a.stderr, "WARNING: the signing secret of %s is shown only this once and cannot be retrieved again. Store it now.\n", id)
}
