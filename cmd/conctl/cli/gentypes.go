package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/convergeplane/converge/cmd/conctl/gentypes"
	"github.com/convergeplane/converge/control/model"
)

type genTypesOpts struct {
	kind    string
	kv      kindVersionOpt
	lang    string
	file    string
	pkg     string
	outFile string
}

func (a *app) genTypesCommand() *cobra.Command {
	var o genTypesOpts
	cmd := &cobra.Command{
		Use:   "gen-types --lang go|typescript|python (--kind K --kind-version N | -f FILE)",
		Short: "Write a kind's spec, status, config and operation input types in Go, TypeScript or Python",
		Long: `Gen-types writes the types of one kind version, so a provider's handler is
typed end to end: Spec (spec_schema), Status (status_schema), Config
(config_schema, the provider config) and <Verb>Input for each operation
reaction (its input_schema), with every nested object, enum and $defs entry
they use. An axis without a schema is an open object.

The manifest comes from the server (GET /kinds/K/versions/N/manifest) or,
with -f, from a JSON or YAML file as apply reads it ("-" is stdin). A file
holding several manifests needs --kind and --kind-version to pick one.

Go: structs with json tags in package --package (default: the kind's letters
and digits). TypeScript: interfaces and type aliases, named after the kind
(VpcSpec). Python 3.11: TypedDicts using typing only, optional properties
NotRequired, named as in TypeScript. oneOf/anyOf become unions; Go has none,
so there they are json.RawMessage.

Here -o names the file to write (default stdout); the global -o (output
format) does not apply.`,
		Example: `  conctl gen-types --kind vpc --kind-version 2 --lang go -o vpc/types.go
  conctl gen-types -f vpc.kind.json --lang typescript -o src/vpc.ts
  conctl gen-types -f kinds.yaml --kind site --kind-version 1 --lang python`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return a.genTypes(cmd, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kind, "kind", "", "the kind (required without -f)")
	o.kv.register(cmd, "the kind version (required without -f)")
	f.StringVar(&o.lang, "lang", "", "output language: "+strings.Join(gentypes.Languages, "|")+" (required)")
	f.StringVarP(&o.file, "filename", "f", "", "read the manifest from this JSON or YAML file (- for stdin) instead of the server")
	f.StringVar(&o.pkg, "package", "", "Go package name (default: the kind's letters and digits)")
	f.StringVarP(&o.outFile, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

func (o *genTypesOpts) validate() error {
	if o.lang == "" {
		return usagef("--lang is required: one of %s", strings.Join(gentypes.Languages, ", "))
	}
	if !slices.Contains(gentypes.Languages, o.lang) {
		return usagef("invalid --lang %q: want one of %s", o.lang, strings.Join(gentypes.Languages, ", "))
	}
	if o.pkg != "" && o.lang != "go" {
		return usagef("--package applies to --lang go only")
	}
	if o.file == "" {
		if o.kind == "" {
			return usagef("--kind is required to read the manifest from the server (or pass -f FILE)")
		}
		return o.kv.validate(true)
	}
	return o.kv.validate(false)
}

func (a *app) genTypes(cmd *cobra.Command, o *genTypesOpts) error {
	var m *model.KindManifest
	var err error
	if o.file != "" {
		m, err = manifestFromFile(o, cmd)
	} else {
		m, err = a.manifestFromServer(cmd.Context(), o)
	}
	if err != nil {
		return err
	}
	src, err := gentypes.Generate(m, gentypes.Options{Lang: o.lang, Package: o.pkg})
	if err != nil {
		return fmt.Errorf("%s/%d: %w", m.Kind, m.KindVersion, err)
	}
	if o.outFile == "" {
		_, err = a.stdout.Write(src)
		return err
	}
	if err := os.WriteFile(o.outFile, src, 0o644); err != nil {
		return fmt.Errorf("cannot write the output: %w", err)
	}
	return nil
}

func (a *app) manifestFromServer(ctx context.Context, o *genTypesOpts) (*model.KindManifest, error) {
	c, err := a.api()
	if err != nil {
		return nil, err
	}
	body, err := c.Get(ctx, "/kinds/"+seg(o.kind)+"/versions/"+o.kv.String()+"/manifest", nil)
	if err != nil {
		return nil, err
	}
	var m model.KindManifest
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("the server's manifest %s/%s: %w", o.kind, o.kv.String(), err)
	}
	return &m, nil
}

// manifestFromFile reads -f and picks the manifest --kind and --kind-version
// name, or the only one the input holds.
func manifestFromFile(o *genTypesOpts, cmd *cobra.Command) (*model.KindManifest, error) {
	var found []*model.KindManifest
	for _, d := range readInputs([]string{o.file}, cmd.InOrStdin()) {
		if d.err != nil {
			return nil, fmt.Errorf("%s: %w", d.source, d.err)
		}
		// A document is a manifest unless its "type" field says otherwise,
		// as with apply --type manifest.
		if _, typed := d.fields["type"]; typed {
			t, err := documentType(nil, d.fields)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.source, err)
			}
			if t != typeManifest {
				continue
			}
		}
		raw, err := json.Marshal(d.fields)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.source, err)
		}
		var m model.KindManifest
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%s: not a kind manifest: %w", d.source, err)
		}
		if (o.kind != "" && m.Kind != o.kind) || (o.kv.set() && m.KindVersion != o.kv.v) {
			continue
		}
		if err := model.ValidateManifest(&m); err != nil {
			return nil, fmt.Errorf("%s: invalid manifest: %w", d.source, err)
		}
		found = append(found, &m)
	}
	want := "kind manifest"
	if o.kind != "" {
		want = "manifest of kind " + o.kind
		if o.kv.set() {
			want += " version " + o.kv.String()
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s holds no %s", o.file, want)
	case 1:
		return found[0], nil
	}
	return nil, usagef("%s holds %d manifests; pick one with --kind and --kind-version", o.file, len(found))
}
