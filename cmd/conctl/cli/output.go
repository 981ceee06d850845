package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"
)

// The output formats of -o/--output.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// outputFormats are the formats every command prints; get and list print
// objectFormats.
var outputFormats = []string{outputTable, outputJSON, outputYAML}

// printer renders API objects in the chosen format.
type printer struct {
	format string
	tmpl   renderer // -o jsonpath=… and go-template=…
	w      io.Writer
	now    func() time.Time
	// allNamespaces (-A) leads the table of a namespaced type with a
	// NAMESPACE column.
	allNamespaces bool
}

// tabular says whether the format prints rows made of an object's fields
// (table, wide, name), rather than the objects as the server sent them.
func (p *printer) tabular() bool {
	return p.format == outputTable || p.format == outputWide || p.format == outputName
}

// object prints one object as returned by the server.
func (p *printer) object(t *objectType, raw json.RawMessage) error {
	switch p.format {
	case outputJSON:
		return writeJSON(p.w, raw)
	case outputYAML:
		return writeYAML(p.w, raw)
	case outputJSONPath, outputGoTemplate:
		return p.render(raw)
	case outputName:
		return p.names(t, []json.RawMessage{raw})
	}
	return p.table(t, []json.RawMessage{raw})
}

// list prints a list answer. body is what JSON and YAML print (the server's
// answer, or the merged items of every page); items feed the table.
func (p *printer) list(t *objectType, items []json.RawMessage, body json.RawMessage) error {
	switch p.format {
	case outputJSON:
		return writeJSON(p.w, body)
	case outputYAML:
		return writeYAML(p.w, body)
	case outputJSONPath, outputGoTemplate:
		return p.render(body)
	case outputName:
		return p.names(t, items)
	}
	return p.table(t, items)
}

// answer prints an action's answer: as the server sent it in json and yaml
// output, else as the one line summary makes of it.
func (p *printer) answer(raw json.RawMessage, summary func(obj) string) error {
	if p.format != outputTable {
		return p.stream(raw, true)
	}
	o, err := decodeObject(raw)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(p.w, summary(o))
	return err
}

// stream prints one of several objects produced one by one (apply -o json),
// as a JSON stream or YAML documents separated by "---".
func (p *printer) stream(raw json.RawMessage, first bool) error {
	if p.format == outputYAML && !first {
		if _, err := io.WriteString(p.w, "---\n"); err != nil {
			return err
		}
	}
	if p.format == outputYAML {
		return writeYAML(p.w, raw)
	}
	return writeJSON(p.w, raw)
}

func writeJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("server sent invalid JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

func writeYAML(w io.Writer, raw json.RawMessage) error {
	y, err := yaml.JSONToYAML(raw)
	if err != nil {
		return fmt.Errorf("cannot render YAML: %w", err)
	}
	_, err = w.Write(y)
	return err
}

// table prints items as aligned columns under a header row.
func (p *printer) table(t *objectType, items []json.RawMessage) error {
	return p.rows(t, items, true)
}

// rows prints items as table rows, after the header row if header.
func (p *printer) rows(t *objectType, items []json.RawMessage, header bool) error {
	cols := columnsFor(t)
	if p.allNamespaces && t.namespaced {
		cols = append([]column{namespaceColumn(t)}, cols...)
	}
	if p.format == outputWide {
		cols = append(cols, wideColumns(t)...)
	}
	tw := tabwriter.NewWriter(p.w, 0, 4, 3, ' ', 0)
	headers := make([]string, len(cols))
	for i, c := range cols {
		headers[i] = c.header
	}
	if header {
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
	}
	now := time.Now()
	if p.now != nil {
		now = p.now()
	}
	for _, raw := range items {
		o, err := decodeObject(raw)
		if err != nil {
			return err
		}
		cells := make([]string, len(cols))
		for i, c := range cols {
			cells[i] = cell(c.value(o, now))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// cell keeps a value on one line and out of the column separator.
func cell(s string) string {
	if s == "" {
		return "<none>"
	}
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}

// obj is a decoded JSON object with lenient accessors for table cells.
type obj map[string]any

func decodeObject(raw json.RawMessage) (obj, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var o obj
	if err := dec.Decode(&o); err != nil {
		return nil, fmt.Errorf("server sent an unexpected object: %w", err)
	}
	return o, nil
}

// get walks a path of object keys.
func (o obj) get(path ...string) any {
	var v any = map[string]any(o)
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// str renders the value at path as text; objects and arrays as compact JSON.
func (o obj) str(path ...string) string { return text(o.get(path...)) }

func text(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "true"
		}
		return "false"
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// labels renders a string map as sorted k=v pairs.
func labels(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return text(v)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + text(m[k])
	}
	return strings.Join(parts, ",")
}

// age renders how long ago an RFC 3339 timestamp was, kubectl style.
func age(ts string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d < 2*365*24*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	default:
		return fmt.Sprintf("%dy", int(d.Hours()/24/365))
	}
}

// timestamp renders an RFC 3339 time in UTC to the second.
func timestamp(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return t.UTC().Format(time.RFC3339)
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// column is one table column.
type column struct {
	header string
	value  func(o obj, now time.Time) string
}

func field(header string, path ...string) column {
	return column{header, func(o obj, _ time.Time) string { return o.str(path...) }}
}

func ageColumn() column {
	return column{"AGE", func(o obj, now time.Time) string { return age(o.str("created_at"), now) }}
}

// namespaceColumn is the NAMESPACE column of -A: a delivery's is its
// resource's.
func namespaceColumn(t *objectType) column {
	if t == typeDelivery {
		return field("NAMESPACE", "resource", "namespace")
	}
	return field("NAMESPACE", "namespace")
}

// columnsFor returns the table layout of a type.
func columnsFor(t *objectType) []column {
	switch t {
	case typeResource:
		return []column{
			field("KIND", "kind"), field("VERSION", "kind_version"), field("NAME", "name"),
			field("PHASE", "phase"), field("GEN", "generation"), field("SYNCED", "synced_gen"),
			ageColumn(),
		}
	case typeManifest:
		return []column{
			field("KIND", "kind"), field("VERSION", "kind_version"),
			{"REACTIONS", func(o obj, _ time.Time) string { return reactionNames(o.get("reactions")) }},
			{"DESCRIPTION", func(o obj, _ time.Time) string { return truncate(o.str("description"), 60) }},
		}
	case typeProviderConfig:
		return []column{
			field("NAME", "name"), field("KIND", "kind"), field("VERSION", "kind_version"),
			{"DEFAULT", func(o obj, _ time.Time) string { return cmpOrText(o.str("is_default"), "false") }},
			ageColumn(),
		}
	case typeReactorBinding:
		return []column{
			field("NAME", "name"), field("WATCH_KIND", "watch_kind"), field("TRANSITION", "transition"),
			field("REACTOR", "reactor"),
			{"LABEL_MATCH", func(o obj, _ time.Time) string { return labels(o.get("label_match")) }},
			field("ENABLED", "enabled"),
		}
	case typeEndpoint:
		return []column{
			field("NAME", "name"), field("TYPE", "target", "type"),
			{"TARGET", func(o obj, _ time.Time) string { return endpointTarget(o) }},
			{"KINDS", func(o obj, _ time.Time) string { return kindVersions(o.get("kinds")) }},
			field("ENABLED", "enabled"), ageColumn(),
		}
	case typeAlertSink:
		return []column{
			field("NAME", "name"), field("TYPE", "sink_type"), field("TARGET", "target"),
			{"EVENTS", func(o obj, _ time.Time) string { return joinList(o.get("event_types")) }},
			field("ENABLED", "enabled"), ageColumn(),
		}
	case typeRoleBinding:
		return []column{
			field("NAME", "name"), field("ROLE", "role"),
			{"SUBJECT", func(o obj, _ time.Time) string {
				if o.str("user") != "" {
					return "user:" + o.str("user")
				}
				return "group:" + o.str("group")
			}},
			{"NAMESPACE", func(o obj, _ time.Time) string { return cmpOrText(o.str("namespace"), "* (cluster-wide)") }},
			ageColumn(),
		}
	case typeNamespace:
		quota := func(header, key string) column {
			return column{header, func(o obj, _ time.Time) string { return cmpOrText(o.str(key), "-") }}
		}
		return []column{
			field("NAME", "name"), field("OBJECTS", "objects"),
			quota("MAX_OBJECTS", "max_objects"), quota("MAX_IN_FLIGHT", "max_in_flight"),
			{"LABELS", func(o obj, _ time.Time) string { return labels(o.get("labels")) }},
			ageColumn(),
		}
	case typeKinds:
		return []column{
			field("KIND", "kind"),
			{"VERSIONS", func(o obj, _ time.Time) string { return joinList(o.get("versions")) }},
		}
	case typeClusterMember:
		return []column{
			field("MEMBER", "member_id"), field("ROLE", "role"), field("READY", "ready"),
			{"SHARDS", func(o obj, _ time.Time) string {
				if o.str("shard_lo") == "" {
					return "-"
				}
				return o.str("shard_lo") + "-" + o.str("shard_hi")
			}},
			field("IN_FLIGHT", "in_flight"), field("VERSION", "version"), field("HOST", "host"),
			{"AGE", func(o obj, now time.Time) string { return age(o.str("started_at"), now) }},
		}
	case typeKindConfig:
		return []column{
			field("KIND", "kind"), field("VERSION", "kind_version"),
			field("MAX_INFLIGHT", "max_inflight"), field("DEADLINE_SECS", "task_deadline_secs"),
			field("RESYNC_SECS", "resync_interval_secs"), field("RESYNC_RECOMPOSES", "resync_recomposes"),
			field("ORPHAN_GRACE_SECS", "orphan_grace_secs"), field("MAX_ATTEMPTS", "max_transient_attempts"),
		}
	case typeOperation:
		return []column{
			field("ID", "id"), field("VERB", "verb"), field("STATE", "state"), ageColumn(),
			{"ERROR", func(o obj, _ time.Time) string { return truncate(o.str("error"), 60) }},
		}
	case typeDelivery:
		return []column{
			field("ID", "id"),
			{"AT", func(o obj, _ time.Time) string { return timestamp(o.str("at")) }},
			field("ENDPOINT", "endpoint"),
			{"RESOURCE", func(o obj, _ time.Time) string { return o.str("resource", "kind") + "/" + o.str("resource", "name") }},
			{"TASK", func(o obj, _ time.Time) string {
				if v := o.str("action"); v != "" {
					return o.str("task_type") + ":" + v
				}
				return cmpOrText(o.str("task_type"), "-")
			}},
			field("EPOCH", "claim_epoch"), field("ATTEMPT", "attempt"), field("STATUS", "http_status"),
			{"LATENCY", func(o obj, _ time.Time) string { return o.str("latency_ms") + "ms" }},
			field("CLASSIFICATION", "classification"),
			{"EXCERPT", func(o obj, _ time.Time) string { return truncate(o.str("excerpt"), 60) }},
		}
	case typeRevision:
		return []column{
			field("REVISION", "revision"), field("GENERATION", "generation"), field("VERSION", "kind_version"),
			{"APPLIED_AT", func(o obj, _ time.Time) string { return timestamp(o.str("applied_at")) }},
			field("AUTHOR", "author"),
		}
	case typeAudit:
		return []column{
			field("ID", "id"),
			{"AT", func(o obj, _ time.Time) string { return timestamp(o.str("at")) }},
			field("SUBJECT", "subject"), field("METHOD", "method"), field("PATH", "path"),
			{"OBJECT", func(o obj, _ time.Time) string {
				if o.str("object_name") == "" {
					return cmpOrText(o.str("object_kind"), "-")
				}
				return o.str("object_kind") + "/" + o.str("object_name")
			}},
			{"VERSIONS", func(o obj, _ time.Time) string {
				return cmpOrText(o.str("version_before"), "-") + "->" + cmpOrText(o.str("version_after"), "-")
			}},
			field("STATUS", "status"), field("OUTCOME", "outcome"), field("DRY_RUN", "dry_run"),
		}
	}
	return []column{field("NAME", "name")}
}

func cmpOrText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func reactionNames(v any) string {
	list, ok := v.([]any)
	if !ok {
		return ""
	}
	names := make([]string, 0, len(list))
	for _, r := range list {
		if m, ok := r.(map[string]any); ok {
			names = append(names, text(m["name"]))
		}
	}
	return strings.Join(names, ",")
}

func kindVersions(v any) string {
	list, ok := v.([]any)
	if !ok {
		return text(v)
	}
	parts := make([]string, 0, len(list))
	for _, kv := range list {
		m, ok := kv.(map[string]any)
		if !ok {
			parts = append(parts, text(kv))
			continue
		}
		parts = append(parts, text(m["kind"])+"/v"+text(m["kind_version"]))
	}
	return strings.Join(parts, ",")
}

func joinList(v any) string {
	list, ok := v.([]any)
	if !ok {
		return text(v)
	}
	parts := make([]string, len(list))
	for i, x := range list {
		parts[i] = text(x)
	}
	return strings.Join(parts, ",")
}

func endpointTarget(o obj) string {
	for _, k := range []string{"url", "function_url", "function_name", "function_arn", "arn", "function"} {
		if s := o.str("target", k); s != "" {
			return s
		}
	}
	return ""
}
