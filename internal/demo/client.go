package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// client calls the server's REST API, as an operator's tooling would.
type client struct {
	base  string // .../api/v1
	http  *http.Client
	token string
}

// ref names what an apply answered.
type ref struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// applyObjects applies a demo's objects in dependency order: kinds, provider
// configs (statussink's pointed at the S3 endpoint s3), reactor bindings,
// resources, and says what it did in a line or two. It returns the last
// resource, the root to watch.
func (c *client) applyObjects(ctx context.Context, out io.Writer, objs objects, s3 string) (ref, error) {
	var applied, results []string
	for i, body := range objs.Manifests {
		k := objs.kinds[i]
		res, err := c.send(ctx, http.MethodPut, "/kinds/"+url.PathEscape(k.Kind)+"/manifest", body, nil)
		if err != nil {
			return ref{}, fmt.Errorf("apply manifest %s/v%d: %w", k.Kind, k.KindVersion, err)
		}
		results = append(results, res)
	}
	applied, results = appendTally(applied, "kind manifest", results), nil
	for _, body := range objs.ProviderConfigs {
		body, err := withS3(body, s3)
		if err != nil {
			return ref{}, err
		}
		res, err := c.send(ctx, http.MethodPost, "/providerconfigs", body, nil)
		if err != nil {
			return ref{}, fmt.Errorf("apply a provider config: %w", err)
		}
		results = append(results, res)
	}
	applied, results = appendTally(applied, "provider config", results), nil
	for _, body := range objs.Bindings {
		res, err := c.send(ctx, http.MethodPost, "/reactor-bindings", body, nil)
		if err != nil {
			return ref{}, fmt.Errorf("apply a reactor binding: %w", err)
		}
		results = append(results, res)
	}
	applied = appendTally(applied, "reactor binding", results)
	var root ref
	for i, body := range objs.Resources {
		res, err := c.send(ctx, http.MethodPost, "/resources", body, &root)
		if err != nil {
			return ref{}, fmt.Errorf("apply resource %d: %w", i+1, err)
		}
		applied = append(applied, fmt.Sprintf("%s/%s (%s)", root.Kind, root.Name, res))
	}
	fmt.Fprintf(out, "applied %s\n", strings.Join(applied, ", "))
	return root, nil
}

// appendTally appends to to "3 things (2 unchanged, 1 created)", the
// apply results of that many things; nothing for none.
func appendTally(to []string, thing string, results []string) []string {
	if len(results) == 0 {
		return to
	}
	counts := map[string]int{}
	var order []string
	for _, r := range results {
		if counts[r] == 0 {
			order = append(order, r)
		}
		counts[r]++
	}
	parts := make([]string, len(order))
	for i, r := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[r], r)
	}
	if len(results) > 1 {
		thing += "s"
	}
	return append(to, fmt.Sprintf("%d %s (%s)", len(results), thing, strings.Join(parts, ", ")))
}

// withS3 points a statussink provider config at the demo's S3 store; any
// other config is returned as is.
func withS3(body json.RawMessage, s3 string) (json.RawMessage, error) {
	var pc map[string]any
	if err := json.Unmarshal(body, &pc); err != nil {
		return nil, fmt.Errorf("a provider config: %w", err)
	}
	if pc["kind"] != "statussink" {
		return body, nil
	}
	if s3 == "" {
		return nil, errors.New("a statussink provider config, and no S3 store")
	}
	pc["spec"] = map[string]any{"endpoint": s3, "bucket": demoBucket, "prefix": "status", "region": "us-east-1"}
	return json.Marshal(pc)
}

// registerEndpoint creates the demo endpoint for kinds, or rotates its
// secret if it exists from an earlier dev session (a secret is only ever
// shown once).
func (c *client) registerEndpoint(ctx context.Context, name, target string, kinds []kind) (string, error) {
	ep := map[string]any{
		"name":            name,
		"kinds":           kinds,
		"target":          map[string]any{"type": "https", "url": target},
		"health":          map[string]any{"url": target, "interval_secs": 2, "healthy_threshold": 1},
		"max_concurrency": 16, "request_timeout_secs": 30,
	}
	body, _ := json.Marshal(ep)
	var created struct {
		Secret string `json:"secret"`
	}
	if _, err := c.send(ctx, http.MethodPost, "/endpoints", body, &created); err != nil {
		return "", err
	}
	if created.Secret != "" {
		return created.Secret, nil
	}
	var rotated struct {
		Secret string `json:"secret"`
	}
	if _, err := c.send(ctx, http.MethodPost, "/endpoints/"+url.PathEscape(name)+"/rotate-secret", nil, &rotated); err != nil {
		return "", err
	}
	if rotated.Secret == "" {
		return "", errors.New("the server returned no secret")
	}
	return rotated.Secret, nil
}

// get returns the body of a GET of path.
func (c *client) get(ctx context.Context, path string) ([]byte, error) {
	var body json.RawMessage
	if _, err := c.send(ctx, http.MethodGet, path, nil, &body); err != nil {
		return nil, err
	}
	return body, nil
}

// send performs one API call and returns the X-Apply-Result header.
func (c *client) send(ctx context.Context, method, path string, body []byte, into any) (string, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20)) // a large BOM's graph is megabytes
	if err != nil {
		return "", err
	}
	if resp.StatusCode >= 300 {
		return "", fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(data))
	}
	if into != nil && len(data) > 0 {
		if err := json.Unmarshal(data, into); err != nil {
			return "", fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return resp.Header.Get("X-Apply-Result"), nil
}
