package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/theory/jsonpath"
)

// The output formats that only get, list and describe's neighbours print
// (commands that print objects the server keeps): besides table, json and
// yaml.
const (
	outputWide       = "wide"
	outputName       = "name"
	outputJSONPath   = "jsonpath"
	outputGoTemplate = "go-template"
)

// objectFormats are the -o formats of get and list, for help and errors.
var objectFormats = []string{outputTable, outputWide, outputJSON, outputYAML, outputName, outputJSONPath + "=TEMPLATE", outputGoTemplate + "=TEMPLATE"}

// renderer executes a parsed -o jsonpath=… or go-template=… on a decoded
// JSON value.
type renderer interface {
	render(w io.Writer, v any) error
}

// parseOutput splits -o into its format and, for jsonpath and go-template,
// the parsed template. A template that does not parse is a usage error
// naming the flag.
func parseOutput(s string) (string, renderer, error) {
	name, arg, hasArg := strings.Cut(s, "=")
	switch name {
	case outputTable, outputWide, outputJSON, outputYAML, outputName:
		if hasArg {
			return "", nil, usagef("invalid --output %q: %s takes no template", s, name)
		}
		return name, nil, nil
	case outputJSONPath, outputGoTemplate:
		if !hasArg || arg == "" {
			return "", nil, usagef("invalid --output %q: want %s=TEMPLATE", s, name)
		}
		var (
			r   renderer
			err error
		)
		if name == outputJSONPath {
			r, err = parseJSONPathTemplate(arg)
		} else {
			r, err = parseGoTemplate(arg)
		}
		if err != nil {
			return "", nil, usagef("invalid --output %s template %q: %v", name, arg, err)
		}
		return name, r, nil
	}
	return "", nil, usagef("invalid --output %q: want one of %s", s, strings.Join(objectFormats, ", "))
}

// goTemplate is -o go-template=…: Go's text/template over the JSON.
type goTemplate struct{ t *template.Template }

func parseGoTemplate(text string) (renderer, error) {
	t, err := template.New("output").Option("missingkey=zero").Parse(text)
	if err != nil {
		return nil, err
	}
	return goTemplate{t}, nil
}

func (g goTemplate) render(w io.Writer, v any) error {
	if err := g.t.Execute(w, v); err != nil {
		return fmt.Errorf("--output go-template: %w", err)
	}
	return nil
}

// jsonPathTemplate is -o jsonpath=…, kubectl's syntax: literal text with
// {expression}s, an expression an RFC 9535 JSONPath query whose leading $
// may be left out ({.items[*].name}), {"text"} a quoted literal ("\n"),
// and {range EXPR}…{end} repeating its body for each node EXPR selects,
// its expressions relative to that node. Several nodes print
// space-separated; strings raw, other values as JSON.
type jsonPathTemplate struct{ parts []jpPart }

// jpPart is literal text, a query, or a range over a query's nodes.
type jpPart struct {
	text  string
	query *jsonpath.Path
	rng   bool // a range over query's nodes, of body
	body  []jpPart
}

func parseJSONPathTemplate(s string) (renderer, error) {
	parts, _, ended, err := parseJPParts(s)
	if err != nil {
		return nil, err
	}
	if ended {
		return nil, fmt.Errorf("{end} without {range}")
	}
	return jsonPathTemplate{parts}, nil
}

// parseJPParts parses s up to its end or to an {end}: ended says which,
// rest is what follows the {end}.
func parseJPParts(s string) (parts []jpPart, rest string, ended bool, err error) {
	for s != "" {
		open := strings.IndexByte(s, '{')
		if open < 0 {
			return append(parts, jpPart{text: s}), "", false, nil
		}
		if open > 0 {
			parts = append(parts, jpPart{text: s[:open]})
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			return nil, "", false, fmt.Errorf("unclosed {")
		}
		expr := strings.TrimSpace(s[open+1 : open+end])
		s = s[open+end+1:]
		switch {
		case expr == "end":
			return parts, s, true, nil
		case strings.HasPrefix(expr, "range "):
			q, err := parseJPQuery(strings.TrimSpace(strings.TrimPrefix(expr, "range ")))
			if err != nil {
				return nil, "", false, err
			}
			body, after, ended, err := parseJPParts(s)
			if err != nil {
				return nil, "", false, err
			}
			if !ended {
				return nil, "", false, fmt.Errorf("{range} without {end}")
			}
			parts = append(parts, jpPart{query: q, rng: true, body: body})
			s = after
		case strings.HasPrefix(expr, `"`):
			lit, err := strconv.Unquote(expr)
			if err != nil {
				return nil, "", false, fmt.Errorf("bad literal %s: %v", expr, err)
			}
			parts = append(parts, jpPart{text: lit})
		default:
			q, err := parseJPQuery(expr)
			if err != nil {
				return nil, "", false, err
			}
			parts = append(parts, jpPart{query: q})
		}
	}
	return parts, "", false, nil
}

