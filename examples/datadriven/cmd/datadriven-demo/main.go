// Command datadriven-demo prints the objects of the data-driven composition demo
// (package datadriven), as one JSON document {"manifests": [...],
// "providerconfigs": [...], "resources": [...]}, for `converge dev
// --demo=datadriven`, which serves the kinds with cmd/stdprovider:
//
//	datadriven-demo objects --dir DIR [--s3 URL --bucket NAME] [--updated]
//
// It writes the demo's Terraform modules under DIR/modules, which the
// stdterraform resources it prints name, with their runs under DIR/tfstate
// and their state there too, or with --s3 in the bucket NAME of the S3 API
// at URL (the S3 backend, path style; the demo serves its in-process
// stand-in). --updated prints the root's next spec.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/convergeplane/converge/examples/datadriven"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "datadriven-demo:", err)
		os.Exit(2)
	}
}

var errUsage = errors.New("usage: datadriven-demo objects --dir DIR [--s3 URL --bucket NAME] [--updated]")

func run(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] != "objects" {
		return errUsage
	}
	fs := flag.NewFlagSet("objects", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "where to write the Terraform modules and keep their state")
	var state datadriven.State
	fs.StringVar(&state.Endpoint, "s3", "", "the S3 API keeping the Terraform state")
	fs.StringVar(&state.Bucket, "bucket", "", "its bucket")
	updated := fs.Bool("updated", false, "the root's next spec")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 || (state.Endpoint == "") != (state.Bucket == "") {
		return errUsage
	}
	o, err := datadriven.Build(*dir, state, *updated)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}
