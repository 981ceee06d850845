package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"
	"sigs.k8s.io/yaml"

	"github.com/convergeplane/converge/control/model"
)

// ComponentName returns the OpenAPI component name of one schema axis
// ("Spec", "Status" or "Config") of a kind version: the kind in PascalCase
// (each '-'-separated part capitalised), then "V<version>" for versions
// above 1, then the axis. vpc/1 spec is VpcSpec, vpc/2 spec VpcV2Spec,
// s3-bucket/1 config S3BucketConfig.
func ComponentName(kind string, version int, axis string) string {
	if version > 1 {
		return explicitComponentName(kind, version, axis)
	}
	return pascal(kind) + axis
}

// explicitComponentName always carries the version: the fallback when
// ComponentName is taken.
func explicitComponentName(kind string, version int, axis string) string {
	return pascal(kind) + "V" + strconv.Itoa(version) + axis
}

func pascal(kind string) string {
	var b strings.Builder
	for _, part := range strings.Split(kind, "-") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// openAPIDoc serves the OpenAPI document: huma's, generated from the
// registered operations, merged with the schemas of every published kind
// version from the kind cache. The merged bytes are cached and rebuilt only
// when the kind cache's generation or the set of routes changes, so a
// manifest applied anywhere shows up on the next request, without a
// restart.
type openAPIDoc struct {
	s *Server

	mu        sync.Mutex
	key       docKey
	json      []byte
	yaml      []byte
	problemJS map[string]json.RawMessage // the Problem schemas, built once
}

type docKey struct {
	gen   uint64
	paths int
}

func newOpenAPIDoc(s *Server) *openAPIDoc { return &openAPIDoc{s: s} }

func (d *openAPIDoc) serveJSON(c *fiber.Ctx) error {
	j, _, err := d.get()
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "application/openapi+json")
	return c.Send(j)
}

func (d *openAPIDoc) serveYAML(c *fiber.Ctx) error {
	_, y, err := d.get()
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "application/openapi+yaml")
	return c.Send(y)
}

// get returns the current document. The generation is read before the
// manifests, so a concurrent publish can only make the cached copy newer
// than its key (and rebuilt once more), never older.
func (d *openAPIDoc) get() ([]byte, []byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := docKey{gen: d.s.kinds.Generation(), paths: len(d.s.api.OpenAPI().Paths)}
	if d.json != nil && key == d.key {
		return d.json, d.yaml, nil
	}
	j, err := d.build(d.s.kinds.List())
	if err != nil {
		return nil, nil, fmt.Errorf("build openapi document: %w", err)
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return nil, nil, fmt.Errorf("build openapi document: %w", err)
	}
	d.key, d.json, d.yaml = key, j, y
	return j, y, nil
}