// parseJPQuery parses one expression, adding the leading $ kubectl's
// syntax leaves out.
func parseJPQuery(expr string) (*jsonpath.Path, error) {
	if expr == "" {
		return nil, fmt.Errorf("empty {}")
	}
	if !strings.HasPrefix(expr, "$") {
		expr = "$" + expr
	}
	return jsonpath.Parse(expr)
}

func (j jsonPathTemplate) render(w io.Writer, v any) error {
	var buf bytes.Buffer
	if err := renderJP(&buf, j.parts, v); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func renderJP(buf *bytes.Buffer, parts []jpPart, v any) error {
	for _, p := range parts {
		switch {
		case p.query == nil:
			buf.WriteString(p.text)
		case p.rng:
			for node := range p.query.Select(v).All() {
				if err := renderJP(buf, p.body, node); err != nil {
					return err
				}
			}
		default:
			first := true
			for node := range p.query.Select(v).All() {
				if !first {
					buf.WriteByte(' ')
				}
				first = false
				buf.WriteString(text(node))
			}
		}
	}
	return nil
}

// decodeValue decodes JSON for a template, numbers kept exact.
func decodeValue(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("server sent invalid JSON: %w", err)
	}
	return v, nil
}

// render prints raw through the -o template.
func (p *printer) render(raw json.RawMessage) error {
	v, err := decodeValue(raw)
	if err != nil {
		return err
	}
	return p.tmpl.render(p.w, v)
}

// names prints each item as TYPE/NAME, the way apply names what it wrote.
func (p *printer) names(t *objectType, items []json.RawMessage) error {
	for _, raw := range items {
		o, err := decodeObject(raw)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintln(p.w, objectName(t, o)); err != nil {
			return err
		}
	}
	return nil
}

// objectName is an object's TYPE/NAME: resource/KIND/NAME,
// manifest/KIND/vN, kindconfig/KIND/vN, delivery/ID, else TYPE/NAME.
func objectName(t *objectType, o obj) string {
	switch t {
	case typeResource:
		return t.name + "/" + o.str("kind") + "/" + o.str("name")
	case typeManifest, typeKindConfig:
		return t.name + "/" + o.str("kind") + "/v" + o.str("kind_version")
	case typeKinds:
		return "kind/" + o.str("kind")
	case typeClusterMember:
		return t.name + "/" + o.str("member_id")
	case typeDelivery, typeOperation, typeAudit:
		return t.name + "/" + o.str("id")
	case typeRevision:
		return t.name + "/" + o.str("revision")
	}
	return t.name + "/" + o.str("name")
}

// wideColumns are the columns -o wide adds to a type's table.
func wideColumns(t *objectType) []column {
	switch t {
	case typeResource:
		return []column{
			{"LABELS", func(o obj, _ time.Time) string { return labels(o.get("labels")) }},
			field("OWNER", "owner_id"), field("PROVIDER_CONFIG", "provider_config_ref"),
			{"LAST_ERROR", func(o obj, _ time.Time) string { return truncate(o.str("last_error"), 80) }},
		}
	case typeProviderConfig:
		return []column{{"LABELS", func(o obj, _ time.Time) string { return labels(o.get("labels")) }}}
	case typeEndpoint:
		return []column{field("UPDATED", "updated_at")}
	case typeDelivery:
		return []column{field("TASK_ID", "task_id"), field("FAILED", "failed")}
	case typeAudit:
		return []column{field("NAMESPACE", "namespace"), field("TOKEN", "token_name"), field("REQUEST_ID", "request_id"),
			field("REMOTE", "remote_addr"), field("ROUTE", "route")}
	}
	return nil
}
