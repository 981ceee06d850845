package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// batchChunk is how many resources one POST /resources:batch carries. The
// server's default limit is 5,000 items and 4 MiB; a chunk the server still
// finds too large (413) is split in half and sent again.
const batchChunk = 1000

// resourceRun is how many documents from the start of docs are readable
// resources of one namespace (ns, each document's; "" when it is refused):
// a run that apply sends through the batch endpoint.
func resourceRun(docs []document, types []*objectType, ns []string) int {
	n := 0
	for n < len(docs) && docs[n].err == nil && types[n] == typeResource && ns[n] != "" && ns[n] == ns[0] {
		n++
	}
	return n
}

// batchItem is one result of POST /resources:batch.
type batchItem struct {
	Result string          `json:"result"`
	Errors []ProblemError  `json:"errors"`
	raw    json.RawMessage // as the server sent it, for -o json and yaml
}

// applyResources applies a run of resource documents of the namespace ns
// through the batch
// endpoint, batchChunk at a time, printing one line per resource (as a
// single apply does) and a summary. It returns how many failed, and an
// error when the server is unreachable (the rest of the run is then
// counted as failed too).
func (a *app) applyResources(ctx context.Context, c *Client, p *printer, o *applyOpts, ns string, docs []document, first bool) (int, error) {
	query := c.queryIn(o.query(), ns)
	var counts [4]int // created, configured, unchanged, invalid
	failed := 0
	size := batchChunk
	for start := 0; start < len(docs); {
		n := min(size, len(docs)-start)
		items, err := a.sendBatch(ctx, c, docs[start:start+n], query)
		var (
			ae *APIError
			ce *ConnError
		)
		switch {
		case err == nil:
		case errors.As(err, &ae) && ae.StatusCode == http.StatusRequestEntityTooLarge && n > 1:
			// Over the server's item or body limit: send halves.
			size = (n + 1) / 2
			continue
		case errors.As(err, &ce) || ctx.Err() != nil:
			writeError(a.stderr, fmt.Sprintf("%d resources from %s", len(docs)-start, docs[start].source), err)
			return failed + len(docs) - start, err
		default:
			writeError(a.stderr, fmt.Sprintf("%d resources from %s", n, docs[start].source), err)
			failed += n
			start += n
			continue
		}
		for k, it := range items {
			d := docs[start+k]
			id := typeResource.name + "/" + cmpOrText(stringField(d.fields, "kind"), "<no kind>") + "/" +
				cmpOrText(stringField(d.fields, "name"), "<unnamed>")
			result := it.Result
			if result == "updated" {
				result = "configured" // the word a single apply prints
			}
			switch result {
			case "created":
				counts[0]++
			case "configured":
				counts[1]++
			case "unchanged":
				counts[2]++
			default:
				counts[3]++
				failed++
				writeError(a.stderr, id+" from "+d.source, itemError(it.Errors))
				continue
			}
			if p.format == outputTable {
				fmt.Fprintf(a.stdout, "%s %s%s\n", id, result, o.resultSuffix())
			} else {
				if err := p.stream(it.raw, first); err != nil {
					return failed, err
				}
				first = false
			}
		}
		start += n
	}
	if p.format == outputTable {
		fmt.Fprintf(a.stdout, "%d resources: %d created, %d configured, %d unchanged, %d invalid%s\n",
			len(docs), counts[0], counts[1], counts[2], counts[3], o.resultSuffix())
	}
	return failed, nil
}

// sendBatch sends docs as one batch, with query (namespace, dry_run), and returns one
// result per document.
func (a *app) sendBatch(ctx context.Context, c *Client, docs []document, query url.Values) ([]batchItem, error) {
	items := make([]map[string]json.RawMessage, len(docs))
	for i, d := range docs {
		items[i] = d.fields
	}
	body, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		return nil, fmt.Errorf("cannot encode objects: %w", err)
	}
	resp, err := c.Do(ctx, http.MethodPost, "/resources:batch", query, body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(resp.Body, &out); err != nil || len(out.Results) != len(docs) {
		return nil, fmt.Errorf("the server's batch answer is not one result per object: %.200s", resp.Body)
	}
	results := make([]batchItem, len(out.Results))
	for i, raw := range out.Results {
		if err := json.Unmarshal(raw, &results[i]); err != nil {
			return nil, fmt.Errorf("the server's batch answer has a malformed result: %w", err)
		}
		results[i].raw = raw
	}
	return results, nil
}

// itemError renders a refused batch item as the single apply's problem:
// its errors located under body, not items[i].
func itemError(errs []ProblemError) error {
	e := &APIError{StatusCode: http.StatusUnprocessableEntity, Title: "invalid"}
	for _, fe := range errs {
		if _, rest, ok := strings.Cut(fe.Location, "]"); ok && strings.HasPrefix(fe.Location, "items[") {
			fe.Location = "body" + rest
		}
		e.Errors = append(e.Errors, fe)
	}
	if len(e.Errors) > 0 {
		e.Detail = e.Errors[0].Location + ": " + e.Errors[0].Message
	}
	return e
}
