package model

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MergeConfig returns the effective provider config spec: override
// deep-merged onto base, the override winning per key (objects merge
// recursively; any other value replaces). An empty side yields the other.
func MergeConfig(base, override json.RawMessage) (json.RawMessage, error) {
	if isEmptyJSON(override) {
		return base, nil
	}
	if isEmptyJSON(base) {
		return override, nil
	}
	var b, o any
	if err := json.Unmarshal(base, &b); err != nil {
		return nil, fmt.Errorf("decode default config: %w", err)
	}
	if err := json.Unmarshal(override, &o); err != nil {
		return nil, fmt.Errorf("decode override config: %w", err)
	}
	out, err := json.Marshal(mergeValue(b, o))
	if err != nil {
		return nil, fmt.Errorf("encode effective config: %w", err)
	}
	return out, nil
}

func mergeValue(base, over any) any {
	bm, ok1 := base.(map[string]any)
	om, ok2 := over.(map[string]any)
	if !ok1 || !ok2 {
		return over
	}
	out := make(map[string]any, len(bm)+len(om))
	for k, v := range bm {
		out[k] = v
	}
	for k, v := range om {
		out[k] = mergeValue(bm[k], v)
	}
	return out
}

func isEmptyJSON(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) == 0 || bytes.Equal(b, []byte("null"))
}
