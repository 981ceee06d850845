package webhooksdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Validate reports what the core would reject in o: a child or config without kind or
// name or with a kind_version outside 1..32767, a config spec that is not a JSON object,
// an edge reference without kind or name, a value flow whose fields are not JSON
// Pointers, or a JSON field that is not valid JSON. The Handler turns an invalid outcome into a transient error result naming the
// problem, and sdktest.Run fails the test on one.
func (o *Outcome) Validate() error {
	var errs []error
	checkJSON := func(where string, raw json.RawMessage) {
		if len(raw) > 0 && !json.Valid(raw) {
			errs = append(errs, fmt.Errorf("%s: not valid JSON", where))
		}
	}
	checkJSON("status", o.Status)
	checkJSON("operation_output", o.OperationOutput)
	for i, c := range o.Children {
		where := fmt.Sprintf("children[%d]", i)
		if c.Kind == "" || c.Name == "" {
			errs = append(errs, fmt.Errorf("%s: kind and name are required", where))
		}
		if c.KindVersion < 1 || c.KindVersion > MaxKindVersion {
			errs = append(errs, fmt.Errorf("%s: kind_version %d outside 1..%d", where, c.KindVersion, MaxKindVersion))
		}
		checkJSON(where+".spec", c.Spec)
	}
	for i, c := range o.Configs {
		where := fmt.Sprintf("configs[%d]", i)
		if c.Kind == "" || c.Name == "" {
			errs = append(errs, fmt.Errorf("%s: kind and name are required", where))
		}
		if c.KindVersion < 1 || c.KindVersion > MaxKindVersion {
			errs = append(errs, fmt.Errorf("%s: kind_version %d outside 1..%d", where, c.KindVersion, MaxKindVersion))
		}
		if err := CheckConfigSpec(c.Spec); err != nil {
			errs = append(errs, fmt.Errorf("%s.spec: %w", where, err))
		}
	}
	for i, e := range o.Edges {
		where := fmt.Sprintf("edges[%d]", i)
		if e.Dependent.Kind == "" || e.Dependent.Name == "" || e.Dependency.Kind == "" || e.Dependency.Name == "" {
			errs = append(errs, fmt.Errorf("%s: dependent and dependency need kind and name", where))
		}
		for j, v := range e.Values {
			if !isJSONPointer(v.DependentField) || !isJSONPointer(v.SourceField) {
				errs = append(errs, fmt.Errorf("%s.values[%d]: fields must be JSON Pointers starting with \"/\"", where, j))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid outcome: %w", err)
	}
	return nil
}

func isJSONPointer(p string) bool { return strings.HasPrefix(p, "/") }
