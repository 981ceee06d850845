// Command classic-provider serves every kind of the classic demo (classicbom,
// account, vpc v1 and v2, tgw, route and the statussink reactor) over HTTP
// with webhooksdk. Configuration:
//
//	PROVIDER_ADDR      listen address (default 127.0.0.1:9090)
//	PROVIDER_SECRETS   the endpoint's signing secret(s), whsec_..., comma-separated
//	FAKE_FAULT_RATE    probability 0..1 that a leaf's task fails transiently (default 0)
//	FAKE_WORK_DELAY    simulated work time per leaf task (default 0, e.g. 500ms)
//	FAKE_DELETE_DELAY  simulated time of each teardown (default 0, e.g. 5s)
//
// statussink reads its store from its provider config and its credentials
// from the standard AWS chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY;
// any values do for moto).
//
// Besides the webhook at /, GET /debug/teardowns answers with the teardowns
// finished so far, oldest first, as a JSON array of "kind/name": the order of
// a cascade delete.
//
// `classic-provider objects [--bom small|large|updated]` prints, instead of
// serving, what a demo applies, as one JSON document:
//
//	{
//	  "manifests":       [kind manifest, ...],      // PUT /kinds/{kind}/manifest, in this order
//	  "providerconfigs": [provider config, ...],    // POST /providerconfigs
//	  "bindings":        [reactor binding, ...],    // POST /reactor-bindings
//	  "resources":       [classicbom resource]      // POST /resources
//	}
//
// The manifests are account, vpc/1, vpc/2, tgw, route, statussink and
// classicbom; the provider configs are the defaults of vpc/1, vpc/2 and
// statussink (whose endpoint and bucket a demo points at its store); the one
// binding runs statussink when a classicbom syncs; the one resource is the
// classicbom named "classic" of the chosen BOM (default small).
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/convergeplane/converge/examples/classic"
	"github.com/convergeplane/converge/examples/classic/provider"
	"github.com/convergeplane/converge/webhooksdk"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "objects" {
		if err := objects(os.Args[2:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "classic-provider:", err)
			os.Exit(2)
		}
		return
	}
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: classic-provider                                    serve (configured by the environment)\n"+
			"       classic-provider objects [--bom small|large|updated]  print the demo's objects as JSON")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), log); err != nil {
		log.Error("classic provider failed", "err", err)
		os.Exit(1)
	}
}

func objects(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("objects", flag.ContinueOnError)
	bom := fs.String("bom", "small", "the BOM: "+strings.Join(classic.BOMs, ", "))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("objects takes no arguments, got %q", fs.Args())
	}
	o, err := classic.ObjectsFor(*bom)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}

// run serves until ctx is done or SIGINT or SIGTERM arrives, then drains in-flight
// tasks.
func run(ctx context.Context, log *slog.Logger) error {
	secrets := strings.Split(os.Getenv("PROVIDER_SECRETS"), ",")
	if secrets[0] == "" {
		return errors.New("PROVIDER_SECRETS is required: the endpoint's signing secret (whsec_...)")
	}
	opts, err := provider.OptionsFromEnv()
	if err != nil {
		return err
	}
	opts.Teardowns = &provider.TeardownLog{}
	log.Info("classic provider", "fault_rate", opts.FaultRate, "work_delay", opts.WorkDelay, "delete_delay", opts.DeleteDelay)
	return webhooksdk.ListenAndServe(ctx, cmp.Or(os.Getenv("PROVIDER_ADDR"), "127.0.0.1:9090"), provider.New(opts),
		webhooksdk.WithSecrets(secrets...), webhooksdk.WithLogger(log),
		webhooksdk.WithMiddleware(func(ep http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /debug/teardowns", opts.Teardowns)
			mux.Handle("/", ep)
			return mux
		}))
}
