// Command quickstart-provider serves the quickstart kinds (bucket, cdn, site)
// over HTTP with webhooksdk. Configuration:
//
//	PROVIDER_ADDR     listen address (default 127.0.0.1:9090)
//	PROVIDER_SECRETS  the endpoint's signing secret(s), whsec_..., comma-separated
//	WORK_DELAY        simulated work time per leaf (default 0, e.g. 500ms)
//	UNREADY_KINDS     kinds whose health answer starts "not ready", comma-separated
//	                  (bucket, cdn, site; default none): their resources park
//	ADMIN_ADDR        where to serve the readiness switch (default: not served), a
//	                  loopback address: POST /ready/{kind} and POST /unready/{kind}
//	                  switch a kind, GET /ready lists the unready ones
//
// `quickstart-provider objects` prints, instead of serving, the manifests of
// the kinds it serves and the sample resources, as one JSON document
// {"manifests": [...], "resources": [...]}: `converge dev --demo` applies
// what the provider it starts says it serves.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/convergeplane/converge/examples/quickstart"
	"github.com/convergeplane/converge/examples/quickstart/provider"
	"github.com/convergeplane/converge/webhooksdk"
)

func main() {
	switch args := os.Args[1:]; {
	case len(args) == 1 && args[0] == "objects":
		if err := printObjects(os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "quickstart-provider:", err)
			os.Exit(1)
		}
		return
	case len(args) > 0:
		fmt.Fprintln(os.Stderr, "usage: quickstart-provider          serve (configured by the environment)\n"+
			"       quickstart-provider objects  print the manifests and sample resources as JSON")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := serve(log); err != nil {
		log.Error("quickstart provider failed", "err", err)
		os.Exit(1)
	}
}

// serve runs the provider, and its readiness switch when ADMIN_ADDR is set,
// until SIGINT or SIGTERM, then drains in-flight tasks.
func serve(log *slog.Logger) error {
	secrets, delay, err := provider.FromEnv()
	if err != nil {
		return err
	}
	ready, err := provider.ParseUnready(os.Getenv("UNREADY_KINDS"))
	if err != nil {
		return fmt.Errorf("UNREADY_KINDS: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if addr := os.Getenv("ADMIN_ADDR"); addr != "" {
		stopAdmin, err := serveAdmin(ctx, addr, ready, log)
		if err != nil {
			return err
		}
		defer stopAdmin()
	}
	return webhooksdk.ListenAndServe(ctx, cmp.Or(os.Getenv("PROVIDER_ADDR"), "127.0.0.1:9090"),
		provider.New(delay, ready), webhooksdk.WithSecrets(secrets...), webhooksdk.WithLogger(log))
}

// Objects is what `quickstart-provider objects` prints.
type Objects struct {
	// Manifests are the kinds this provider serves, in the order to apply
	// them.
	Manifests []json.RawMessage `json:"manifests"`
	// Resources are sample resources of those kinds.
	Resources []json.RawMessage `json:"resources"`
}

func printObjects(w io.Writer) error {
	var o Objects
	for _, set := range []struct {
		files []string
		into  *[]json.RawMessage
	}{{quickstart.Manifests, &o.Manifests}, {quickstart.Resources, &o.Resources}} {
		for _, f := range set.files {
			b, err := quickstart.Files.ReadFile(f)
			if err != nil {
				return err
			}
			if !json.Valid(b) {
				return fmt.Errorf("%s is not JSON", f)
			}
			*set.into = append(*set.into, json.RawMessage(b))
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}
