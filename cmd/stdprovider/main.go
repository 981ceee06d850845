// Command stdprovider serves the std kinds — kinds backed by no provider code — over
// HTTP with webhooksdk. Configuration:
//
//	PROVIDER_ADDR         listen address (default 127.0.0.1:9090)
//	PROVIDER_SECRETS      the endpoint's signing secret(s), whsec_..., comma-separated
//	STD_KINDS             the std providers to serve, comma-separated (default all):
//	                      stdio, stdio-composer, stdshell, stdcel, stdstarlark, stdterraform
//	STDIO_KINDS           the names of the stdio leaf kinds (default stdio)
//	STDIO_COMPOSER_KINDS  the names of the stdio composer kinds (default stdio-composer)
//
// `stdprovider manifests` prints, instead of serving, the manifest of every kind the
// same environment would serve, one JSON document per kind, ready for
// `conctl apply --type manifest -f -`.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/convergeplane/converge/providers/stdcel"
	"github.com/convergeplane/converge/providers/stdio"
	"github.com/convergeplane/converge/providers/stdshell"
	"github.com/convergeplane/converge/providers/stdstarlark"
	"github.com/convergeplane/converge/providers/stdterraform"
	"github.com/convergeplane/converge/webhooksdk"
)

// fixed are the std providers whose kind has one fixed name: adding one is one line.
var fixed = []struct {
	name     string
	provider func(kind string) webhooksdk.Provider
	manifest func() []byte
}{
	{"stdshell", stdshell.New, stdshell.Manifest},
	{"stdcel", stdcel.New, stdcel.Manifest},
	{"stdstarlark", stdstarlark.New, stdstarlark.Manifest},
	{"stdterraform", func(kind string) webhooksdk.Provider { return stdterraform.New(kind) }, stdterraform.Manifest},
}

// served is one kind this process serves.
type served struct {
	provider webhooksdk.Provider
	manifest []byte
}

func main() {
	switch args := os.Args[1:]; {
	case len(args) == 1 && args[0] == "manifests":
		if err := printManifests(os.Stdout, os.Getenv); err != nil {
			fmt.Fprintln(os.Stderr, "stdprovider:", err)
			os.Exit(1)
		}
		return
	case len(args) > 0:
		fmt.Fprintln(os.Stderr, "usage: stdprovider            serve (configured by the environment)\n"+
			"       stdprovider manifests  print the served kinds' manifests, one JSON document each")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), log, os.Getenv); err != nil {
		log.Error("stdprovider failed", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx ends or SIGINT or SIGTERM arrives, then drains in-flight tasks.
func run(ctx context.Context, log *slog.Logger, getenv func(string) string) error {
	kinds, err := selectKinds(getenv)
	if err != nil {
		return err
	}
	secrets := splitList(getenv("PROVIDER_SECRETS"))
	if len(secrets) == 0 {
		return errors.New("PROVIDER_SECRETS is required: the endpoint's signing secret (whsec_...)")
	}
	providers := make([]webhooksdk.Provider, len(kinds))
	for i, k := range kinds {
		providers[i] = k.provider
	}
	return webhooksdk.ListenAndServe(ctx, cmp.Or(getenv("PROVIDER_ADDR"), "127.0.0.1:9090"), providers,
		webhooksdk.WithSecrets(secrets...), webhooksdk.WithLogger(log))
}

// selectKinds builds the kinds the environment selects: STD_KINDS picks providers,
// STDIO_KINDS and STDIO_COMPOSER_KINDS name the stdio ones.
func selectKinds(getenv func(string) string) ([]served, error) {
	all := []string{"stdio", "stdio-composer"}
	for _, f := range fixed {
		all = append(all, f.name)
	}
	want := splitList(getenv("STD_KINDS"))
	if len(want) == 0 {
		want = all
	}
	for _, w := range want {
		if !slices.Contains(all, w) {
			return nil, fmt.Errorf("STD_KINDS: unknown provider %q (have %s)", w, strings.Join(all, ", "))
		}
	}
	leaves := orDefault(splitList(getenv("STDIO_KINDS")), "stdio")
	composers := orDefault(splitList(getenv("STDIO_COMPOSER_KINDS")), "stdio-composer")
	for _, c := range composers {
		if slices.Contains(leaves, c) {
			return nil, fmt.Errorf("kind %q is in both STDIO_KINDS and STDIO_COMPOSER_KINDS", c)
		}
	}
	var out []served
	if slices.Contains(want, "stdio") {
		for _, k := range leaves {
			out = append(out, served{stdio.New(k), stdio.Manifest(k, false)})
		}
	}
	if slices.Contains(want, "stdio-composer") {
		for _, k := range composers {
			out = append(out, served{stdio.New(k), stdio.Manifest(k, true)})
		}
	}
	for _, f := range fixed {
		if slices.Contains(want, f.name) {
			out = append(out, served{f.provider(f.name), f.manifest()})
		}
	}
	seen := map[string]bool{}
	for _, s := range out {
		k := s.provider.Kind().Kind
		if seen[k] {
			return nil, fmt.Errorf("kind %q is served twice (a renamed stdio kind clashes with another)", k)
		}
		seen[k] = true
	}
	return out, nil
}

func printManifests(w io.Writer, getenv func(string) string) error {
	kinds, err := selectKinds(getenv)
	if err != nil {
		return err
	}
	for _, k := range kinds {
		if _, err := w.Write(k.manifest); err != nil {
			return err
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func orDefault(list []string, def string) []string {
	if len(list) == 0 {
		return []string{def}
	}
	return list
}
