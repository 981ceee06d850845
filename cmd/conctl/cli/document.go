package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// document is one object read from an input file, as JSON fields, or the
// reason it could not be read.
type document struct {
	source string                     // where it came from, for messages
	fields map[string]json.RawMessage // nil when err is set
	err    error
}

// readInputs reads every document of every -f argument in order. "-" reads
// stdin (once); a directory reads its *.json, *.yaml and *.yml files in name
// order. A file that cannot be read yields one document carrying the error.
func readInputs(paths []string, stdin io.Reader) []document {
	var docs []document
	for _, p := range paths {
		if p == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				docs = append(docs, document{source: "stdin", err: fmt.Errorf("cannot read stdin: %w", err)})
				continue
			}
			docs = append(docs, parseDocuments("stdin", data)...)
			continue
		}
		files, err := expandPath(p)
		if err != nil {
			docs = append(docs, document{source: p, err: err})
			continue
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				docs = append(docs, document{source: f, err: fmt.Errorf("cannot read file: %w", err)})
				continue
			}
			docs = append(docs, parseDocuments(f, data)...)
		}
	}
	return docs
}

// expandPath returns p itself, or for a directory its manifest files.
func expandPath(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("cannot read file: %w", err)
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, fmt.Errorf("cannot read directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".json", ".yaml", ".yml":
			if !e.IsDir() {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	if len(files) == 0 {
		return nil, errors.New("directory holds no .json, .yaml or .yml files")
	}
	slices.Sort(files)
	return files, nil
}

// parseDocuments splits data into documents. JSON input may hold one object,
// an array of objects, or several concatenated values; anything else is read
// as YAML, whose documents are separated by "---" lines and may each be an
// object or a list of objects.
func parseDocuments(source string, data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // UTF-8 BOM
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return []document{{source: source, err: errors.New("no documents found")}}
	}
	var objs []json.RawMessage
	var errs []error
	if trimmed[0] == '{' || trimmed[0] == '[' {
		var err error
		objs, err = splitJSON(data)
		if err != nil {
			// Perhaps YAML flow style ({a: 1}); fall back, but report the
			// JSON error if YAML can't make sense of it either.
			yobjs, yerrs := splitYAML(data)
			if len(yerrs) > 0 {
				return []document{{source: source, err: fmt.Errorf("cannot parse JSON: %w", err)}}
			}
			objs = yobjs
		}
	} else {
		objs, errs = splitYAML(data)
	}
	total := len(objs) // failed YAML documents are nil entries
	if total == 0 {
		return []document{{source: source, err: errors.New("no documents found")}}
	}
	var docs []document
	label := func(i int) string {
		if total == 1 {
			return source
		}
		return fmt.Sprintf("%s (document %d)", source, i+1)
	}
	for i, o := range objs {
		d := document{source: label(i)}
		if o == nil {
			d.err = errs[0]
			errs = errs[1:]
		} else if err := json.Unmarshal(o, &d.fields); err != nil || d.fields == nil {
			d.err = errors.New("document is not an object")
		}
		docs = append(docs, d)
	}
	return docs
}

// splitJSON returns each top-level object of a JSON stream, flattening arrays.
func splitJSON(data []byte) ([]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var out []json.RawMessage
	for {
		var v json.RawMessage
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		items, err := flatten(v)
		if err != nil {
			return nil, err
		}
		out = append(out, items...)
	}
}

// flatten returns v itself for an object, or the elements of an array.
func flatten(v json.RawMessage) ([]json.RawMessage, error) {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0 || bytes.Equal(v, []byte("null")):
		return nil, nil
	case v[0] == '{':
		return []json.RawMessage{v}, nil
	case v[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(v, &items); err != nil {
			return nil, err
		}
		return items, nil // non-objects are reported by parseDocuments
	default:
		return []json.RawMessage{v}, nil
	}
}

// splitYAML converts each YAML document to JSON. A document that fails to
// parse is returned as a nil entry in objs, with its error in errs (in order).
func splitYAML(data []byte) (objs []json.RawMessage, errs []error) {
	for _, chunk := range yamlChunks(data) {
		j, err := yaml.YAMLToJSONStrict(chunk)
		if err != nil {
			objs = append(objs, nil)
			errs = append(errs, fmt.Errorf("cannot parse YAML: %w", err))
			continue
		}
		items, err := flatten(j)
		if err != nil {
			objs = append(objs, nil)
			errs = append(errs, fmt.Errorf("cannot parse YAML: %w", err))
			continue
		}
		objs = append(objs, items...)
	}
	return objs, errs
}

// yamlChunks splits a YAML stream at document markers ("---" lines). Text
// after "--- " on a marker line belongs to the new document.
func yamlChunks(data []byte) [][]byte {
	var chunks [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(cur.Bytes())) > 0 {
			chunks = append(chunks, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), len(data)+1)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case line == "---" || strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "---\t"):
			flush()
			cur.WriteString(strings.TrimSpace(line[3:]))
			cur.WriteByte('\n')
		case line == "...":
			flush()
		default:
			cur.WriteString(line)
			cur.WriteByte('\n')
		}
	}
	flush()
	return chunks
}
