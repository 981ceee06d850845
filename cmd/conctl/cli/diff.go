package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// Exit statuses of conctl diff, as kubectl diff's.
const (
	ExitNoDiff    = 0 // every object is as its file says
	ExitDiffFound = 1 // an object would change
	ExitDiffError = 2 // an object could not be diffed (or the command line is wrong)
)

// exitError carries a command's own exit status (ExitStatus returns it).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// diffIgnored are the members left out of both sides of a diff: the server
// sets them on every write, so they would differ on every object that
// changes, and say nothing about what changes.
var diffIgnored = []string{"resource_version", "updated_at"}

type diffOpts struct {
	files []string
	typ   string
}

func (a *app) diffCommand() *cobra.Command {
	var o diffOpts
	cmd := &cobra.Command{
		Use:   "diff -f FILE [-f FILE ...] [--type TYPE]",
		Short: "Show what apply would change, as a unified diff",
		Long: `Diff shows, for every object in the given files (read as apply reads them),
what "conctl apply" would change: a unified diff of the live object (GET;
empty when it does not exist) against the object as the server would store
it (the apply sent with ?dry_run=true, which the server checks and runs in
full and rolls back). Both are YAML (-o json: JSON) with resource_version
and updated_at left out, which every write changes. Nothing is changed.

Exit status, as kubectl diff's: 0 when no object would change, 1 when one
would, 2 or more when an object could not be diffed (an unreadable file, a
refused apply, an unreachable server) or the command line is wrong.`,
		Example: `  conctl diff -f resources.yaml
  conctl diff --type manifest -f vpc.kind.json && echo up to date`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ao := applyOpts{files: o.files, typ: o.typ, dryRun: dryRunServer}
			if err := ao.validate(); err != nil {
				return err
			}
			return a.diff(cmd.Context(), cmd, &ao)
		},
	}
	cmd.Flags().StringArrayVarP(&o.files, "filename", "f", nil, "file, directory or - (stdin) to diff; repeatable")
	cmd.Flags().StringVar(&o.typ, "type", "", "type of every object: "+typeNames(applyTypes)+" (or an alias)")
	return cmd
}

func (a *app) diff(ctx context.Context, cmd *cobra.Command, o *applyOpts) error {
	c, err := a.api()
	if err != nil {
		return err
	}
	asJSON := a.output == outputJSON
	var def *objectType
	if o.typ != "" {
		def, _ = lookupType(o.typ)
	}
	failed, changed := 0, 0
	docs := readInputs(o.files, cmd.InOrStdin())
	for _, d := range docs {
		var t *objectType
		if d.err == nil {
			t, d.err = documentType(def, d.fields)
		}
		id, text, err := a.diffDocument(ctx, c, t, d, asJSON)
		if err != nil {
			failed++
			what := d.source
			if id != "" {
				what = id + " from " + d.source
			}
			writeError(a.stderr, what, err)
			continue
		}
		if text != "" {
			changed++
			fmt.Fprint(a.stdout, text)
		}
	}
	switch {
	case failed > 0:
		return &exitError{code: ExitDiffError, err: &reportedError{fmt.Errorf("%d of %d objects could not be diffed", failed, len(docs))}}
	case changed > 0:
		return &exitError{code: ExitDiffFound, err: &reportedError{fmt.Errorf("%d of %d objects would change", changed, len(docs))}}
	}
	return nil
}

// diffDocument returns the unified diff of d's live object against what
// applying d would store, "" when they are the same.
func (a *app) diffDocument(ctx context.Context, c *Client, t *objectType, d document, asJSON bool) (id, text string, err error) {
	if d.err != nil {
		return "", "", d.err
	}
	to, err := targetOf(t, d)
	if err != nil {
		return to.id, "", err
	}
	where, err := a.documentQuery(c, t, d, nil)
	if err != nil {
		return to.id, "", err
	}
	var live []byte
	resp, err := c.Do(ctx, http.MethodGet, to.get, where, nil)
	var ae *APIError
	switch {
	case err == nil:
		live = resp.Body
	case errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound:
		// Not there yet: everything would be created.
	default:
		return to.id, "", fmt.Errorf("read the live object: %w", err)
	}
	_, resp, err = a.applyDocument(ctx, c, t, d, url.Values{"dry_run": {"true"}})
	if err != nil {
		return to.id, "", fmt.Errorf("dry run: %w", err)
	}
	want := resp.Body
	from, err := normalizeForDiff(live, want, asJSON)
	if err != nil {
		return to.id, "", fmt.Errorf("the live object: %w", err)
	}
	into, err := normalizeForDiff(want, want, asJSON)
	if err != nil {
		return to.id, "", fmt.Errorf("the dry run's answer: %w", err)
	}
	if from == into {
		return to.id, "", nil
	}
	text, err = difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(from), B: lines(into),
		FromFile: "live/" + to.id, ToFile: "dry-run/" + to.id, Context: 3,
	})
	return to.id, text, err
}

// normalizeForDiff renders the JSON object body as the diff shows it: only
// the members the apply's answer shape has (a GET may add live views, such
// as a resource's conditions and task, that an apply does not answer),
// without diffIgnored, as indented JSON or YAML with sorted keys. An empty
// body is an empty text.
func normalizeForDiff(body, shape []byte, asJSON bool) (string, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return "", nil
	}
	var obj, keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return "", fmt.Errorf("not a JSON object: %w", err)
	}
	if err := json.Unmarshal(shape, &keys); err != nil {
		return "", fmt.Errorf("not a JSON object: %w", err)
	}
	for k := range obj {
		if _, ok := keys[k]; !ok {
			delete(obj, k)
		}
	}
	for _, k := range diffIgnored {
		delete(obj, k)
	}
	out, err := json.MarshalIndent(obj, "", "  ") // a map: sorted keys
	if err != nil {
		return "", err
	}
	if asJSON {
		return string(out) + "\n", nil
	}
	y, err := yaml.JSONToYAML(out)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(y), "\n") + "\n", nil
}

// lines splits text, each of whose lines ends in a newline, into its lines
// (difflib.SplitLines would add an empty last one).
func lines(text string) []string {
	if text == "" {
		return nil
	}
	out := strings.SplitAfter(strings.TrimSuffix(text, "\n"), "\n")
	out[len(out)-1] += "\n"
	return out
}
