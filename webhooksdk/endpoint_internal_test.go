package webhooksdk

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestBatchResponse: the answer joined by hand is byte for byte what json.Marshal makes
// of the same BatchResponse, with no results, one, and several.
func TestBatchResponse(t *testing.T) {
	t.Parallel()
	one, err := json.Marshal(Result{TaskID: "a", ClaimEpoch: 1, Outcome: &Outcome{Status: json.RawMessage(`{"x":"<&>"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	two, err := json.Marshal(BatchResult{Result: Result{TaskID: "b", ClaimEpoch: 2}, Accepted: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, results := range [][]json.RawMessage{{}, {one}, {one, two, one}} {
		want, err := json.Marshal(BatchResponse{Type: EnvelopeBatch, Results: results})
		if err != nil {
			t.Fatal(err)
		}
		if got := batchResponse(results); !bytes.Equal(got, want) {
			t.Errorf("batchResponse(%d results) = %s, want %s", len(results), got, want)
		}
	}
}
