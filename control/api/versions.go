package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/convergeplane/converge/control/store"
)

// Optimistic concurrency (docs/api.md "Versions and If-Match"). Every object
// a user writes (resources, kind configs, provider configs, reactor
// bindings, endpoints) carries a resource_version that changes on each
// write of it; reads return it in the body and, for one object, as its
// ETag. A write made conditional on the version its writer read, with
// If-Match or with the resource_version of the applied document, is refused
// when the object moved on since: 412 for If-Match (HTTP's conditional
// request), 409 for the body's version (what Kubernetes clients expect of a
// stale resourceVersion). Nothing changes either way. A write with neither
// overwrites whatever is there, as it always did.

// Conditional is the If-Match header of a write that may be conditional:
// the inputs of such writes embed it. (Exported because huma reads only the
// exported fields of an input, embedded ones included.)
type Conditional struct {
	IfMatch string `header:"If-Match" doc:"Make the write conditional on the object's current version: its ETag (\"42\", the resource_version quoted), several separated by commas, or * for any version (the object must exist). When the object is at another version, or does not exist, the write is refused with 412 and changes nothing."`
}

// precondition is a write's condition and where the client sent it.
type precondition struct {
	store.Precondition
	// in is "header" (If-Match), "body" (resource_version), or "" for no
	// condition.
	in in
}

// bodyVersion is the condition an applied document's resource_version
// makes: none for 0 (absent), else that the object is at it.
func bodyVersion(v int64) (store.Precondition, *Problem) {
	if v < 0 {
		return store.Precondition{}, newProblem(http.StatusUnprocessableEntity, typeInvalid, "body.resource_version must be a version this server issued",
			ProblemError{Location: "body.resource_version", Message: "must be at least 1", Value: v})
	}
	return store.IfVersion(v), nil
}

// conditionOf is a write's condition: its If-Match header, or the
// condition of its body's resource_version (bodyVersion). Both may be sent
// only when they agree; a refusal then answers for the header (412).
func conditionOf(header string, body store.Precondition) (precondition, *Problem) {
	if strings.TrimSpace(header) == "" {
		if len(body.Versions) == 0 {
			return precondition{}, nil
		}
		return precondition{Precondition: body, in: "body"}, nil
	}
	h, why := parseIfMatch(header)
	if why != "" {
		return precondition{}, newProblem(http.StatusBadRequest, typeMalformed, "header.If-Match "+why,
			ProblemError{Location: "header.If-Match", Message: why, Value: header})
	}
	if len(body.Versions) == 0 {
		return precondition{Precondition: h, in: "header"}, nil
	}
	if v := body.Versions[0]; !h.Exists && !slices.Contains(h.Versions, v) {
		return precondition{}, newProblem(http.StatusBadRequest, typeMalformed, "header.If-Match and body.resource_version name different versions",
			ProblemError{Location: "body.resource_version", Message: "disagrees with If-Match " + header, Value: v})
	}
	// The body's one version is the stricter of the two.
	return precondition{Precondition: body, in: "header"}, nil
}

// applyCondition is the condition of an apply whose body decoded its
// resource_version as v.
func applyCondition(header string, v int64) (precondition, *Problem) {
	body, p := bodyVersion(v)
	if p != nil {
		return precondition{}, p
	}
	return conditionOf(header, body)
}

// deleteNamed runs del, a store delete by namespace and name, under the
// condition of in's If-Match.
func (s *Server) deleteNamed(ctx context.Context, in *deleteByNameInput,
	del func(context.Context, string, string, store.Precondition) error) (*struct{}, error) {
	pre, p := conditionOf(in.IfMatch, store.Precondition{})
	if p != nil {
		return nil, p
	}
	ns, p := s.namespace(ctx, in.Namespace)
	if p != nil {
		return nil, p
	}
	if err := del(ctx, ns, in.Name, pre.Precondition); err != nil {
		return nil, s.problemFor(ctx, err, problemOpts{in: "path", version: pre.in})
	}
	return &struct{}{}, nil
}

// parseIfMatch parses If-Match (RFC 9110 §13.1.1): * or a comma-separated
// list of entity tags. If-Match compares strongly, so a weak tag (W/"42")
// never matches, nor does a tag this server could not have issued; a list
// of only those matches nothing (version 0, which no object has). It
// returns why a malformed header is refused.
func parseIfMatch(h string) (store.Precondition, string) {
	h = strings.TrimSpace(h)
	if h == "*" {
		return store.Precondition{Exists: true}, ""
	}
	var p store.Precondition
	for _, tag := range strings.Split(h, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "" {
			continue // RFC 9110 §5.6.1: empty list elements are ignored
		}
		weak := strings.HasPrefix(tag, "W/")
		opaque := strings.TrimPrefix(tag, "W/")
		if len(opaque) < 2 || opaque[0] != '"' || opaque[len(opaque)-1] != '"' || strings.Contains(opaque[1:len(opaque)-1], `"`) {
			return store.Precondition{}, `must be * or entity tags in double quotes, e.g. "42" (a resource_version)`
		}
		if v, err := strconv.ParseInt(opaque[1:len(opaque)-1], 10, 64); err == nil && v > 0 && !weak {
			p.Versions = append(p.Versions, v)
		}
	}
	if len(p.Versions) == 0 {
		p.Versions = []int64{0}
	}
	return p, ""
}

// etag is the ETag of an object at resource_version v.
func etag(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

// versionProblem is the refusal of a conditional write: 412 for If-Match,
// 409 for a resource_version in the body. Its ETag, when the object
// exists, is the object's current version.
func versionProblem(e *store.PreconditionError, from in) *Problem {
	var p *Problem
	if from == "body" {
		p = newProblem(http.StatusConflict, typeVersionConflict, e.Error()+"; get it again, redo the change and send the new resource_version",
			ProblemError{Location: "body.resource_version", Message: staleMessage(e)})
	} else {
		p = newProblem(http.StatusPreconditionFailed, typePreconditionFailed, e.Error()+"; get it again, redo the change and send its new ETag",
			ProblemError{Location: "header.If-Match", Message: staleMessage(e)})
	}
	if e.Current != 0 {
		p = p.WithHeader("ETag", etag(e.Current))
	}
	return p
}

// staleMessage says what the object is at now.
func staleMessage(e *store.PreconditionError) string {
	if e.Current == 0 {
		return "the object does not exist"
	}
	return fmt.Sprintf("the object is at resource_version %d", e.Current)
}
