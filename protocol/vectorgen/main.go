// Command vectorgen writes the conformance vectors of protocol/vectors
// (their format: protocol/vectors/README.md) from the dispatcher's own
// request building and signing code: envelopes encoded by dispatch/wire,
// signed by webhooksdk's Signer as the registry signs, headers set by the
// HTTPS transport, Lambda events by transport.EncodeEvent. The clock, the
// secrets, the ids and the tokens are fixed, so the output is the same on
// every run: `make vectors` runs it, and its test fails when the checked-in
// vectors differ from what it writes.
//
//	go run ./protocol/vectorgen -out protocol/vectors
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/convergeplane/converge/protocol"
)

func main() {
	out := flag.String("out", "protocol/vectors", "the directory the vectors are written to")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "vectorgen:", err)
		os.Exit(1)
	}
}

// write replaces the vectors in dir by the generated ones, removing those
// no longer generated.
func write(dir string) error {
	files, err := generate()
	if err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, ok := files[filepath.Base(f)]; !ok {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// generate returns every vector file, by file name.
func generate() (map[string][]byte, error) {
	vs, err := cases()
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(vs))
	for _, v := range vs {
		name := v.Name + ".json"
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("two vectors named %s", v.Name)
		}
		body, err := encode(v)
		if err != nil {
			return nil, fmt.Errorf("vector %s: %w", v.Name, err)
		}
		files[name] = body
	}
	return files, nil
}

// encode is v as indented JSON, one field a line, so a diff shows what
// changed.
func encode(v protocol.Vector) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
