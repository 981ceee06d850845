package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// finalOpStates are the states an operation never leaves.
var finalOpStates = []string{"succeeded", "failed", "cancelled"}

func (a *app) opCommand() *cobra.Command {
	var (
		ref       resourceArg
		input     string
		inputFile string
		wait      bool
		timeout   time.Duration
	)
	c := &cobra.Command{
		Use:   "op KIND/NAME VERB [--input JSON | --input-file FILE] [--wait]",
		Short: "Invoke a verb (an operation) on a resource",
		Long: `Op invokes a verb the resource's kind version declares (POST …/ops) and
prints the operation's id and state; -o json or -o yaml prints the operation.
--input gives the verb's input as a JSON object, --input-file reads it from a
JSON or YAML file ("-" for stdin).

With --wait, conctl polls the operation until it succeeds, fails or is
cancelled, then prints its operation_output (or the operation with -o). It
exits 1 if the operation failed or was cancelled, or if --timeout elapses
first. An unknown verb is refused (404), an input the verb's schema refuses
too (422).`,
		Example: `  conctl op vpc/sample-vpc snapshot --input '{"label": "nightly"}'
  conctl op vpc/sample-vpc snapshot --input-file snapshot.yaml --wait --timeout 5m
  conctl op --kind vpc sample-vpc restart -o json`,
		Args: exactArgs(2, "KIND/NAME and VERB"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if input != "" && inputFile != "" {
				return usagef("--input and --input-file are exclusive: give one")
			}
			if err := validWaitTimeout(timeout); err != nil {
				return err
			}
			t, err := ref.parse(args[0])
			if err != nil {
				return err
			}
			body := map[string]any{"verb": args[1]}
			switch {
			case input != "":
				if !json.Valid([]byte(input)) {
					return usagef("invalid --input: not JSON: %s", input)
				}
				body["input"] = json.RawMessage(input)
			case inputFile != "":
				raw, err := readInput(cmd.InOrStdin(), inputFile)
				if err != nil {
					return err
				}
				body["input"] = raw
			}
			req, err := json.Marshal(body)
			if err != nil {
				return err
			}
			c, p, err := a.session()
			if err != nil {
				return err
			}
			resp, err := c.Do(cmd.Context(), http.MethodPost, t.path+"/ops", nil, req)
			if err != nil {
				return err
			}
			op, err := decodeObject(resp.Body)
			if err != nil {
				return err
			}
			if !wait {
				if p.format != outputTable {
					return p.stream(resp.Body, true)
				}
				fmt.Fprintf(a.stdout, "%s: operation %s (%s) %s\n", t.id, op.str("id"), args[1], op.str("state"))
				return nil
			}
			return a.awaitOperation(cmd.Context(), c, p, t, op.str("id"), timeout)
		},
	}
	ref.register(c)
	f := c.Flags()
	f.StringVar(&input, "input", "", "the verb's input, a JSON object")
	f.StringVar(&inputFile, "input-file", "", `read the input from a JSON or YAML file ("-": stdin)`)
	f.BoolVar(&wait, "wait", false, "wait until the operation succeeds, fails or is cancelled")
	waitTimeout(c, &timeout, "for the operation (with --wait)")
	return c
}

// readInput reads an operation's input from a JSON or YAML file, or stdin
// for "-", as JSON.
func readInput(stdin io.Reader, name string) (json.RawMessage, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read --input-file: %w", err)
	}
	if json.Valid(data) {
		return bytes.TrimSpace(data), nil
	}
	out, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("--input-file %s is neither JSON nor YAML: %w", name, err)
	}
	return out, nil
}

// awaitOperation polls operation id of resource t until it reaches a final
// state and prints the outcome: its operation_output, or the operation with
// -o json|yaml. A failed or cancelled operation is an error.
func (a *app) awaitOperation(ctx context.Context, c *Client, p *printer, t target, id string, timeout time.Duration) error {
	path := t.path + "/ops/" + seg(id)
	name := "operation " + id
	pr := a.newProgress()
	var body json.RawMessage
	var op obj
	err := poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		var err error
		if body, err = c.Get(ctx, path, nil); err != nil {
			pr.clear()
			return false, err
		}
		if op, err = decodeObject(body); err != nil {
			return false, err
		}
		state := op.str("state")
		if slices.Contains(finalOpStates, state) {
			return true, nil
		}
		pr.update([]waitState{{id: name, key: state + " " + op.str("attempts"), text: opProgress(op)}})
		return false, nil
	})
	pr.clear()
	switch {
	case errors.Is(err, errWaitTimeout):
		return fmt.Errorf("%s not finished within %s: still %s", name, timeout, opProgress(op))
	case err != nil:
		return err
	}
	if p.format != outputTable {
		if err := p.stream(body, true); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.stdout, "%s %s\n", name, op.str("state"))
		if out := op.get("operation_output"); out != nil {
			raw, err := json.Marshal(out)
			if err != nil {
				return err
			}
			if err := writeJSON(a.stdout, raw); err != nil {
				return err
			}
		}
	}
	switch op.str("state") {
	case "failed":
		return fmt.Errorf("%s failed after %s attempts: %s", name, op.str("attempts"), op.str("error"))
	case "cancelled":
		return fmt.Errorf("%s was cancelled", name)
	}
	return nil
}

// opProgress says where an unfinished operation stands.
func opProgress(op obj) string {
	if op == nil {
		return "unknown (no answer in time)"
	}
	s := op.str("state") + " (" + op.str("attempts") + " attempts)"
	if e := op.str("error"); e != "" {
		s += ": " + e
	}
	return s
}

func (a *app) opsCommand() *cobra.Command {
	var (
		ref    resourceArg
		page   pageOpts
		cancel string
	)
	c := &cobra.Command{
		Use:   "ops KIND/NAME [--limit N] [--cursor C] [--all] [--cancel ID]",
		Short: "List a resource's operations, or cancel one",
		Long: `Ops lists a resource's operations, newest first (GET …/ops), one page
(--limit; the server may end it earlier at its byte budget) or with --all
every page: a table of ID, VERB, STATE, AGE and ERROR, or the server's
{"items": [...]} with -o json or -o yaml.

With --cancel ID it cancels that operation instead (DELETE …/ops/ID) and
prints its new state; only an operation no provider has taken yet can be
cancelled (409 otherwise).`,
		Example: `  conctl ops vpc/sample-vpc
  conctl ops vpc/sample-vpc --limit 10 -o yaml
  conctl ops vpc/sample-vpc --cancel 0b6c5a0e-8f4e-4c52-9b7c-1f0f2e0f6a11`,
		Args: exactArgs(1, "KIND/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := url.Values{}
			if err := page.query(q); err != nil {
				return err
			}
			for _, f := range []string{"limit", "cursor", "all"} {
				if cancel != "" && cmd.Flags().Changed(f) {
					return usagef("--%s does not go with --cancel", f)
				}
			}
			t, c, p, err := a.resourceCall(&ref, args[0])
			if err != nil {
				return err
			}
			if cancel != "" {
				resp, err := c.Do(cmd.Context(), http.MethodDelete, t.path+"/ops/"+seg(cancel), nil, nil)
				if err != nil {
					return err
				}
				return p.answer(resp.Body, func(op obj) string {
					return fmt.Sprintf("operation %s %s", op.str("id"), op.str("state"))
				})
			}
			return a.printList(cmd.Context(), c, p, typeOperation, t.path+"/ops", q, page.all)
		},
	}
	ref.register(c)
	page.register(c)
	c.Flags().StringVar(&cancel, "cancel", "", "cancel the operation with this id instead of listing")
	return c
}
