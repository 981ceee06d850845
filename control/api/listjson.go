package api

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/danielgtaylor/huma/v2"
)

// itemsWriter is a list body that writes itself as JSON item by item (see
// writeItems) rather than being encoded in one piece.
type itemsWriter interface {
	writeJSON(w io.Writer) error
}

// jsonFormat is huma's JSON format, except for an itemsWriter. A page of
// large items encoded in one piece is held three times at its peak: the
// items, the encoder's buffer, and the response; written item by item it is
// held about once, each item dropped as it is written.
func jsonFormat() huma.Format {
	return huma.Format{
		Marshal: func(w io.Writer, v any) error {
			if iw, ok := v.(itemsWriter); ok {
				return iw.writeJSON(w)
			}
			return huma.DefaultJSONFormat.Marshal(w, v)
		},
		Unmarshal: huma.DefaultJSONFormat.Unmarshal,
	}
}

// writeItems writes {"items":[…],"next_cursor":…} to w (next_cursor left
// out when empty), the bytes huma's JSON format would write, one item at a
// time, zeroing each item once written so that the garbage collector can
// take it while the rest are written.
func writeItems[T any](w io.Writer, items []T, nextCursor string) error {
	enc := json.NewEncoder(noNewline{w})
	enc.SetEscapeHTML(false) // as huma.DefaultJSONFormat
	if _, err := io.WriteString(w, `{"items":[`); err != nil {
		return err
	}
	for i := range items {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		if err := enc.Encode(&items[i]); err != nil {
			return err
		}
		var zero T
		items[i] = zero
	}
	if _, err := io.WriteString(w, "]"); err != nil {
		return err
	}
	if nextCursor != "" {
		if _, err := io.WriteString(w, `,"next_cursor":`); err != nil {
			return err
		}
		if err := enc.Encode(nextCursor); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "}\n")
	return err
}

// noNewline drops the newline json.Encoder ends each value with: compact
// JSON holds no other raw newline (one in a string is escaped).
type noNewline struct{ w io.Writer }

func (n noNewline) Write(p []byte) (int, error) {
	if _, err := n.w.Write(bytes.TrimSuffix(p, []byte("\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (l ResourceList) writeJSON(w io.Writer) error       { return writeItems(w, l.Items, l.NextCursor) }
func (l ChildList) writeJSON(w io.Writer) error          { return writeItems(w, l.Items, l.NextCursor) }
func (l ProviderConfigList) writeJSON(w io.Writer) error { return writeItems(w, l.Items, l.NextCursor) }
func (l OperationList) writeJSON(w io.Writer) error      { return writeItems(w, l.Items, l.NextCursor) }
func (l SpecHistory) writeJSON(w io.Writer) error        { return writeItems(w, l.Items, l.NextCursor) }
