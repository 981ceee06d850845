// Command goserver is the Go SDK's serving-overhead bench server: a no-op
// webhooksdk provider for kind "bench" version 1 whose work returns status
// {} at once. It listens on $BENCH_ADDR (host:port) with the signing secret
// $BENCH_SECRET until SIGINT or SIGTERM. internal/sdkbench starts it beside
// the TypeScript and Python SDKs' bench servers, which serve the same.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/convergeplane/converge/webhooksdk"
)

func main() {
	addr, secret := os.Getenv("BENCH_ADDR"), os.Getenv("BENCH_SECRET")
	if addr == "" || secret == "" {
		fmt.Fprintln(os.Stderr, "goserver: set BENCH_ADDR (host:port) and BENCH_SECRET (whsec_…)")
		os.Exit(2)
	}
	work := webhooksdk.WorkFunc("bench", 1, func(context.Context, webhooksdk.Request) (webhooksdk.Outcome, error) {
		return webhooksdk.Outcome{Status: json.RawMessage(`{}`)}, nil
	})
	// Per-request logs would be part of what is measured; the other SDKs'
	// servers log nothing per task either.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := webhooksdk.ListenAndServe(context.Background(), addr, []webhooksdk.Provider{work},
		webhooksdk.WithSecrets(secret), webhooksdk.WithLogger(quiet)); err != nil {
		fmt.Fprintln(os.Stderr, "goserver:", err)
		os.Exit(1)
	}
}
