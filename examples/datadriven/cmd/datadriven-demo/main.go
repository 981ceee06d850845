// Command datadriven-demo prints the objects of the data-driven composition demo
// (package datadriven), as one JSON document {"manifests": [...],
// "providerconfigs": [...], "resources": [...]}, for `converge dev
// --demo=datadriven`, which serves the kinds with cmd/stdprovider:
//
//	datadriven-demo objects --dir DIR [--updated]
//
// It writes the demo's Terraform modules under DIR/modules, which the
// stdterraform resources it prints name, with their state under DIR/tfstate;
// --updated prints the root's next spec.
package main

import (
	"encoding/json"
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

func run(args []string, out io.Writer) error {
	if len(args) == 0 || args[0] != "objects" {
		return fmt.Errorf("usage: datadriven-demo objects --dir DIR [--updated]")
	}
	fs := flag.NewFlagSet("objects", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "where to write the Terraform modules and keep their state")
	updated := fs.Bool("updated", false, "the root's next spec")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return fmt.Errorf("usage: datadriven-demo objects --dir DIR [--updated]")
	}
	o, err := datadriven.Build(*dir, *updated)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(o)
}