// StaticOpenAPI returns the OpenAPI document of s's operations with no
// kind's schemas: the part of GET /openapi.json that the code alone
// decides, indented. The console's TypeScript types are generated from it
// (ui/openapi.json; see ui/README.md). Building it reads neither the store
// nor the kind cache.
func (s *Server) StaticOpenAPI() ([]byte, error) {
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	j, err := s.docs.build(nil)
	if err != nil {
		return nil, fmt.Errorf("build openapi document: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, j, "", "  "); err != nil {
		return nil, fmt.Errorf("build openapi document: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// build merges huma's document with the schemas of kinds. The caller holds
// d.mu.
func (d *openAPIDoc) build(kinds []*model.KindManifest) ([]byte, error) {
	base, err := json.Marshal(d.s.api.OpenAPI())
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(base, &doc); err != nil {
		return nil, err
	}
	var components map[string]json.RawMessage
	if raw, ok := doc["components"]; ok {
		if err := json.Unmarshal(raw, &components); err != nil {
			return nil, err
		}
	}
	if components == nil {
		components = map[string]json.RawMessage{}
	}
	schemas := map[string]json.RawMessage{}
	if raw, ok := components["schemas"]; ok {
		if err := json.Unmarshal(raw, &schemas); err != nil {
			return nil, err
		}
	}

	// huma documents its own error model; every error is a Problem.
	if d.problemJS == nil {
		if d.problemJS, err = problemSchemas(); err != nil {
			return nil, err
		}
	}
	for name, raw := range d.problemJS {
		schemas[name] = raw
	}
	if _, ok := schemas["ErrorModel"]; ok {
		schemas["ErrorModel"] = json.RawMessage(`{"$ref":"#/components/schemas/Problem"}`)
	}
	delete(schemas, "ErrorDetail")
	if err := operationAccess(doc); err != nil {
		return nil, err
	}

	taken := make(map[string]bool, len(schemas))
	for name := range schemas {
		taken[name] = true
	}
	for _, m := range kinds {
		for _, axis := range []struct {
			name string
			raw  json.RawMessage
		}{{"Spec", m.SpecSchema}, {"Status", m.StatusSchema}, {"Config", m.ConfigSchema}} {
			if len(axis.raw) == 0 {
				continue
			}
			name := ComponentName(m.Kind, m.KindVersion, axis.name)
			if taken[name] {
				// Two kinds can spell one name (vpc-v2/1 and vpc/2), or a kind
				// can spell a built-in one; the later claimant says its
				// version explicitly.
				name = explicitComponentName(m.Kind, m.KindVersion, axis.name)
				if taken[name] {
					d.s.log.Warn("api: openapi component name taken; schema not published", "kind", m.Kind,
						"kind_version", m.KindVersion, "axis", axis.name, "name", name)
					continue
				}
			}
			raw, err := kindComponent(axis.raw, name, m, strings.ToLower(axis.name))
			if err != nil {
				d.s.log.Warn("api: cannot publish a kind schema in openapi", "kind", m.Kind, "kind_version", m.KindVersion, "err", err)
				continue
			}
			schemas[name] = raw
			taken[name] = true
		}
	}

	if components["schemas"], err = json.Marshal(schemas); err != nil {
		return nil, err
	}
	if doc["components"], err = json.Marshal(components); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// kindComponent prepares a kind schema for #/components/schemas/<name>: its
// document-local references ("#/$defs/x") are re-rooted under the component
// so they still resolve inside the OpenAPI document, and an
// x-converge-kind extension says where it comes from.
func kindComponent(raw json.RawMessage, name string, m *model.KindManifest, axis string) (json.RawMessage, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	v = rerootRefs(v, "#/components/schemas/"+name)
	if obj, ok := v.(map[string]any); ok {
		obj["x-converge-kind"] = map[string]any{"kind": m.Kind, "kind_version": m.KindVersion, "axis": axis}
		if _, ok := obj["description"]; !ok {
			obj["description"] = fmt.Sprintf("The %s of %s/%d, from its kind manifest.", axis, m.Kind, m.KindVersion)
		}
	}
	return json.Marshal(v)
}

func rerootRefs(v any, root string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, c := range t {
			if s, ok := c.(string); ok && (k == "$ref" || k == "$dynamicRef") && strings.HasPrefix(s, "#") {
				t[k] = root + strings.TrimPrefix(s, "#")
				continue
			}
			t[k] = rerootRefs(c, root)
		}
	case []any:
		for i, c := range t {
			t[i] = rerootRefs(c, root)
		}
	}
	return v
}

// problemSchemas generates the JSON Schemas of Problem and ProblemError.
func problemSchemas() (map[string]json.RawMessage, error) {
	reg := huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer)
	reg.Schema(reflect.TypeOf(Problem{}), true, "Problem")
	out := map[string]json.RawMessage{}
	names := make([]string, 0)
	for name := range reg.Map() {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b, err := json.Marshal(reg.Map()[name])
		if err != nil {
			return nil, err
		}
		out[name] = b
	}
	return out, nil
}

// The security schemes of the OpenAPI document: the two kinds of bearer
// token the auth middleware tells apart.
const (
	readTokenScheme  = "readToken"
	adminTokenScheme = "adminToken"
)

func securitySchemes() map[string]*huma.SecurityScheme {
	// The descriptions are CommonMark: code spans keep <token> from being
	// read as HTML.
	const open = " A server started with neither `CONVERGE_READ_TOKENS` nor `CONVERGE_ADMIN_TOKENS` takes no token at all (development only)."
	return map[string]*huma.SecurityScheme{
		readTokenScheme: {Type: "http", Scheme: "bearer", Description: "A read token (`CONVERGE_READ_TOKENS`), sent as " +
			"`Authorization: Bearer <token>`. It may call the GET and HEAD routes under `" + Prefix + "` (and `/metrics`); " +
			"any other method with it is refused 403." + open},
		adminTokenScheme: {Type: "http", Scheme: "bearer", Description: "An admin token (`CONVERGE_ADMIN_TOKENS`), sent as " +
			"`Authorization: Bearer <token>`. It may call every route." + open},
	}
}

// documentTags describes each tag the operations carry, in the order the
// viewer shows them. redocly.yaml's operation-tag-defined makes make
// lint-openapi fail on an operation whose tag is not here.
func documentTags() []*huma.Tag {
	return []*huma.Tag{
		{Name: "Resources", Description: "Desired state and what became of it: apply (one or a batch), read, list and delete " +
			"resources; their children, dependencies, events, graph and spec history; reconcile, roll back and quarantine."},
		{Name: "Operations", Description: "Verbs a resource's kind version declares (its operation reactions), invoked on one resource, listed and cancelled."},
		{Name: "Kinds", Description: "Kind manifests (reactions and the spec, status and config JSON Schemas) and each kind version's operational config."},
		{Name: "Provider configs", Description: "Operator-owned runtime documents for a kind version, validated against its config_schema: one default and any named overrides a resource attaches."},
		{Name: "Reactor bindings", Description: "Subscriptions that run a reactor kind when a watched kind crosses a lifecycle transition."},
		{Name: "Endpoints", Description: "Provider endpoints the dispatcher delivers tasks to: their URLs, signing secrets and live health."},
		{Name: "Deliveries", Description: "The delivery log: every attempt to deliver a task to an endpoint, and replaying one."},
		{Name: "Alerts", Description: "Alert events (an endpoint disabled, a breaker opened or closed, a resource failed for good, a kind parked) and the sinks that deliver them: a signed webhook, SQS, SNS or EventBridge."},
		{Name: "Namespaces", Description: "Namespaces group resources, provider configs, reactor bindings and endpoints; each may set quotas on its objects and in-flight tasks. Every operation on a namespaced object takes ?namespace= (omitted: default)."},
		{Name: "Cluster", Description: "The running converge processes: role, shard range, load and heartbeat."},
		{Name: "Health", Description: "Liveness, readiness and the build version."},
	}
}

// operationAccess states in each operation of doc what the auth middleware
// enforces: under Prefix a read (GET, HEAD) takes a read or an admin token
// and anything else an admin token, with the 401 a missing or unknown token
// gets and, on a write, the 403 a read token gets; outside Prefix (/livez,
// /readyz) no token. It is derived from isRead, the middleware's own rule,
// so a route registered later (API) is described as it is guarded.
func operationAccess(doc map[string]json.RawMessage) error {
	var paths map[string]map[string]json.RawMessage
	if err := json.Unmarshal(doc["paths"], &paths); err != nil {
		return err
	}
	problem := func(description string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{ // cannot fail: strings only
			"description": description,
			"content": map[string]any{"application/problem+json": map[string]any{
				"schema": map[string]string{"$ref": "#/components/schemas/ErrorModel"}}},
		})
		return b
	}
	unauthorized := problem("Unauthorized: the server has tokens configured and the request sent none, or one it does not know.")
	forbidden := problem("Forbidden: a read token on a route that needs an admin token.")
	for p, item := range paths {
		guarded := p == Prefix || strings.HasPrefix(p, Prefix+"/")
		for method, raw := range item {
			if !slices.Contains([]string{"get", "head", "put", "post", "patch", "delete", "options", "trace"}, method) {
				continue // the path's parameters, summary or description
			}
			var op map[string]json.RawMessage
			if err := json.Unmarshal(raw, &op); err != nil {
				return err
			}
			security := []map[string][]string{}
			var responses map[string]json.RawMessage
			if err := json.Unmarshal(op["responses"], &responses); err != nil {
				return err
			}
			if guarded {
				read := isRead(strings.ToUpper(method))
				security = append(security, map[string][]string{adminTokenScheme: {}})
				if read {
					security = append([]map[string][]string{{readTokenScheme: {}}}, security...)
				}
				if _, ok := responses["401"]; !ok {
					responses["401"] = unauthorized
				}
				if _, ok := responses["403"]; !ok && !read {
					responses["403"] = forbidden
				}
			}
			var err error
			if op["security"], err = json.Marshal(security); err != nil {
				return err
			}
			if op["responses"], err = json.Marshal(responses); err != nil {
				return err
			}
			if item[method], err = json.Marshal(op); err != nil {
				return err
			}
		}
	}
	var err error
	doc["paths"], err = json.Marshal(paths)
	return err
}
