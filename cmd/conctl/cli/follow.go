package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// changeTopics maps a type to the topic of the API's change stream
// (GET /events/stream) that announces its changes. A type missing here
// has none (kind configs, whose writes notify nothing), and cannot be
// watched.
var changeTopics = map[*objectType]string{
	typeResource:       "resources",
	typeManifest:       "kinds",
	typeKinds:          "kinds",
	typeProviderConfig: "providerconfigs",
	typeEndpoint:       "endpoints",
	typeClusterMember:  "cluster",
	typeReactorBinding: "bindings",
}

// streamReconnectWait is how long a watch waits before it opens the change
// stream again after the server ended it.
const streamReconnectWait = time.Second

// addWatchFlag gives each of group's subcommands --watch (-w).
func (a *app) addWatchFlag(group *cobra.Command) {
	for _, c := range group.Commands() {
		c.Flags().BoolVarP(&a.watch, "watch", "w", false,
			"after printing, follow the server's change stream and print again what changes (until Ctrl+C, or --timeout when given)")
	}
}

// watchContext bounds a watch: by --timeout when it was given, else only
// by ctx (Ctrl+C). Under --watch, --timeout is how long to watch (each
// request is bounded by it too).
func (a *app) watchContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	if cmd.Flags().Changed("timeout") && a.timeout > 0 {
		return context.WithTimeout(cmd.Context(), a.timeout)
	}
	return context.WithCancel(cmd.Context())
}

// changes opens the change stream (of query's namespace, when it names
// one) and sends on the returned channel
// whenever one of topics changed (and once more after each reconnect,
// when changes may have been missed). The channel closes when ctx ends;
// the error channel says why the stream could not be (re)opened.
func (c *Client) changes(ctx context.Context, query url.Values, topics ...string) (<-chan struct{}, <-chan error, error) {
	body, err := c.openStream(ctx, query)
	if err != nil {
		return nil, nil, err
	}
	out, errc := make(chan struct{}, 1), make(chan error, 1)
	wake := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(out)
		for {
			readEvents(body, func(event, data string) {
				if event != "change" {
					return
				}
				var ev struct {
					Topics []string `json:"topics"`
				}
				if json.Unmarshal([]byte(data), &ev) == nil && slices.ContainsFunc(ev.Topics, func(s string) bool { return slices.Contains(topics, s) }) {
					wake()
				}
			})
			body.Close()
			select {
			case <-ctx.Done():
				return
			case <-time.After(streamReconnectWait):
			}
			if body, err = c.openStream(ctx, query); err != nil {
				if ctx.Err() == nil {
					errc <- fmt.Errorf("the change stream ended, and reopening it failed: %w", err)
				}
				return
			}
			wake()
		}
	}()
	return out, errc, nil
}

// openStream opens GET /events/stream with query. The stream outlives the client's
// request timeout: only ctx ends it.
func (c *Client) openStream(ctx context.Context, query url.Values) (io.ReadCloser, error) {
	target := c.base + "/events/stream"
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	hc := &http.Client{Transport: c.http.Transport}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ConnError{Server: c.server, Timeout: c.timeout, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		e := decodeProblem(http.MethodGet, req.URL.String(), resp, data)
		if resp.StatusCode == http.StatusNotFound {
			e.Detail = "this server serves no change stream (GET /api/v1/events/stream), so --watch cannot follow it"
		}
		return nil, e
	}
	return resp.Body, nil
}

// readEvents calls fn with each server-sent event of r until r ends.
func readEvents(r io.Reader, fn func(event, data string)) {
	sc := bufio.NewScanner(r)
	var event string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event != "" || data != nil {
				fn(event, strings.Join(data, "\n"))
			}
			event, data = "", nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// follow runs read once per change of t's topic until ctx ends (Ctrl+C or
// --timeout: a clean end) or the stream fails.
func (a *app) follow(ctx context.Context, c *Client, t *objectType, read func(context.Context) error) error {
	topic, ok := changeTopics[t]
	if !ok {
		return usagef("--watch: the server announces no changes of %s", t.plural)
	}
	var query url.Values
	if t.namespaced {
		// Only the changes of the namespace (or, under -A, of every one).
		query = url.Values{"namespace": {a.namespaceQuery(c)}}
	}
	wakes, errc, err := c.changes(ctx, query, topic)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case _, ok := <-wakes:
			if !ok {
				select {
				case err := <-errc:
					return err
				default:
					return nil
				}
			}
			if err := read(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
	}
}

// watchOne prints the object at path again each time it changes (fill as
// getOne's).
func (a *app) watchOne(cmd *cobra.Command, c *Client, p *printer, t *objectType, path string, last json.RawMessage, fill map[string]string) error {
	ctx, cancel := a.watchContext(cmd)
	defer cancel()
	gone := false
	return a.follow(ctx, c, t, func(ctx context.Context) error {
		body, err := c.Get(ctx, path, nil)
		var ae *APIError
		if errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound {
			if !gone {
				fmt.Fprintf(a.stderr, "%s deleted\n", objectNameOf(t, last))
			}
			gone = true
			return nil
		}
		if err != nil {
			return err
		}
		gone = false
		if string(body) == string(last) {
			return nil
		}
		last = body
		if len(fill) > 0 && p.tabular() {
			body = withFields(body, fill)
		}
		return p.changed(t, []json.RawMessage{body}, false)
	})
}

// watchList prints the items of a list that are new or changed, and names
// those that left it, each time the list changes.
func (a *app) watchList(cmd *cobra.Command, c *Client, p *printer, t *objectType, path string, q map[string][]string, all bool, items []json.RawMessage) error {
	ctx, cancel := a.watchContext(cmd)
	defer cancel()
	seen := map[string]string{}
	for _, raw := range items {
		seen[a.watchKey(t, raw)] = string(raw)
	}
	return a.follow(ctx, c, t, func(ctx context.Context) error {
		page, _, err := c.List(ctx, path, q, all)
		if err != nil {
			return err
		}
		now := map[string]string{}
		var changed []json.RawMessage
		for _, raw := range page.Items {
			name := a.watchKey(t, raw)
			now[name] = string(raw)
			if seen[name] != string(raw) {
				changed = append(changed, raw)
			}
		}
		if len(changed) > 0 {
			if err := p.changed(t, changed, true); err != nil {
				return err
			}
		}
		for name := range seen {
			if _, ok := now[name]; !ok {
				fmt.Fprintf(a.stderr, "%s deleted\n", name)
			}
		}
		seen = now
		return nil
	})
}

// changed prints what a watch found changed: table rows without the
// header; else, after "---" in YAML, as list prints {"items": items} (of
// a list) or as get prints the one object.
func (p *printer) changed(t *objectType, items []json.RawMessage, list bool) error {
	switch p.format {
	case outputTable, outputWide:
		return p.rows(t, items, false)
	case outputName:
		return p.names(t, items)
	case outputYAML:
		if _, err := io.WriteString(p.w, "---\n"); err != nil {
			return err
		}
	}
	if !list {
		return p.object(t, items[0])
	}
	body, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		return err
	}
	return p.list(t, items, body)
}

// objectNameOf is objectName of a raw object.
func objectNameOf(t *objectType, raw json.RawMessage) string {
	o, err := decodeObject(raw)
	if err != nil {
		return t.name
	}
	return objectName(t, o)
}
